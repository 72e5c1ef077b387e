"""Tasks a bug holds, failed after a grace period (``SUBAGENTS_FAIL_HELD_AFTER``, opt in).

A bug in workflow code fails the workflow task, which Temporal retries: the task is held
at its last step until a fixed worker resumes it. An operator who would rather have it
fail sets a grace period: one worker of the task queue at a time (under a lease, as the
blob sweep) lists the queue's held tasks (``TemporalReportedProblems``) and sends each
one held longer the ``give_up`` signal. The task's next attempt reads it and, when the
bug strikes again, fails with the error (``HeldByBug``) instead of failing the attempt;
a task a fix has resumed meanwhile goes on.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from datetime import UTC, datetime, timedelta

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durable_subagents.wire._payloads import GIVE_UP_SIGNAL, WORKFLOW
from durable_subagents.worker._sweep import JITTER, take_named_lease

log = logging.getLogger(__name__)

__all__ = ["give_up_held", "give_up_held_forever"]

MOST_EVERY = 60.0
"""The longest wait between two looks at the held tasks."""


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


async def give_up_held(client: Client, task_queue: str, after: float) -> list[str]:
    """Send ``give_up`` to the queue's tasks a failing workflow task has held over ``after`` s.

    Returns:
        The tasks it was sent to.
    """
    query = (
        f"WorkflowType = '{WORKFLOW}' AND ExecutionStatus = 'Running' AND "
        f"TemporalReportedProblems IS NOT NULL AND TaskQueue = {_quote(task_queue)}"
    )
    now = datetime.now(UTC)
    given: list[str] = []
    try:
        async for execution in client.list_workflows(query):
            handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
            raw = (await handle.describe()).raw_description
            if not raw.HasField("pending_workflow_task") or raw.pending_workflow_task.attempt < 2:
                continue  # resumed meanwhile
            since = raw.pending_workflow_task.original_scheduled_time.ToDatetime(UTC)
            held = (now - since).total_seconds()
            if held < after:
                continue
            reason = (
                f"held by a failing workflow task for {held:.0f} s, over "
                f"SUBAGENTS_FAIL_HELD_AFTER ({after:g} s)"
            )
            await handle.signal(GIVE_UP_SIGNAL, reason)
            log.warning("task %s: %s; it fails at its next attempt", execution.id, reason)
            given.append(execution.id)
    except RPCError as err:
        if err.status != RPCStatusCode.INVALID_ARGUMENT:
            raise
        log.warning(
            "SUBAGENTS_FAIL_HELD_AFTER: the server does not flag held tasks "
            "(TemporalReportedProblems, servers 1.29 and later); nothing is given up"
        )
    return given


async def give_up_held_forever(client: Client, task_queue: str, after: float) -> None:
    """Look at the queue's held tasks every ``min(after / 2, 60)`` s, on one worker at once.

    Runs until cancelled; errors are logged and the next period tries again.
    """
    every = min(after / 2, MOST_EVERY)
    ttl = timedelta(seconds=every * (1 - JITTER))
    key = f"{client.namespace} {task_queue}".encode()
    lease = "subagents-held-" + hashlib.sha256(key).hexdigest()[:16]
    what = f"it gives up the tasks of {task_queue} held over {after:g} s"
    delay = random.uniform(0, every * JITTER)
    while True:
        await asyncio.sleep(delay)
        delay = every * random.uniform(1 - JITTER, 1 + JITTER)
        try:
            if await take_named_lease(client, lease, client.identity, ttl, what):
                await give_up_held(client, task_queue, after)
        except Exception:
            log.exception("looking for held tasks failed; will retry")
