"""Structured answers in the workflow: what the model hears of its answer.

The model-turn activity judges an answer against the output schema (see
``_output_schema``); the workflow only acts on the verdict it recorded, so replay never
depends on the validator. Pure and deterministic.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from durable_subagents.context._output_schema import ANSWER_RETRIES, FINAL_ANSWER_TOOL
    from durable_subagents.policy import Verdict
    from durable_subagents.types import Message
    from durable_subagents.wire._payloads import ModelTurnResult, ToolCallResult

from durable_subagents.workflows._outcomes import tool_error


def accepted(turn: ModelTurnResult) -> list[Message]:
    """Results for the calls of a turn whose answer matched: the task ends with it.

    Every call is answered, so a follow-up run continues a well-formed conversation.
    """
    return [
        (
            ToolCallResult(call_id=c.id, tool_name=c.name, content="Answer accepted.")
            if c.id == turn.output_call
            else tool_error(c, "not run: the task ended with its answer")
        ).to_message()
        for c in turn.tool_calls
    ]


def set_aside(turn: ModelTurnResult) -> list[Message]:
    """Results for the calls of a turn whose answer came with new input queued."""
    why = (
        f"not taken: new input arrived meanwhile; read it, then call {FINAL_ANSWER_TOOL} "
        "again with your answer"
    )
    return [tool_error(c, why).to_message() for c in turn.tool_calls]


def feedback(turn: ModelTurnResult, invalid: int) -> str:
    """What the model is told of its ``invalid``-th answer that did not match.

    Raises:
        ApplicationError: ``InvalidOutput`` (non-retryable) when ``ANSWER_RETRIES``
            answers went back already: the task fails with what was wrong.
    """
    error = turn.output_error
    if invalid > ANSWER_RETRIES:
        raise ApplicationError(
            f"the answer did not match the output schema {invalid} times; the last time: {error}",
            type="InvalidOutput",
            non_retryable=True,
        )
    left = ANSWER_RETRIES + 1 - invalid
    tries = "1 more try" if left == 1 else f"{left} more tries"
    if turn.output_call is not None:
        return (
            f"Your answer does not match the output schema: {error}. Call "
            f"{FINAL_ANSWER_TOOL} again with a corrected answer ({tries} before the task "
            "fails)."
        )
    return (
        f"That reply was not taken as your answer: {error}. Call the {FINAL_ANSWER_TOOL} "
        f"tool with your answer as its arguments ({tries} before the task fails)."
    )


def answer_verdicts(turn: ModelTurnResult, told: str | None) -> dict[str, Verdict]:
    """Verdicts on a turn's ``final_answer`` calls: never run, the model turn judged them.

    The judged call gets ``told`` (the feedback on it); any further one is not read.
    """
    return {
        c.id: (
            "deny",
            told
            if c.id == turn.output_call and told
            else f"not read: one {FINAL_ANSWER_TOOL} call per turn is read",
        )
        for c in turn.tool_calls
        if c.name == FINAL_ANSWER_TOOL
    }


__all__ = ["accepted", "answer_verdicts", "feedback", "set_aside"]
