"""Running a turn's approved tool calls: activities, at most so many at once.

A call runs as a ``run_tool`` activity on the tool queue, or, for a read of an agent
with ``local_read_tools``, as a local activity within the workflow task (where its
model turn did not run it already: ``ModelTurnResult.read_results``). The calls past a
task's slots wait in the workflow, where they hold nothing. Workflow code:
deterministic, no I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import FailureError

from durable_subagents.workflows._activity_options import scheduled_with
from durable_subagents.workflows._outcomes import check_size, tool_timeout
from durable_subagents.workflows._stream import TaskEvents, ended

with workflow.unsafe.imports_passed_through():
    from durable_subagents import policy
    from durable_subagents.agents import DEFAULT_ACTIVITY_OPTIONS, ActivityConfig, ActivityOptions
    from durable_subagents.errors import NON_RETRYABLE_ERROR_TYPES
    from durable_subagents.policy import Verdict
    from durable_subagents.types import ToolCall
    from durable_subagents.wire._payloads import (
        HELD_TOOL,
        RERUN_TOOL,
        RUN_TOOL_ACTIVITY,
        SETTLE_CHANGES_ACTIVITY,
        SettleInput,
        TaskInput,
        ToolCallInput,
        ToolCallResult,
        tool_queue,
    )

Pause = Callable[..., Coroutine[Any, Any, dict[str, Verdict]]]
"""``Approvals.pause`` for one turn: the calls to ask about, and the timeout, in; verdicts out."""

TOOL_CALLS_AT_ONCE = 8
"""Tool calls of one task that run at once: as many as it has tool threads
(``MAX_THREADS_PER_TASK``); more would only hold worker slots while they wait."""
CHILD_TOOL_CALLS_AT_ONCE = 2
"""The same for a subagent's child (depth 1)."""
DEEP_TOOL_CALLS_AT_ONCE = 1
"""The same for a task deeper in a tree. A tree of at most ``max_tasks`` (default 50)
tasks, the top one's at most ``MAX_CHILDREN`` (16) children among them, then holds at
most 8 + 16 x 2 + 33 x 1 = 73 tool slots at once, under a worker's default 100, so one
prompt-injected tree cannot fill them however deep it grows."""


def tool_slots_at(depth: int) -> int:
    """How many tool calls a task this far below its tree's top runs at once."""
    if depth <= 0:
        return TOOL_CALLS_AT_ONCE
    return CHILD_TOOL_CALLS_AT_ONCE if depth == 1 else DEEP_TOOL_CALLS_AT_ONCE


_SETTLE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_attempts=3,
    non_retryable_error_types=NON_RETRYABLE_ERROR_TYPES,
)
"""Applying or dropping a call's held changes: not a tool call, so not its options."""


def _tool_input(inp: TaskInput, call: ToolCall, read_only_tools: set[str]) -> ToolCallInput:
    """The ``run_tool`` input of an approved call of this task."""
    read_only = call.name in read_only_tools or call.name in policy.READ_ONLY_TOOLS
    # A subagent's child shares the machine with its tree's top task's commands: the
    # top one it names, or (a run recorded before deeper trees) its parent.
    tree_id = inp.tree_root or (inp.parent_id if inp.parent_is_subagent else None)
    return ToolCallInput.of(
        workflow.info().workflow_id,
        call,
        inp.agent,
        inp.workspace,
        read_only=read_only,
        tree_id=tree_id,
    )


def waits_on_activities(
    calls: list[ToolCall], verdicts: dict[str, Verdict], local_read_tools: bool
) -> bool:
    """Whether a call that runs will be awaited as an activity or a child, not inline.

    Reads ran in their model turn, or run as local activities within this workflow task
    (see ``ToolCalls.run``): a turn of reads alone is over before anyone could look.
    """
    return any(
        verdicts[c.id][0] == "allow" and not (local_read_tools and c.name in policy.READ_ONLY_TOOLS)
        for c in calls
    )


