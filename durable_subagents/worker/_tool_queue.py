"""The tool queue's worker: tool calls on slots of their own.

A worker's activity slots are one pool. Tool calls may each run for up to 600 s, and a
task's model chooses them: with one pool, a prompt-injected task and its 16 children
running 8 ``sleep 600`` each held 136 slots, more than a worker's default 100, and every
other task's next model turn waited in the queue behind them. So tool calls go to a
queue of their own (``<task queue>-tools``, see ``_payloads.tool_queue``), served
in the same process by a second ``Worker`` with its own slots (``max_tool_calls``): a
stalled task can fill those, never the slots of the model turns.

``create_worker`` and ``SubagentsPlugin`` both run it beside the worker they build, for
as long as that worker runs. Reads a task runs as local activities stay on the workflow
worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import temporalio.activity
from temporalio.client import Client
from temporalio.worker import Worker

from durable_subagents.wire._payloads import RUN_TOOL_ACTIVITY, SETTLE_CHANGES_ACTIVITY, tool_queue
from durable_subagents.worker._lifecycle import RunOnlyPlugin

__all__ = [
    "SHARED_OPTIONS",
    "ToolQueuePlugin",
    "activity_named",
    "building_tool_worker",
    "shut_down_with",
    "side_worker",
    "tool_calls_served",
    "tool_worker",
]

SHARED_OPTIONS = (
    "interceptors",
    "identity",  # the same process: the Web UI names it as the one that ran the call
    "activity_executor",
    "shared_state_manager",
    "max_heartbeat_throttle_interval",
    "default_heartbeat_throttle_interval",
    "graceful_shutdown_timeout",
    "deployment_config",
    "debug_mode",
)
"""Options the tool worker takes from the worker it serves."""

_BUILDING: contextvars.ContextVar[bool] = contextvars.ContextVar("tool_worker", default=False)
_TOOL_WORKERS: weakref.WeakSet[Worker] = weakref.WeakSet()
_SERVED: weakref.WeakSet[Worker] = weakref.WeakSet()


def building_tool_worker() -> bool:
    """Whether the worker being configured is a tool worker (plugins leave it alone)."""
    return _BUILDING.get()


@contextlib.asynccontextmanager
async def tool_calls_served(worker: Worker, max_tool_calls: int) -> AsyncIterator[None]:
    """Serve ``worker``'s tool queue while the block runs.

    Does nothing for a worker without the subagent tool activity, for one that runs
    only local activities, for a tool worker itself, and for a worker already served
    (``create_worker``'s worker whose client has ``SubagentsPlugin`` too). The tool
    worker starts shutting down when ``worker`` does, so both stop within one graceful
    timeout.
    """
    config = worker.config(active_config=True)
    run_tool = tool_queue_activities(config.get("activities") or ())
    if (
        not run_tool
        or config.get("no_remote_activities")
        or worker in _TOOL_WORKERS
        or worker in _SERVED
    ):
        yield
        return
    options: dict[str, Any] = {k: config[k] for k in SHARED_OPTIONS if config.get(k)}  # type: ignore[literal-required]
    tools = tool_worker(config["client"], worker.task_queue, run_tool, max_tool_calls, options)
    _SERVED.add(worker)
    follow = asyncio.create_task(shut_down_with(worker, tools))
    try:
        async with tools:
            yield
    finally:
        follow.cancel()
        _SERVED.discard(worker)


def tool_queue_activities(activities: Sequence[Callable[..., Any]]) -> list[Callable[..., Any]]:
    """What a tool queue serves of ``activities``: ``run_tool`` and ``settle_changes``.

    ``settle_changes`` applies a call's held changes where its tools run. Empty without
    ``run_tool``.
    """
    run_tool = activity_named(activities, RUN_TOOL_ACTIVITY)
    if run_tool is None:
        return []
    settle = activity_named(activities, SETTLE_CHANGES_ACTIVITY)
    return [run_tool] if settle is None else [run_tool, settle]


def tool_worker(
    client: Client,
    task_queue: str,
    run_tool: Callable[..., Any] | Sequence[Callable[..., Any]],
    max_tool_calls: int,
    options: dict[str, Any],
) -> Worker:
    """A worker of ``task_queue``'s tool queue: ``run_tool`` (and ``settle_changes``) alone.

    Plugins of the client (``SubagentsPlugin``) leave it as it is.
    """
    return side_worker(client, tool_queue(task_queue), run_tool, max_tool_calls, options)


def side_worker(
    client: Client,
    queue: str,
    activity: Callable[..., Any] | Sequence[Callable[..., Any]],
    slots: int,
    options: dict[str, Any],
    **extra: Any,
) -> Worker:
    """A worker of one activity (or a few) on a queue of its own, beside a subagent worker.

    Plugins of the client (``SubagentsPlugin``) leave it as it is.
    """
    token = _BUILDING.set(True)
    try:
        side = Worker(
            client,
            task_queue=queue,
            activities=list(activity) if isinstance(activity, Sequence) else [activity],
            **{**options, "max_concurrent_activities": slots, **extra},
        )
    finally:
        _BUILDING.reset(token)
    _TOOL_WORKERS.add(side)
    return side


async def shut_down_with(worker: Worker, tools: Worker) -> None:
    """Start the tool worker's shutdown as soon as ``worker``'s is asked for."""
    requested = getattr(worker, "_shutdown_event", None)
    if not isinstance(requested, asyncio.Event):
        return  # the tool worker then stops after the worker, not with it
    await requested.wait()
    await tools.shutdown()


def activity_named(
    activities: Sequence[Callable[..., Any]], name: str
) -> Callable[..., Any] | None:
    """The activity of ``activities`` registered as ``name``, if any."""
    for fn in activities:
        defn = temporalio.activity._Definition.from_callable(fn)
        if defn is not None and defn.name == name:
            return fn
    return None


class ToolQueuePlugin(RunOnlyPlugin):
    """Runs the tool worker beside the worker it is given to (see the module's doc)."""

    def __init__(self, max_tool_calls: int) -> None:
        self.max_tool_calls = max_tool_calls

    def name(self) -> str:
        """The plugin's name."""
        return "durable_subagents.ToolQueuePlugin"

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Run ``worker`` with its tool queue served."""
        async with tool_calls_served(worker, self.max_tool_calls):
            await next(worker)
