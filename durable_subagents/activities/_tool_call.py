"""The ``run_tool`` activity's work: one tool call, run once however often it is retried.

And the reads a model turn runs itself, before it answers (``run_reads``).

A retried attempt first asks whether its task was cancelled meanwhile, then whether an
earlier attempt already ran the call (its result is a record in the blob store): a
command never runs twice because a worker died before reporting it. A read-only tool's
short result is not recorded: running a read again changes nothing.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_subagents import policy
from durable_subagents.activities._heartbeats import (
    CallProgress,
    cancel_requested,
    heartbeating,
    may_be_stale,
)
from durable_subagents.activities._held_changes import keep as keep_held
from durable_subagents.tools import ToolError
from durable_subagents.tools._decorator import MAX_THREADS_PER_TASK
from durable_subagents.tools._land import Landing
from durable_subagents.types import ToolCall, ToolImage
from durable_subagents.wire._payloads import (
    MAX_CALLS_PER_TURN,
    UNRECORDED_READ_BYTES,
    HeldChanges,
    ModelTurnInput,
    ToolCallInput,
    ToolCallResult,
)

if TYPE_CHECKING:
    from durable_subagents.activities._role import ActivityRole
    from durable_subagents.context._live_text import LiveText
    from durable_subagents.tools._images import CheckedImage

__all__ = ["run_call", "run_reads"]

READS_AT_ONCE = MAX_THREADS_PER_TASK
"""Reads of one turn that run at once: as many as a task has tool threads."""
READ_RESULTS_BYTES = 128 * 1024
"""Bytes of read results one model turn's result carries; the workflow runs the rest."""


async def run_call(acts: ActivityRole, input: ToolCallInput) -> ToolCallResult:
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
        cut_off = await interrupted(acts, input, info, record)
        if cut_off is not None:
            return cut_off
    return await run_once(acts, input)


async def interrupted(
    acts: ActivityRole, input: ToolCallInput, info: activity.Info, record: str
) -> ToolCallResult | None:
    """The result of a call an earlier attempt started and its worker's death cut off.

    None where the call runs again: a read (it changes nothing), an agent that reruns
    (``on_interrupted``), a rerun a person approved, an attempt that never started the
    tool (no heartbeat said so), or one its worker handed back when it stopped.
    """
    if not reported_if_cut_off(acts, input):
        return None
    last = info.heartbeat_details[-1] if info.heartbeat_details else None
    if not isinstance(last, dict) or "started" not in last:
        # The worker may have died before its first heartbeat reached the server; the
        # mark written before the tool ran says it did run.
        mark = await acts.store.get_record(input.task_id, started_mark(record))
        if mark is None:
            return None
        last = {"started": mark.decode(errors="replace")}
    if await acts.store.get_record(input.task_id, handed_back(record)) is not None:
        return None
    try:
        started = datetime.fromisoformat(str(last["started"]))
        seconds = f"{max((datetime.now(UTC) - started).total_seconds(), 0):.0f} s"
    except ValueError:
        seconds = "some time"
    output = str(last.get("output") or "")
    name = input.call.name
    text = (
        f"{name} was interrupted: the worker running it stopped (it died or lost its "
        f"connection) about {seconds} after the call began, and it was not run again. "
        "What it changed in the workspace was dropped, but anything it did outside (the "
        "network, other services) is unknown. "
        + (f"Its output until then:\n{output}" if output else "It had printed nothing.")
        + "\nCheck what was done before running it again."
    )
    activity.logger.warning("call %s was cut off by its worker's end; not run again", input.call.id)
    content, ref = await acts.transcript.store_text(input.task_id, text)
    result = ToolCallResult(
        call_id=input.call.id,
        tool_name=name,
        content=content,
        content_ref=ref,
        is_error=True,
        size=len(text),
        interrupted=input.on_interrupted == "ask",
    )
    await acts.store.put_record(input.task_id, record, result.model_dump_json().encode())
    return result


def handed_back(record: str) -> str:
    """Where a call's record says its worker handed it back (it runs again)."""
    return f"{record}-handed-back"


def started_mark(record: str) -> str:
    """Where a call's record says an attempt began running its tool (and when)."""
    return f"{record}-started"


def reported_if_cut_off(acts: ActivityRole, input: ToolCallInput) -> bool:
    """Whether a retry of this call, cut off by its worker's death, reports it.

    Reported instead of run again: a call that may change something, of an agent that
    does not rerun, not a rerun a person approved.
    """
    return not (input.rerun or input.on_interrupted == "rerun" or acts.read_only(input.call.name))


