"""Heartbeats of a running activity: how a cancel reaches it, and live text travels.

A model turn or a tool call heartbeats in the background, so a stalled call still
notices a cancellation; a model turn's heartbeats also carry its text so far. An
attempt that may have outlived its task (a retry, or one that waited in the queue)
asks the server first.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import WorkflowExecutionStatus
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionRequest

from durable_subagents.context._live_text import LiveText

__all__ = [
    "HEARTBEAT_EVERY",
    "LIVE_EVERY",
    "STALE_AFTER",
    "CallProgress",
    "cancel_requested",
    "heartbeat",
    "heartbeating",
    "may_be_stale",
]

HEARTBEAT_EVERY = 1.0
"""Seconds between heartbeats of a running activity (cancellation arrives with them)."""


def heartbeat(*details: Any) -> None:
    with contextlib.suppress(RuntimeError):
        if not activity.info().is_local:  # a local activity's workflow task beats for it
            activity.heartbeat(*details)


LIVE_EVERY = 0.25
"""Seconds between looks for new live text (the worker sends at most one heartbeat a
second and keeps the latest details for the next)."""


class CallProgress:
    """What a running tool call's heartbeats carry: when it started, its latest output.

    A retry of a call whose worker died reads them from the last heartbeat
    (``activity.info().heartbeat_details``) to tell the model what happened.
    """

    TAIL = 4000
    """Characters of the latest output kept."""

    def __init__(self) -> None:
        self.started = datetime.now(UTC)
        self._tail = bytearray()

    def add(self, data: bytes) -> None:
        self._tail += data
        if len(self._tail) > self.TAIL * 4:
            del self._tail[: len(self._tail) - self.TAIL * 4]

    def details(self) -> dict[str, str]:
        text = self._tail.decode("utf-8", "replace")[-self.TAIL :]
        return {"started": self.started.isoformat(), "output": text}


@contextlib.asynccontextmanager
async def heartbeating(
    live: LiveText | None = None, progress: CallProgress | None = None
) -> AsyncIterator[None]:
    """Heartbeat in the background so a stalled call still notices cancellation.

    With ``live``, every heartbeat carries the model's text so far (see ``_live_text``);
    with ``progress``, a tool call's start and latest output, and one heartbeat goes at
    once (a call cut off within its first second is known to have started).
    """
    if progress is not None:
        heartbeat(progress.details())

    async def beat() -> None:
        # Sleep first: a call that ends within a second costs no heartbeat round trip.
        await asyncio.sleep(HEARTBEAT_EVERY)
        since = HEARTBEAT_EVERY
        while True:
            if live is not None and (live.changed or since >= HEARTBEAT_EVERY):
                heartbeat(live.details())
                since = 0.0
            elif live is None:
                heartbeat(*(() if progress is None else (progress.details(),)))
                since = 0.0
            step = LIVE_EVERY if live is not None else HEARTBEAT_EVERY
            await asyncio.sleep(step)
            since += step

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


STALE_AFTER = timedelta(seconds=2)
"""An attempt that waited this long to start may belong to a task cancelled meanwhile."""


def may_be_stale(info: activity.Info) -> bool:
    """Whether to ask the server for a cancel before any side effect.

    A retried attempt, or one that waited in the queue (every worker was down), can
    start on a worker before the workflow has seen a cancel request. A fresh attempt
    that started at once costs nothing extra.
    """
    if info.attempt > 1:
        return True
    scheduled = info.current_attempt_scheduled_time
    return datetime.now(UTC) - scheduled > STALE_AFTER


async def cancel_requested() -> bool:
    """Whether the activity's task was asked to cancel, or has closed already.

    The server retries activities by itself: a retry can start on a new worker before
    the workflow has processed a cancel request, so a retried attempt checks first.
    It reads the raw description: the two fields it needs, without decoding the
    task's memo and search attributes.
    """
    info = activity.info()
    if not info.workflow_id:
        return False
    client = activity.client()
    desc = await client.workflow_service.describe_workflow_execution(
        DescribeWorkflowExecutionRequest(
            namespace=client.namespace,
            execution=WorkflowExecution(
                workflow_id=info.workflow_id, run_id=info.workflow_run_id or ""
            ),
        ),
        retry=True,
    )
    status = desc.workflow_execution_info.status
    if status != WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_RUNNING:
        return True
    return bool(desc.workflow_extended_info.cancel_requested)
