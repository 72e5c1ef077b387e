"""The product's own metrics, recorded on the Temporal runtime's meter.

They go wherever the runtime sends Temporal's own metrics (slots, schedule-to-start,
poll latencies): the worker's ``/metrics`` (the runtime's Prometheus exporter), or OTLP
when OpenTelemetry is configured. One pipeline, so the product's series carry the same
exporter's conventions and need no registry of their own.

Label values are bounded whatever a model or a spawner sends: no task or call ids, no
paths, no prompt text. A model is named only if a person configured it on the worker
(its ``SUBAGENTS_MODEL``), else ``<provider>:other`` (``providers.named_model``, which
the worker applies to ``Labels``' models): a subagent's model may be its parent
model's choice, and a server that answers to any name (llama.cpp's, a proxy) would
otherwise carry ``openai:<anything>`` out in a label. A tool is named only if
the worker has it, else ``unknown``; an agent only if its name looks like one, and at
most ``MAX_AGENTS`` of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from temporalio import activity
from temporalio.common import MetricMeter

__all__ = [
    "HISTOGRAM_BUCKETS",
    "MODEL_TURN_SECONDS",
    "Labels",
    "record_compaction",
    "record_model_cost",
    "record_model_turn",
    "record_sandbox_failure",
    "record_task_finished",
    "record_task_held",
    "record_task_started",
    "record_tool_call",
    "set_tasks_paused",
]

TASKS_STARTED = "subagents_tasks_started"
TASKS_FINISHED = "subagents_tasks_finished"
TASKS_HELD = "subagents_tasks_held"
TASKS_PAUSED = "subagents_tasks_paused"
MODEL_TURN_SECONDS = "subagents_model_turn_seconds"
MODEL_TOKENS = "subagents_model_tokens"
MODEL_COST = "subagents_model_cost_usd"
TOOL_CALLS = "subagents_tool_calls"
SANDBOX_FAILURES = "subagents_sandbox_start_failures"
COMPACTIONS = "subagents_compactions"

HISTOGRAM_BUCKETS: Mapping[str, list[float]] = {
    MODEL_TURN_SECONDS: [0.25, 0.5, 1, 2, 5, 10, 20, 40, 80, 160, 320, 600],
    MODEL_COST: [0.0001, 0.001, 0.01, 0.1, 1, 10],
}
"""Bucket bounds for the product's histograms (model turns take seconds to minutes)."""

