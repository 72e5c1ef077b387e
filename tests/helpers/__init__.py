"""Waiting in tests: for an outcome, never for a guess at how fast this machine is.

A wait ends as soon as what it waits for has happened (a process started, a task
paused, a line was printed, a server answers) and fails only at ``CEILING``. On a
loaded machine (the suite beside other jobs on 2 cores) something that takes a second
alone can take thirty; a broken outcome never comes at all. So the ceiling is far
above any machine's pace, and below pytest's own per-test timeout, so that a wait that
fails says what it waited for.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

CEILING = 120.0
"""Seconds after which a wait for an outcome gives up (pytest's timeout is 180 s)."""


async def eventually(
    check: Callable[[], T | Awaitable[T]],
    what: str = "the condition",
    *,
    ceiling: float = CEILING,
    every: float = 0.05,
) -> T:
    """``check()`` once it is truthy (it may be a coroutine function), polled ``every`` s.

    Raises:
        AssertionError: ``check()`` was still falsy after ``ceiling`` seconds; the message
            names ``what`` and the last value.
    """
    deadline = time.monotonic() + ceiling
    while True:
        value: Any = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {ceiling:g}s for {what}; last: {value!r}")
        await asyncio.sleep(every)
