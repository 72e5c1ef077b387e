"""What every subagent worker does around its workflows and activities.

* Metrics (``durable_subagents.telemetry._metrics``): tasks started and finished, model-turn
  latency and tokens, tool calls by outcome. They are recorded here, outside the
  workflow loop and the activities, from what goes in and comes out.
* The hand-back of a drained worker: when a worker shuts down (SIGTERM) it stops
  polling at once and gives running model turns and tool calls its drain timeout
  (``graceful_shutdown_timeout``) to finish. Temporal then cancels what still runs; a
  cancelled attempt would be retried only after the activity's retry backoff. Here it
  fails instead with a retryable ``WorkerShutdown`` error whose retry delay is near
  zero, so another worker starts it at once (the tool's processes were killed by the
  cancellation first).
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory, FailureError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from durable_subagents.providers._names import named_model
from durable_subagents.telemetry import _metrics
from durable_subagents.types import TaskResult
from durable_subagents.wire._payloads import (
    COMPACT_ACTIVITY,
    MODEL_TURN_ACTIVITY,
    RUN_TOOL_ACTIVITY,
    WORKFLOW,
    CompactInput,
    CompactResult,
    ModelTurnInput,
    ModelTurnResult,
    TaskInput,
    ToolCallInput,
    ToolCallResult,
)

__all__ = ["HANDED_BACK", "OperationsInterceptor"]

HANDED_BACK = "WorkerShutdown"
"""The error type of an attempt a shutting-down worker handed back."""
HAND_BACK_DELAY = timedelta(milliseconds=100)
"""The retry delay of a handed-back attempt: the server schedules it again at once."""


class OperationsInterceptor(Interceptor):
    """Metrics and the drain's hand-back, for a subagent worker (see the module's doc).

    Args:
        labels: Bounds the label values (the worker's tools and default model).
    """

    def __init__(self, labels: _metrics.Labels) -> None:
        self.labels = labels

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        """Wrap the worker's activities."""
        return _Activities(next, self.labels)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        """Count the subagent workflow's runs."""
        labels = self.labels

        class _Bound(_TaskRuns):
            bound = labels

        return _Bound


class _Activities(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, labels: _metrics.Labels) -> None:
        super().__init__(next)
        self.labels = labels

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        kind = activity.info().activity_type
        if kind == COMPACT_ACTIVITY:
            compacted = await super().execute_activity(input)
            if isinstance(compacted, CompactResult) and compacted.changed:
                args = input.args[0] if input.args else None
                agent = args.turn.agent_name if isinstance(args, CompactInput) else ""
                _metrics.record_compaction(
                    activity.metric_meter(),
                    agent=self.labels.agent(agent or ""),
                    kind="summary" if compacted.compaction.model_calls else "notes",
                )
                if compacted.usage.cost_usd is not None and isinstance(args, CompactInput):
                    _metrics.record_model_cost(
                        activity.metric_meter(),
                        model=self._model(args.turn.model),
                        agent=self.labels.agent(agent or ""),
                        usd=compacted.usage.cost_usd,
                    )
            return compacted
        if kind not in (MODEL_TURN_ACTIVITY, RUN_TOOL_ACTIVITY):
            return await super().execute_activity(input)
        started = time.monotonic()
        outcome = "failed"
        result: Any = None
        try:
            result = await super().execute_activity(input)
            outcome = "ok"
            return result
        except asyncio.CancelledError:
            details = activity.cancellation_details()
            if details is None or not details.worker_shutdown or activity.info().is_local:
                outcome = "cancelled"
                raise
            outcome = "handed_back"
            raise ApplicationError(
                f"the worker shut down before this {_what(kind)} finished (its drain "
                "timeout, SUBAGENTS_DRAIN_TIMEOUT, ran out); handed back to another worker",
                type=HANDED_BACK,
                next_retry_delay=HAND_BACK_DELAY,
                category=ApplicationErrorCategory.BENIGN,
            ) from None
        except ApplicationError as err:
            outcome = "failed" if err.non_retryable else "retried"
            raise
        finally:
            self._record(kind, input, result, outcome, time.monotonic() - started)

    def _record(
        self, kind: str, input: ExecuteActivityInput, result: Any, outcome: str, seconds: float
    ) -> None:
        args = input.args[0] if input.args else None
        meter = activity.metric_meter()
        if kind == MODEL_TURN_ACTIVITY:
            if isinstance(result, ModelTurnResult) and result.model_queue:
                return  # sent on to the provider's queue: no turn here
            answered = isinstance(result, ModelTurnResult)
            name = result.model if answered else getattr(args, "model", "")
            tokens = None
            if isinstance(result, ModelTurnResult):
                usage = result.usage
                tokens = {
                    "input": usage.input_tokens,
                    "output": usage.output_tokens,
                    "reasoning": usage.reasoning_tokens,
                    # Cache counts, for providers and versions that report them.
                    "cache_read": getattr(usage, "cache_read_tokens", 0),
                    "cache_write": getattr(usage, "cache_write_tokens", 0),
                }
            _metrics.record_model_turn(
                meter, model=self._model(name), outcome=outcome, seconds=seconds, tokens=tokens
            )
            if isinstance(result, ModelTurnResult) and result.usage.cost_usd is not None:
                agent = args.agent_name if isinstance(args, ModelTurnInput) else ""
                _metrics.record_model_cost(
                    meter,
                    model=self._model(name),
                    agent=self.labels.agent(agent),
                    usd=result.usage.cost_usd,
                )
            for read in result.read_results.values() if answered else ():
                # the reads the turn ran itself count as the calls they are
                outcome = "error" if read.is_error else "ok"
                _metrics.record_tool_call(
                    meter, tool=self.labels.tool(read.tool_name), outcome=outcome
                )
            return
        if isinstance(result, ToolCallResult):
            tool = result.tool_name
            outcome = "error" if result.is_error else "ok"
        else:
            tool = args.call.name if isinstance(args, ToolCallInput) else ""
        _metrics.record_tool_call(meter, tool=self.labels.tool(tool), outcome=outcome)

    def _model(self, name: str) -> str:
        labels = self.labels
        return named_model(name, labels.default_model, labels.models, labels.endpoints)


def _what(kind: str) -> str:
    return "model turn" if kind == MODEL_TURN_ACTIVITY else "tool call"


class _TaskRuns(WorkflowInboundInterceptor):
    """Counts the subagent workflow's runs that start work and those that end.

    The workflow's meter records nothing during replay, so a run is counted once.
    """

    bound: _metrics.Labels

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        task = input.args[0] if input.args else None
        if workflow.info().workflow_type != WORKFLOW or not isinstance(task, TaskInput):
            return await super().execute_workflow(input)
        meter = workflow.metric_meter()
        agent = self.bound.agent(task.agent.name)
        if task.state is None or task.state.awaiting_input:
            run = "new" if task.state is None else "follow_up"
            _metrics.record_task_started(meter, agent, run)
        try:
            result = await super().execute_workflow(input)
        except workflow.ContinueAsNewError:
            raise
        except asyncio.CancelledError:
            _metrics.record_task_finished(meter, agent, "cancelled")
            raise
        except FailureError:
            _metrics.record_task_finished(meter, agent, "failed")
            raise
        except Exception as err:
            # A bug: this workflow task fails and is retried; the task is held, not ended.
            _metrics.record_task_held(meter, agent, type(err).__name__)
            raise
        if isinstance(result, TaskResult):
            _metrics.record_task_finished(meter, agent, result.status.value)
        return result