MAX_AGENTS = 200
"""Distinct agent label values one process reports; later ones are ``other``."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class Labels:
    """Bounded label values for one worker process (see the module's doc).

    Args:
        tools: The tools the worker has.
        default_model: The worker's ``SUBAGENTS_MODEL``.
        models: Other ``provider:model`` names configured on the worker, named too
            (with the default; see ``providers.named_model``).
        endpoints: The worker's endpoint names (``SUBAGENTS_ENDPOINTS``): a model of
            one is ``<endpoint>:other`` unless configured.
    """

    def __init__(
        self,
        tools: set[str] | frozenset[str] = frozenset(),
        default_model: str = "",
        models: Iterable[str] = (),
        endpoints: frozenset[str] = frozenset(),
    ) -> None:
        self.tools = frozenset(tools)
        self.default_model = default_model or None
        self.models = tuple(models)
        self.endpoints = endpoints
        self._agents: set[str] = set()

    def agent(self, name: str) -> str:
        """The agent's name, or ``other``."""
        if name in self._agents:
            return name
        if not _NAME.fullmatch(name) or len(self._agents) >= MAX_AGENTS:
            return "other"
        self._agents.add(name)
        return name

    def tool(self, name: str) -> str:
        """The tool's name if the worker has it, else ``unknown``."""
        return name if name in self.tools else "unknown"


def record_task_started(meter: MetricMeter, agent: str, run: str) -> None:
    """A task began work: ``run`` is ``new`` or ``follow_up`` (continue-as-new is not)."""
    meter.create_counter(
        TASKS_STARTED, "Tasks that began work: new tasks and follow-up runs", "1"
    ).add(1, {"agent": agent, "run": run})


def record_task_finished(meter: MetricMeter, agent: str, status: str) -> None:
    """A task's run ended: completed, failed, cancelled or timed_out."""
    meter.create_counter(TASKS_FINISHED, "Task runs that ended, by status", "1").add(
        1, {"agent": agent, "status": status}
    )


def record_task_held(meter: MetricMeter, agent: str, error: str) -> None:
    """A task's workflow code raised (a bug): its workflow task failed and is retried.

    ``error`` is the exception's class name (from code, never a model's text).
    """
    meter.create_counter(
        TASKS_HELD,
        "Workflow tasks of subagent tasks that failed on a bug of workflow code and are "
        "retried (the task is held at its last step until a fixed worker runs it)",
        "1",
    ).add(1, {"agent": agent, "error": error[:64]})


def set_tasks_paused(meter: MetricMeter, task_queue: str, count: int) -> None:
    """How many tasks of the queue are paused for approval now (from Temporal's visibility)."""
    meter.create_gauge(TASKS_PAUSED, "Tasks paused for an approval now", "1").set(
        count, {"task_queue": task_queue}
    )


def record_model_turn(
    meter: MetricMeter,
    *,
    model: str,
    outcome: str,
    seconds: float,
    tokens: Mapping[str, int] | None = None,
) -> None:
    """One model-turn attempt: its latency and, when it answered, the tokens it used.

    Args:
        meter: The meter to record on.
        model: The bounded model label (``Labels.model``).
        outcome: ``ok``, ``retried`` (a retryable failure), ``failed``, ``cancelled`` or
            ``handed_back`` (the worker shut down).
        seconds: How long the attempt took.
        tokens: Token counts by kind (``input``, ``output``, ``reasoning``,
            ``cache_read``, ``cache_write``); zero counts are left out.
    """
    meter.create_histogram_float(
        MODEL_TURN_SECONDS, "Model-turn attempts: time from start to answer or failure", "s"
    ).record(seconds, {"model": model, "outcome": outcome})
    if tokens:
        counter = meter.create_counter(MODEL_TOKENS, "Tokens the models used, by kind", "1")
        for kind, count in tokens.items():
            if count > 0:
                counter.add(count, {"model": model, "kind": kind})


def record_model_cost(meter: MetricMeter, *, model: str, agent: str, usd: float) -> None:
    """What one model call cost (a turn, or a compaction's summary), at the worker's prices.

    A histogram: its ``_sum`` is the money spent by model and agent, its ``_count`` the
    calls priced. Calls of a model without a price are not recorded.
    """
    meter.create_histogram_float(
        MODEL_COST, "Model calls' cost at the worker's prices, by model and agent", "USD"
    ).record(usd, {"model": model, "agent": agent})


def record_tool_call(meter: MetricMeter, *, tool: str, outcome: str) -> None:
    """One tool-call attempt, by outcome.

    ``ok``, ``error`` (the model got an error), ``failed``, ``cancelled`` or
    ``handed_back``. ``server`` names an MCP tool's server (``mcp__<server>__<tool>``),
    and is empty for every other tool: a server's calls and errors sum by it.
    """
    server = tool.split("__")[1] if tool.startswith("mcp__") and tool.count("__") >= 2 else ""
    meter.create_counter(TOOL_CALLS, "Tool-call attempts, by tool and outcome", "1").add(
        1, {"tool": tool, "outcome": outcome, "server": server}
    )


def record_sandbox_failure(reason: str) -> None:
    """A tool's sandbox could not start; called from the tool's activity.

    ``reason``: ``unavailable`` (no sandbox on this machine) or ``spawn`` (the process
    could not be started).
    """
    try:
        meter = activity.metric_meter()
    except RuntimeError:  # not in an activity
        return
    meter.create_counter(SANDBOX_FAILURES, "Tool commands whose sandbox could not start", "1").add(
        1, {"reason": reason}
    )


def record_compaction(meter: MetricMeter, *, agent: str, kind: str) -> None:
    """A task's context was compacted.

    ``kind``: ``notes`` (old tool results shortened) or ``summary`` (older turns
    summarized by a model call).
    """
    meter.create_counter(COMPACTIONS, "Context compactions, by kind", "1").add(
        1, {"agent": agent, "kind": kind}
    )
