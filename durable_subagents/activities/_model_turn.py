"""A model turn, read top-down: what the ``model_turn`` activity does once it runs here.

``SubagentActivities.model_turn`` decides whether the turn runs on this worker (a rate
limited provider's queue, a task cancelled meanwhile) and holds the task's workspace;
``run_turn`` is the turn itself. The steps it calls on the worker's resources are the
``ActivityRole``'s.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_subagents.activities._heartbeats import heartbeating
from durable_subagents.activities._role import ActivityRole
from durable_subagents.activities._stream_text import TurnStream
from durable_subagents.activities._tool_call import run_reads
from durable_subagents.activities._turn_checks import ANSWER_INSTRUCTION, well_formed
from durable_subagents.activities._workspaces import HeldWorkspace
from durable_subagents.context._context import Sizer, request_chars
from durable_subagents.context._live_text import LiveText
from durable_subagents.context._output_schema import answer_tool, judge_answer, schema_text
from durable_subagents.providers._errors import CONTEXT_LENGTH_ERROR
from durable_subagents.providers._windows import maker_model
from durable_subagents.storage._transcript import INLINE_LIMIT, RESULT_INLINE_LIMIT
from durable_subagents.types import Message
from durable_subagents.wire._payloads import MAX_CALLS_KEPT, ModelTurnInput, ModelTurnResult

__all__ = ["compact_first", "output_schema", "run_turn"]


async def run_turn(
    role: ActivityRole, input: ModelTurnInput, workspace: HeldWorkspace
) -> ModelTurnResult:
    """One model turn, top to bottom: the request, the call, the answer recorded.

    The tools offered and the output schema; the conversation read back and the new
    messages; the request built, or the conversation compacted first when it would not
    fit; the model called, its text streamed to ``watch`` and heartbeated; its calls
    checked, stored and their paths resolved; the answer appended to the transcript;
    the reads the rules allow run; the usage priced.
    """
    task_id = input.task_id
    offered = role.offered_tools(input)
    schema, schema_ref = await output_schema(role, input)
    new_messages = await role.with_stored_results(input)
    messages = await role.transcript.load(task_id, input.head) + new_messages
    provider, full_name, provider_model = role.provider(input.model)
    tools = [*role.tools.specs(offered), *input.extra_tools]
    if schema is not None:
        tools.append(answer_tool(json.loads(schema)))
    request = await role.model_request(task_id, messages, tools, provider_model)
    if schema is not None:
        request.system = "\n\n".join(p for p in (request.system, ANSWER_INSTRUCTION) if p)
        request.output_schema = json.loads(schema)
    request.reasoning_effort, request.temperature = input.reasoning_effort, input.temperature
    request.max_tokens, request.turn = input.max_tokens, input.turn
    chars = request_chars(request.system, request.messages, request.tools)
    context = input.context
    if context is not None and not context.compacted:
        window = role.context_window(context, full_name)
        tokens = Sizer(context.tokens, context.chars).tokens_of(chars)
        if window and tokens > role.compact_at * window:
            return await compact_first(role, input, new_messages, offered, "threshold", chars)
    live = LiveText(input.turn, activity.info().attempt)
    stream = TurnStream(
        input.turn,
        activity.info().attempt,
        watched=input.stream_watched,
        watch_ids=input.stream_watch_ids,
        parent=input.stream_parent,
        after=input.stream_after,
    )

    def on_text(delta: str) -> None:
        live.add(delta)
        stream.add_text(delta)

    def on_thinking(delta: str) -> None:
        live.add_thinking(delta)
        stream.add_thinking(delta)

    try:
        async with heartbeating(live):
            response = await role.complete(provider, request, on_text, on_thinking)
    except ApplicationError as err:
        await stream.stop()
        if err.type == CONTEXT_LENGTH_ERROR and context is not None:
            activity.logger.info("turn %d: %s; compacting", input.turn, err.message)
            sizes = err.details[0] if err.details and isinstance(err.details[0], dict) else {}
            return await compact_first(
                role, input, new_messages, offered, "context_length", chars, sizes
            )
        if err.type == "ModelUnavailable":
            activity.logger.warning(
                "turn %d, attempt %d: %s", input.turn, activity.info().attempt, err.message
            )
        raise
    except BaseException:
        await stream.stop()  # cancelled, or broken: what it had not published is void
        raise
    kept = response.tool_calls[:MAX_CALLS_KEPT]
    checked = well_formed(kept, input.turn)
    judged = None
    if schema is not None:
        # Judged with the arguments as the model sent them (before the depth check
        # replaces them), in a thread: a check may take a CPU second (CHECK_SECONDS),
        # which must hold up neither the heartbeats nor other tasks' activities.
        as_sent = [
            c.model_copy(update={"arguments": k.arguments})
            for c, k in zip(checked, kept, strict=True)
        ]
        async with heartbeating():
            judged = await asyncio.to_thread(judge_answer, schema, as_sent, response.text)
    calls = [
        await role.transcript.store_call(task_id, role.with_hint(role.with_path(c, workspace)))
        for c in checked
    ]
    if len(response.tool_calls) > MAX_CALLS_KEPT:
        activity.logger.warning(
            "turn %d: kept %d of the model's %d tool calls",
            input.turn,
            MAX_CALLS_KEPT,
            len(response.tool_calls),
        )
    # A final answer comes back whole up to RESULT_INLINE_LIMIT: a parent reads it
    # from the task's result with no access to the blob store.
    limit = INLINE_LIMIT if calls else RESULT_INLINE_LIMIT
    text, text_ref = await role.transcript.store_text(task_id, response.text, limit)
    restarts = stream.text_restarts
    streamed = await stream.finish(whole=text_ref is not None)
    answer = Message(
        role="assistant",
        content=text,
        content_ref=text_ref,
        tool_calls=calls,
        reasoning=response.reasoning,  # kept in the chain only, never in a result
    )
    # one node per turn: what was new, and the answer
    head = await role.transcript.append(task_id, input.head, [*new_messages, answer])
    if not calls:
        role.transcript.forget(task_id)  # an answer: most tasks end here
    read_results = await run_reads(role, input, calls, offered, live)
    return ModelTurnResult(
        head=head,
        text=text,
        text_ref=text_ref,
        tool_calls=calls,
        usage=role.prices.priced(full_name, response.usage, maker_model(full_name)),
        stop_reason=response.stop_reason,
        model=full_name,
        output=judged.output if judged else None,
        output_error=judged.error if judged else None,
        output_call=judged.call_id if judged else None,
        output_schema_ref=schema_ref,
        chars=chars,
        thinking=len(answer.thinking),
        read_results=read_results,
        stream_from=streamed,
        stream_restarted=restarts and streamed == 0,
        **role.tools_offered(input, offered),
    )


async def output_schema(role: ActivityRole, input: ModelTurnInput) -> tuple[str | None, str | None]:
    """The task's output schema (as ``schema_text``), and the blob stored this turn.

    A run's first turn carries the schema and stores it (content-addressed, so a
    retry stores the same blob); later turns carry only its reference.
    """
    if input.output_schema is not None:
        text = schema_text(input.output_schema)
        return text, await role.store.put(input.task_id, text.encode())
    if input.output_schema_ref is not None:
        data = await role.store.get(input.task_id, input.output_schema_ref)
        return data.decode(), None
    return None, None


async def compact_first(
    role: ActivityRole,
    input: ModelTurnInput,
    new_messages: list[Message],
    offered: list[str],
    reason: str,
    chars: int,
    sizes: dict[str, Any] | None = None,
) -> ModelTurnResult:
    """The turn's answer when the context must be compacted before the model is asked.

    The turn's new messages are appended (the compaction reads them from the
    chain), and the workflow runs ``compact_context``, then this turn again.
    """
    head = input.head
    if new_messages:
        head = await role.transcript.append(input.task_id, head, new_messages)
    assert head is not None, "a turn without messages"
    _, full_name, _ = role.provider(input.model)
    tokens, maximum = (sizes or {}).get("tokens"), (sizes or {}).get("maximum")
    return ModelTurnResult(
        head=head,
        model=full_name,
        compact=reason,
        chars=chars,
        context_tokens=tokens if isinstance(tokens, int) and tokens > 0 else None,
        window=maximum if isinstance(maximum, int) and maximum > 0 else None,
        **role.tools_offered(input, offered),
    )
