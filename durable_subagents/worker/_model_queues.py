"""Fleet-wide model rate limits: a provider's model turns on a queue of their own.

A provider's limit (requests or tokens a minute) holds for an account, whatever number
of workers share it; each worker throttling itself would need to know how many others
run. Temporal can hold the limit instead: a worker sets
``max_task_queue_activities_per_second`` on a task queue, and the server dispatches
that queue's activities no faster, to all its workers together.

So with ``SUBAGENTS_MODEL_RATE_LIMITS=openai=5`` a worker also serves
``<task queue>-model-openai`` (``_payloads.model_queue``), with ``model_turn`` and
``compact_context`` (whose summary is a model call) alone, at that rate. A model turn of
an OpenAI task that reaches the task's own queue is not answered there: the activity
returns the queue's name, and the task schedules that turn, its later ones and its
compactions there (one extra activity per run). A 429's ``retry-after``
still sets the retry delay of a turn the provider refused anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from temporalio.worker import Worker

from durable_subagents.wire._payloads import COMPACT_ACTIVITY, MODEL_TURN_ACTIVITY, model_queue
from durable_subagents.worker._lifecycle import RunOnlyPlugin
from durable_subagents.worker._tool_queue import (
    SHARED_OPTIONS,
    activity_named,
    building_tool_worker,
    shut_down_with,
    side_worker,
)

__all__ = ["ModelQueuesPlugin", "model_queues_served"]


@contextlib.asynccontextmanager
async def model_queues_served(
    worker: Worker, limits: Mapping[str, float], slots: int
) -> AsyncIterator[list[Worker]]:
    """Serve a rate-limited queue per provider of ``limits`` while the block runs.

    Does nothing for a worker without the model-turn activity (a tools worker) or for
    a side worker itself. The queues' workers start shutting down when ``worker`` does.

    Args:
        worker: The subagent worker (its client, queue, activities and options).
        limits: Provider -> model turns per second, for all workers of the queue.
        slots: Model turns each queue's worker runs at once.
    """
    config = worker.config(active_config=True)
    activities = config.get("activities") or ()
    turn = activity_named(activities, MODEL_TURN_ACTIVITY)
    compact = activity_named(activities, COMPACT_ACTIVITY)
    if not limits or turn is None or building_tool_worker():
        yield []
        return
    options: dict[str, Any] = {k: config[k] for k in SHARED_OPTIONS if config.get(k)}  # type: ignore[literal-required]
    workers = [
        side_worker(
            config["client"],
            model_queue(worker.task_queue, provider),
            [turn] if compact is None else [turn, compact],
            slots,
            options,
            max_task_queue_activities_per_second=rate,
        )
        for provider, rate in sorted(limits.items())
    ]
    follows = [asyncio.create_task(shut_down_with(worker, side)) for side in workers]
    try:
        async with contextlib.AsyncExitStack() as stack:
            for side in workers:
                await stack.enter_async_context(side)
            yield workers
    finally:
        for follow in follows:
            follow.cancel()


class ModelQueuesPlugin(RunOnlyPlugin):
    """Runs the rate-limited model queues beside the worker it is given to."""

    def __init__(self, limits: Mapping[str, float], slots: int) -> None:
        self.limits = dict(limits)
        self.slots = slots

    def name(self) -> str:
        """The plugin's name."""
        return "durable_subagents.ModelQueuesPlugin"

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Run ``worker`` with its providers' queues served."""
        async with model_queues_served(worker, self.limits, self.slots):
            await next(worker)
