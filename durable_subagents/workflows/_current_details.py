"""A task's current details in the Temporal Web UI: what it does or waits for now.

Pure and deterministic (the workflow calls it); setting current details is no command,
so what is shown can change without touching replay. The text is Markdown: every
name, id and argument is a code span or escaped (see ``_markdown``), so a hostile
model's arguments show literally and cannot add lines of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from durable_subagents.types import PendingApproval, TaskStatus, Usage
    from durable_subagents.wording._markdown import code_span
    from durable_subagents.wording._money import usd

LISTED_CALLS = 20
"""Most calls listed one by one (the rest are counted)."""

_SANDBOX_WARNINGS = {
    "none": "**Tools run unsandboxed on the host** (worker SUBAGENTS_TOOL_SANDBOX=none)",
    "unavailable": "**No sandbox on this worker**: bash and command tools are refused",
}


@dataclass
class TaskView:
    """What the current details are made of.

    Attributes:
        task_id: The workflow id (the approve and reject commands name it).
        status: The status being published.
        turns: Turns taken, the current one included.
        max_turns: The task's turn limit.
        model: The model's label; ``default`` until a turn named the worker's model.
        pause_id: The pause the task (or a child of it) waits in.
        pending: The calls waiting for a decision.
        approval_timeout: Seconds after which undecided calls are rejected.
        waiting_for_model: Whether a model turn is running.
        running: Previews of the tool calls running now (``bash · ls``).
        queued: Tool calls of this turn waiting for a free slot.
        sandbox: How the worker runs commands (``none`` and ``unavailable`` are shown).
        usage: Tokens so far (cache reads and writes shown apart), and their cost.
        tree_usage: This task's usage and its finished subagents' (when it has any).
        compactions: Times the conversation was compacted.
        compacting: Whether a compaction is running.
    """

    task_id: str
    status: TaskStatus
    turns: int
    max_turns: int
    model: str
    pause_id: str | None = None
    pending: Sequence[PendingApproval] = ()
    approval_timeout: float | None = None
    waiting_for_model: bool = False
    running: Sequence[str] = field(default_factory=list)
    queued: int = 0
    sandbox: str | None = None
    usage: Usage | None = None
    tree_usage: Usage | None = None
    compactions: int = 0
    compacting: bool = False


def current_details(view: TaskView) -> str:
    """The Markdown shown as current details; empty once the task is over."""
    lines = [_SANDBOX_WARNINGS[view.sandbox]] if view.sandbox in _SANDBOX_WARNINGS else []
    if view.status == TaskStatus.PAUSED:
        lines += _pause_lines(view)
        lines.append(f"Turn {_progress(view)}")
    elif view.status == TaskStatus.RUNNING:
        lines.append(f"**Running** turn {_progress(view)}")
        if view.compacting:
            lines.append(
                "Compacting the conversation to fit the model's context window "
                "(old tool results become notes, older turns a summary)"
            )
        elif view.waiting_for_model:
            lines.append("Waiting for the model's answer")
        lines += _running_lines(view)
    elif view.status == TaskStatus.CANCELLING:
        lines.append("**Cancelling**: stopping the model call and tool calls that run")
        lines += _running_lines(view)
    usage = _usage_line(view)
    if lines and usage:
        lines.append(usage)
    return "\n\n".join(lines)


def _usage_line(view: TaskView) -> str:
    """``Tokens in 12,400 (cache read 11,000, written 900) · out 310 · cost $0.0128``.

    Then what the task and its finished subagents cost, and how often it was compacted.
    """
    usage = view.usage
    parts = []
    if usage is not None and (usage.input_tokens or usage.output_tokens):
        cache = ""
        if usage.cache_read_tokens or usage.cache_write_tokens:
            cache = (
                f" (cache read {usage.cache_read_tokens:,}, written {usage.cache_write_tokens:,})"
            )
        parts.append(f"Tokens in {usage.input_tokens:,}{cache} · out {usage.output_tokens:,}")
    if usage is not None and usage.cost_usd is not None:
        parts.append(f"cost {usd(usage.cost_usd)}")
    tree = view.tree_usage
    if tree is not None and tree.cost_usd is not None:
        parts.append(f"with its subagents {usd(tree.cost_usd)}")
    if view.compactions:
        times = "once" if view.compactions == 1 else f"{view.compactions} times"
        parts.append(f"compacted {times} to fit the model's context window")
    return " · ".join(parts)


def _progress(view: TaskView) -> str:
    model = "the worker's default" if view.model == "default" else code_span(view.model)
    return f"{view.turns} of {view.max_turns} · model {model}"


def _pause_lines(view: TaskView) -> list[str]:
    pending = view.pending
    calls = "1 tool call" if len(pending) == 1 else f"{len(pending)} tool calls"
    timeout = view.approval_timeout
    # --pause: a decision pasted late never reaches a newer pause
    decide = f"{view.task_id} --all --pause {view.pause_id or ''}"
    return [
        f"**Waiting for approval** of {calls} · pause {code_span(view.pause_id or '')}"
        + (f" · rejected automatically after {timeout:g}s" if timeout else ""),
        *(
            f"- {code_span(p.call_id)} {code_span(p.arguments_preview)}"
            for p in pending[:LISTED_CALLS]
        ),
        *([f"and {len(pending) - LISTED_CALLS} more"] if len(pending) > LISTED_CALLS else []),
        f"Approve: {code_span(f'subagents approve {decide}')} (or name call ids) · "
        f"reject: {code_span(f'subagents reject {decide} --reason TEXT')}",
    ]


def _running_lines(view: TaskView) -> list[str]:
    running = view.running
    if not running and not view.queued:
        return []
    calls = "1 tool call" if len(running) == 1 else f"{len(running)} tool calls"
    lines = [f"{calls} running", *(f"- {code_span(p)}" for p in running[:LISTED_CALLS])]
    extra = []
    if len(running) > LISTED_CALLS:
        extra.append(f"{len(running) - LISTED_CALLS} more running")
    if view.queued:
        extra.append(f"{view.queued} waiting for a free slot")
    if extra:
        lines.append(" · ".join(extra))
    return lines


__all__ = ["TaskView", "current_details"]