class ToolCalls:
    """This run's tool calls: the slots they run in, those running now, their records.

    Args:
        on_change: Shows the current details again (what runs or waits changed).

    Attributes:
        running: Previews of the tool calls running now, by call id (for the current
            details).
        queued: Tool calls waiting for one of the slots.
        records: Record names of this turn's ``run_tool`` results, by call id.
        options: The task's activity options (see ``task_options``).
    """

    def __init__(self, on_change: Callable[[], None], events: TaskEvents | None = None) -> None:
        self._on_change = on_change
        self._events = events
        self.options: ActivityOptions = DEFAULT_ACTIVITY_OPTIONS
        self._slots: asyncio.Semaphore | None = None
        self.running: dict[str, str] = {}
        self.queued = 0
        self.records: dict[str, str] = {}

    def _tool_slots(self, inp: TaskInput) -> asyncio.Semaphore:
        """How many of this task's tool calls run at once; the rest wait in the workflow."""
        if self._slots is None:
            # A child recorded before deeper trees has depth 0: one level down, still.
            depth = max(inp.depth, 1) if inp.parent_is_subagent else 0
            self._slots = asyncio.Semaphore(tool_slots_at(depth))
        return self._slots

    async def run(
        self, call: ToolCall, inp: TaskInput, read_only_tools: set[str], *, rerun: bool = False
    ) -> ToolCallResult:
        """Run an approved call of the task (``inp``) once one of its slots is free.

        ``rerun``: a person approved running it again after its worker's death cut it off.
        """
        call_input = _tool_input(inp, call, read_only_tools)
        if rerun:
            call_input = call_input.model_copy(update={"rerun": True})
        check_size(call_input, f"{call.name} call input")
        self.records[call.id] = policy.result_record_name(call)
        # A turn of many slow calls holds only this many of the worker's slots; the
        # rest wait here, in the workflow, where they hold nothing.
        slots = self._tool_slots(inp)
        queued = True
        self.queued += 1
        if slots.locked():
            self._on_change()  # it waits: say so
        try:
            async with slots:
                self.queued, queued = self.queued - 1, False
                run = _run_tool(
                    call, call_input, inp.agent.local_read_tools, self.options.tool_call
                )
                result = await self.shown_running(call, run)
                if not result.recorded:
                    del self.records[call.id]  # never passed by name (it is short)
                return result
        finally:
            if queued:
                self.queued -= 1

    def ran(self, call: ToolCall, result: ToolCallResult) -> ToolCallResult:
        """The result of a call its model turn ran (``ModelTurnResult.read_results``)."""
        if result.recorded:
            self.records[call.id] = policy.result_record_name(call)
        return result

    async def shown_running(
        self, call: ToolCall, run: Coroutine[Any, Any, ToolCallResult]
    ) -> ToolCallResult:
        """Await ``run`` with ``call`` listed in the current details meanwhile."""
        self.running[call.id] = policy.arguments_preview(call.name, call.arguments, limit=200)
        self._on_change()
        if self._events is not None:
            self._events.tool_started(call)
        try:
            result = await run
        except asyncio.CancelledError:
            if self._events is not None:
                self._events.tool_finished(call, None, "cancelled")
            raise
        except FailureError as err:
            if self._events is not None:
                self._events.tool_finished(call, None, ended(err))
            raise
        finally:
            # No workflow call here: on eviction the SDK unwinds with its own exception.
            self.running.pop(call.id, None)
        self._on_change()
        if self._events is not None:
            self._events.tool_finished(call, result)
        return result

    async def settle(
        self, result: ToolCallResult, verdict: Verdict, inp: TaskInput
    ) -> ToolCallResult:
        """A call's result once its held changes were decided (``held_call``'s verdict).

        The ``settle_changes`` activity applies them (approved) or drops them, and
        records the result the model reads under a name of its own.
        """
        assert result.held is not None
        action, reason = verdict
        record = f"{self.records.get(result.call_id) or 'call-' + result.call_id}-settled"
        settle_input = SettleInput(
            task_id=workflow.info().workflow_id,
            workspace=inp.workspace,
            result=result,
            record=record,
            approved=action == "allow",
            reason=reason,
        )
        check_size(settle_input, f"{result.tool_name} held changes")
        settled = await workflow.execute_activity(
            SETTLE_CHANGES_ACTIVITY,
            settle_input,
            task_queue=tool_queue(workflow.info().task_queue),
            result_type=ToolCallResult,
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=_SETTLE_RETRY,
            summary=held_summary(result),
        )
        self.records[result.call_id] = record
        return settled

    async def ask_rerun(
        self,
        calls: list[ToolCall],
        results: list[ToolCallResult],
        inp: TaskInput,
        read_only_tools: set[str],
        pause: Pause,
    ) -> list[ToolCallResult]:
        """Pause for the calls their worker's death cut off (``on_interrupted="ask"``).

        Approved ones run once more; the others keep the result that says they were
        cut off, which the model reads.
        """
        by_id = {c.id: c for c in calls}
        cut_off = [r for r in results if r.interrupted and r.call_id in by_id]
        asks = {r.call_id: rerun_call(by_id[r.call_id], r) for r in cut_off}
        verdicts = await pause(list(asks.values()), timeout=inp.approval_timeout)

        async def decided(result: ToolCallResult) -> ToolCallResult:
            if verdicts[asks[result.call_id].id][0] != "allow":
                return result.model_copy(update={"interrupted": False})
            return await self.run(by_id[result.call_id], inp, read_only_tools, rerun=True)

        again = await asyncio.gather(*(decided(r) for r in cut_off))
        by_call = {r.call_id: r for r in again}
        return [by_call.get(r.call_id, r) for r in results]

    async def settle_held(
        self, results: list[ToolCallResult], inp: TaskInput, pause: Pause
    ) -> list[ToolCallResult]:
        """Pause for the changes to protected paths the turn's commands made, then settle.

        Each call's held changes are one decision; the model reads each call's result
        once its changes were applied or dropped.
        """
        asks = {r.call_id: held_call(r) for r in results if r.held is not None}
        verdicts = await pause(list(asks.values()), timeout=inp.approval_timeout)
        settled = await asyncio.gather(
            *(
                self.settle(r, verdicts[asks[r.call_id].id], inp)
                for r in results
                if r.held is not None
            )
        )
        by_call = {r.call_id: r for r in settled}
        return [by_call.get(r.call_id, r) for r in results]


