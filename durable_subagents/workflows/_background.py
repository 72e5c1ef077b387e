"""Work a handler starts and does not wait for: tracked, and finished before the run ends.

A signal handler must return at once, so what it sets going (a decision routed on to
a child, a pause reported to the parent) runs as a task of its own. Each is kept
here: a failure is logged, and the run waits for all of them before it closes or
continues as new, so none is dropped or fails unseen. Workflow code: deterministic.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from temporalio import workflow

__all__ = ["Background"]


class Background:
    """The tasks handlers started that are still running."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(self, work: Coroutine[Any, Any, Any], what: str) -> None:
        """Run ``work`` (described as ``what`` if it fails) until the run settles it."""
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._done(done, what))

    def _done(self, task: asyncio.Task[Any], what: str) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            workflow.logger.warning("%s failed: %s: %s", what, type(error).__name__, error)

    @property
    def running(self) -> int:
        """How many are still running."""
        return len(self._tasks)

    async def settle(self) -> None:
        """Wait until every one has finished (before the run closes or continues as new)."""
        await workflow.wait_condition(lambda: not self._tasks)
