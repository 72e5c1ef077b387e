"""Which activity options a run schedules with: its worker's, once, narrowed by its agent.

A run's input carries the options it is bound by (a child's parent's, a continued run's
predecessor's); a run without any asks the worker that runs its first step, by a local
activity whose result the history keeps, so a replay on any worker schedules the same.
Runs recorded before there were such options replay with the defaults, which are the
values those runs used. Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from durable_subagents.agents import DEFAULT_ACTIVITY_OPTIONS, ActivityConfig, ActivityOptions
    from durable_subagents.errors import NON_RETRYABLE_ERROR_TYPES
    from durable_subagents.wire._payloads import ACTIVITY_OPTIONS_ACTIVITY, TaskInput, WorkerBounds

PATCH = "activity-options"
"""The ``workflow.patched`` id of asking the worker for its options (0.2.0 runs did not)."""


async def worker_options(inp: TaskInput) -> tuple[ActivityOptions, int | None]:
    """The options this run is bound by, before its agent narrows them, and its depth.

    Those its input carries; else its worker's, asked once and recorded, with the
    worker's ``SUBAGENTS_MAX_DEPTH`` (None: the input's options, or a worker that did
    not say); a run recorded before the worker was asked gets the defaults it ran with.
    """
    if inp.activity_options is not None:
        return inp.activity_options, None
    if not workflow.patched(PATCH):
        return DEFAULT_ACTIVITY_OPTIONS, None
    bounds = await workflow.execute_local_activity(
        ACTIVITY_OPTIONS_ACTIVITY,
        result_type=WorkerBounds,
        start_to_close_timeout=timedelta(seconds=10),
        summary="activity options",
    )
    return bounds.options(), bounds.max_depth


async def bound_by_worker(inp: TaskInput) -> TaskInput:
    """``inp`` with the activity options it is bound by, and its depth within its worker's.

    A spawn's ``max_depth`` beyond the worker's ``SUBAGENTS_MAX_DEPTH`` is kept at it.
    """
    options, most = await worker_options(inp)
    update: dict[str, Any] = {"activity_options": options}
    if inp.max_depth is not None and most is not None and inp.max_depth > most:
        update["max_depth"] = most
    return inp.model_copy(update=update)


def task_options(inp: TaskInput, *, warn: bool = False) -> ActivityOptions:
    """The options a task's activities are scheduled with: its input's, narrowed by its agent.

    Also what its children are bound by. ``warn``: log what the agent asked for beyond
    its worker's options (once a run).
    """
    base = inp.activity_options or DEFAULT_ACTIVITY_OPTIONS
    options, wider = base.narrowed(inp.agent.activity_options)
    if wider and warn:
        workflow.logger.warning(
            "agent %r asks for wider activity options than its worker gives: %s",
            inp.agent.name,
            "; ".join(wider),
        )
    return options


def scheduled_with(config: ActivityConfig, *, heartbeat: bool = True) -> dict[str, Any]:
    """``workflow.execute_activity`` keyword arguments for one kind's options.

    ``heartbeat``: False for a local activity (it has no heartbeat timeout).
    """
    assert config.start_to_close is not None
    options: dict[str, Any] = {
        "start_to_close_timeout": timedelta(seconds=config.start_to_close),
        "retry_policy": retry_policy(config),
    }
    if heartbeat and config.heartbeat is not None:
        options["heartbeat_timeout"] = timedelta(seconds=config.heartbeat)
    if config.schedule_to_close is not None:
        options["schedule_to_close_timeout"] = timedelta(seconds=config.schedule_to_close)
    return options


def retry_policy(config: ActivityConfig) -> RetryPolicy:
    """The retry policy of one kind's options.

    The library's errors that no retry fixes are never retried.
    """
    return RetryPolicy(
        initial_interval=timedelta(seconds=config.initial_interval or 1),
        backoff_coefficient=config.backoff_coefficient or 2.0,
        maximum_interval=(
            timedelta(seconds=config.maximum_interval)
            if config.maximum_interval is not None
            else None
        ),
        maximum_attempts=config.maximum_attempts or 0,
        non_retryable_error_types=NON_RETRYABLE_ERROR_TYPES,
    )