def held_call(result: ToolCallResult) -> ToolCall:
    """The decision a call's held changes wait for, as a call a person approves or rejects.

    Its arguments name the changed paths and hold the start of the diff; the whole
    diff is the blob ``arguments_ref``, which the decision's hash binds.
    """
    held = result.held
    assert held is not None
    return ToolCall(
        id=f"{result.call_id}-held",
        name=HELD_TOOL,
        arguments={
            "path": held_paths(result),
            "call_id": result.call_id,
            "count": held.count,
            "changes": held.preview,
        },
        arguments_ref=held.arguments_ref,
    )


def rerun_call(call: ToolCall, result: ToolCallResult) -> ToolCall:
    """The decision a call cut off by its worker's death waits for: run it again or not."""
    return ToolCall(
        id=f"{result.call_id}-rerun",
        name=RERUN_TOOL,
        arguments={
            "call_id": result.call_id,
            "tool": call.name,
            "call": policy.arguments_preview(call.name, call.arguments, limit=200),
            "interrupted": result.content[:600],
        },
    )


def held_paths(result: ToolCallResult) -> str:
    """The held changes' paths, the first few, for a one-line view."""
    held = result.held
    assert held is not None
    shown = ", ".join(held.paths[:5])
    more = held.count - min(len(held.paths), 5)
    return f"{shown} and {more} more" if more > 0 else shown


def held_summary(result: ToolCallResult) -> str:
    return policy.arguments_preview(HELD_TOOL, {"path": held_paths(result)})


async def _run_tool(
    call: ToolCall, tool_input: ToolCallInput, local_read_tools: bool, config: ActivityConfig
) -> ToolCallResult:
    # An MCP tool's arguments are its server's, never a bound: the worker ends the call
    # at the server's timeout (at most 600 s), which the activity's must cover. An
    # attempt runs as long as the call's own timeout and a minute more, or as the task's
    # options allow, whichever is shorter.
    assert config.start_to_close is not None
    mcp = call.name.startswith("mcp__")
    timeout = tool_timeout(600 if mcp else call.arguments.get("timeout"))
    attempt = min(timeout + 60, config.start_to_close)
    config = config.model_copy(update={"start_to_close": attempt})
    summary = policy.arguments_preview(call.name, call.arguments)
    if local_read_tools and call.name in policy.READ_ONLY_TOOLS:
        # In-process, bounded and read-only: run within this workflow task.
        return await workflow.execute_local_activity(
            RUN_TOOL_ACTIVITY,
            tool_input,
            result_type=ToolCallResult,
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            summary=summary,
            **scheduled_with(config, heartbeat=False),
        )
    # On the tool queue: its own slots, which a task's slow or stalled calls (up to
    # 600 s each) can fill without delaying any model turn.
    return await workflow.execute_activity(
        RUN_TOOL_ACTIVITY,
        tool_input,
        task_queue=tool_queue(workflow.info().task_queue),
        result_type=ToolCallResult,
        cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        summary=summary,
        **scheduled_with(config),
    )
