"""Small pure helpers of the workflow (deterministic, no I/O)."""

from __future__ import annotations

import math

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from durable_subagents._payloads import ModelTurnResult, ToolCallResult
    from durable_subagents.types import ToolCall


BASELINE = "baseline-2026-11"
"""One marker that stands for every patch below: a run started on this version or later
records it once instead of a marker (and a search attribute update) per patch."""
_IN_BASELINE = frozenset(
    {
        "bash-lines-read-apart",
        "limits-down-the-tree",
        "local-read-tools",
        "memo-progress-throttled",
        "parsed-bash-rules",
        "permission-mode-defaults",
        "protected-paths",
        "record-ignored-input",
        "search-attributes-on-status-change",
        "time-limit-from-run-start",
        "tool-calls-at-once",
        "turn-results-by-record",
    }
)


def patched(patch_id: str) -> bool:
    """``workflow.patched``, with the patches of ``BASELINE`` recorded as one marker.

    Runs recorded before the baseline have no baseline marker and keep the answer of
    their own markers on replay.
    """
    if patch_id in _IN_BASELINE and workflow.patched(BASELINE):
        return True
    return workflow.patched(patch_id)


def tool_timeout(value: object) -> float:
    """The tool's own timeout argument, within 1-600 s, whatever the model sent."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return 120.0
    if not math.isfinite(seconds):
        return 120.0
    return min(max(seconds, 1.0), 600.0)


def final_stop_reason(turn: ModelTurnResult) -> str:
    """``end_turn`` for a normal final answer, whatever the provider calls it."""
    if turn.stop_reason in (None, "", "stop", "end_turn", "tool_calls", "tool_use"):
        return "end_turn"
    return turn.stop_reason


def tool_error(call: ToolCall, message: str) -> ToolCallResult:
    return ToolCallResult(call_id=call.id, tool_name=call.name, content=message, is_error=True)


def error_message(err: BaseException) -> str:
    """The innermost meaningful message of a failure chain."""
    parts = []
    cur: BaseException | None = err
    while cur is not None:
        msg = getattr(cur, "message", None) or str(cur)
        if msg and msg not in parts and msg != "Activity task failed":
            parts.append(msg)
        cur = cur.__cause__
    return ": ".join(parts) or type(err).__name__