async def run_once(
    acts: ActivityRole, input: ToolCallInput, live: LiveText | None = None
) -> ToolCallResult:
    """Run the call: its output, stored as the transcript stores a text, and its record.

    ``live``: the model turn's text, which its heartbeats go on carrying meanwhile.
    """
    call = await acts.transcript.full_call(input.task_id, input.call)
    tool = acts.tools.get(call.name)
    held: HeldChanges | None = None
    images: list[ToolImage] = []
    if tool is None:
        output, is_error = f"unknown tool {call.name!r}", True
    else:
        with acts.workspace(input.workspace) as workspace:
            ctx = acts.tool_context(input, workspace, call)
            progress = CallProgress() if live is None else None
            if progress is not None:
                ctx.seen_output = progress.add
            if reported_if_cut_off(acts, input):
                # Durable before the tool runs: a worker that dies at once may never
                # have sent the heartbeat that says the call began.
                mark = started_mark(policy.result_record_name(input.call))
                now = datetime.now(UTC).isoformat().encode()
                await acts.store.put_record(input.task_id, mark, now)
            async with heartbeating(live, progress):
                try:
                    output, is_error = await tool.run(ctx, call.arguments), False
                except asyncio.CancelledError:
                    if activity.is_worker_shutdown():
                        # Handed back: the attempt on another worker runs it again.
                        record = handed_back(policy.result_record_name(input.call))
                        await asyncio.shield(acts.store.put_record(input.task_id, record, b"1"))
                    raise
                except ToolError as err:
                    output, is_error = str(err), True
                except Exception as err:
                    # A tool's own bug: the model hears of it; the worker log has the trace.
                    activity.logger.exception("tool %s raised", call.name)
                    output = f"{call.name} failed: {type(err).__name__}: {err}"
                    is_error = True
                output = with_landings(output, ctx.landings)
                if not is_error:
                    images = await store_images(acts, input.task_id, ctx.images)
                kept = [h for landing in ctx.landings for h in landing.held]
                if kept and input.protected_changes == "pause":
                    held = await keep_held(acts, input.task_id, call, workspace, kept)
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
        held=held,
        images=images,
    )
    if recorded:
        record = policy.result_record_name(input.call)  # the name the workflow passes on
        await acts.store.put_record(input.task_id, record, result.model_dump_json().encode())
    return result


async def store_images(
    acts: ActivityRole, task_id: str, images: list[CheckedImage]
) -> list[ToolImage]:
    """A result's images put in the blob store, as its messages name them.

    The workflow's history and the transcript hold only their names: a few screenshots
    would otherwise pass the 2 MB a payload may take.
    """
    out = []
    for image in images:
        ref = await acts.store.put(task_id, image.data)
        out.append(ToolImage(media_type=image.media_type, ref=ref, size=len(image.data)))
    return out


def with_landings(output: str, landings: list[Landing]) -> str:
    """``output`` with what did not land of its commands' changes, where the tool left it out."""
    notes = [n for landing in landings if not landing.reported and (n := landing.summary())]
    if not notes:
        return output
    separator = "" if not output or output.endswith("\n") else "\n"
    return output + separator + "\n".join(notes)


async def run_reads(
    acts: ActivityRole,
    input: ModelTurnInput,
    calls: list[ToolCall],
    offered: list[str],
    live: LiveText,
) -> dict[str, ToolCallResult]:
    """Run the turn's built-in reads its task's rules allow: their results, by call id.

    Each call is judged by ``policy.verdict``, the function the workflow decides it with,
    on the task's rules (``ModelTurnInput.reads``): only one it allows runs here. The
    others, a read whose run fails, and a turn past the calls one turn may make are left
    to the workflow, which runs what it allows as before. A retried turn runs its reads
    again (they change nothing) rather than answering from a record: a model asked
    again may repeat a call id of an earlier turn.
    """
    reads = input.reads
    ids = {c.id for c in calls}
    if reads is None or not calls or len(calls) > MAX_CALLS_PER_TURN or len(ids) < len(calls):
        return {}
    spec = reads.agent(input.agent_name or "task")
    allowed = [
        c
        for c in calls
        if c.name in policy.READ_ONLY_TOOLS
        # read-only whatever the worker says: a read is never a protected write
        and policy.verdict(c, spec, offered, read_only=set(), protected=None)[0] == "allow"
    ]
    slots = asyncio.Semaphore(READS_AT_ONCE)

    async def read(call: ToolCall) -> ToolCallResult | None:
        tool_input = ToolCallInput.of(input.task_id, call, spec, input.workspace, read_only=True)
        async with slots:
            try:
                return await acts.read_in_turn(tool_input, live)
            except Exception:
                activity.logger.warning(
                    "turn %d: read %s failed; the workflow runs it",
                    input.turn,
                    call.id,
                    exc_info=True,
                )
                return None

    results: dict[str, ToolCallResult] = {}
    size = 0
    for call, result in zip(allowed, await asyncio.gather(*map(read, allowed)), strict=True):
        if result is None:
            continue
        size += len(result.content.encode())
        if size > READ_RESULTS_BYTES:
            break
        results[call.id] = result
    return results
