"""The ``run_tool`` activity's work: one tool call, run once however often it is retried.

A retried attempt first asks whether its task was cancelled meanwhile, then whether an
earlier attempt already ran the call (its result is a record in the blob store): a
command never runs twice because a worker died before reporting it. A read-only tool's
short result is not recorded: running a read again changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_subagents import policy
from durable_subagents._payloads import UNRECORDED_READ_BYTES, ToolCallInput, ToolCallResult
from durable_subagents.activities._heartbeats import cancel_requested, heartbeating, may_be_stale
from durable_subagents.tools import ToolError

if TYPE_CHECKING:
    from durable_subagents.activities._activities import SubagentActivities

__all__ = ["run_call"]


async def run_call(acts: SubagentActivities, input: ToolCallInput) -> ToolCallResult:
    """Run one tool call once, whatever the retries: a result recorded is answered again."""
    info = activity.info()
    record = policy.result_record_name(input.call)
    if may_be_stale(info) and await cancel_requested():
        raise ApplicationError(
            "the task was cancelled; not running the tool call",
            type="TaskCancelled",
            non_retryable=True,
        )
    if info.attempt > 1:
        # An earlier attempt ran the call but its result never reached the server
        # (the worker died, or the server was down): answer with that result instead
        # of running the command again.
        done = await acts.store.get_record(input.task_id, record)
        if done is not None:
            activity.logger.info("call %s ran already; returning its result", input.call.id)
            return ToolCallResult.model_validate_json(done)
    call = await acts.transcript.full_call(input.task_id, input.call)
    tool = acts.tools.get(call.name)
    if tool is None:
        output, is_error = f"unknown tool {call.name!r}", True
    else:
        ctx = acts.tool_context(input, call)
        async with heartbeating():
            try:
                output, is_error = await tool.run(ctx, call.arguments), False
            except ToolError as err:
                output, is_error = str(err), True
            except Exception as err:
                # A tool's own bug: the model hears of it; the worker log has the trace.
                activity.logger.exception("tool %s raised", call.name)
                output = f"{call.name} failed: {type(err).__name__}: {err}"
                is_error = True
    content, ref = await acts.transcript.store_text(input.task_id, output)
    # A short read needs no record: a retry reads again, and the workflow passes only
    # longer results by name.
    recorded = not (
        input.unrecorded_reads
        and tool is not None
        and tool.read_only
        and len(content.encode()) <= UNRECORDED_READ_BYTES
    )
    result = ToolCallResult(
        call_id=call.id,
        tool_name=call.name,
        content=content,
        content_ref=ref,
        is_error=is_error,
        size=len(output),
        recorded=recorded,
    )
    if recorded:
        await acts.store.put_record(input.task_id, record, result.model_dump_json().encode())
    return result
