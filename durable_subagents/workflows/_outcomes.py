"""What the loop makes of a turn and a call: stop reasons, tool timeouts, error results.

Pure and deterministic (the workflow calls them), no I/O; so is the payload limit the
loop holds its activity inputs to.
"""

from __future__ import annotations

import math

from temporalio import workflow
from temporalio.exceptions import ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    from durable_subagents.types import Message, ToolCall
    from durable_subagents.wire._payloads import ModelTurnResult, ToolCallResult


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


def unanswered(calls: list[ToolCall], stop_reason: str) -> list[Message]:
    """Results for the calls of a turn the task stopped at (``max_turns``, ``token_budget``).

    Every call is answered, so a follow-up run continues a well-formed conversation.
    """
    why = "its max_turns" if stop_reason == "max_turns" else "the end of its token budget"
    return [tool_error(c, f"not run: the task reached {why}").to_message() for c in calls]


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


MAX_PAYLOAD_BYTES = 256 * 1024
"""Largest activity input this workflow schedules (Temporal's hard cap is 2 MB)."""


TASK_ENDING_ERRORS: tuple[type[BaseException], ...] = (FailureError,)
"""The errors that end a task as failed, listed in one place: what Temporal reports of
its activities, children and timers, and the typed ``ApplicationError``s the workflow
raises for data it cannot go on with (``PayloadTooLarge``, an invalid answer limit, a
provider's refusal, a spawn the worker refuses...). Any other exception is a bug: it
fails the workflow task instead, and the task waits, retried, for a fixed worker."""


def check_size(value: object, what: str) -> None:
    """Fail the task clearly instead of letting Temporal retry an oversized task forever."""
    size = workflow.payload_converter().to_payloads([value])[0].ByteSize()
    if size > MAX_PAYLOAD_BYTES:
        raise ApplicationError(
            f"{what} is {size} bytes, over the {MAX_PAYLOAD_BYTES}-byte payload limit; "
            "large content must go through the blob store (files in the workspace, "
            "tool outputs), not inline",
            type="PayloadTooLarge",
            non_retryable=True,
        )
