"""``SubagentWorkflow``: the agent loop as a durable Temporal workflow.

Deterministic: no I/O here. Model turns and tool calls are activities called by
stable names; the transcript lives in the blob store and the workflow keeps only its
head, so the history stays small however long the conversation gets.

The loop's parts live beside it: the run's state and how the task shows it
(``_task_face``, its base class), which calls run or ask (``_approvals``), running them
(``_tool_calls``), a model turn's input and activity (``_model_turns``), what the task
publishes (``_publish``), its limits (``_budget``), its children (``_subtasks``) and
its tree (``_tree``).
"""

from __future__ import annotations

import asyncio
import functools
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError, FailureError

from durable_subagents.workflows import _budget as budget
from durable_subagents.workflows._activity_options import bound_by_worker, task_options
from durable_subagents.workflows._answers import accepted, answer_verdicts, feedback, set_aside
from durable_subagents.workflows._approvals import spawns_run, turn_verdicts
from durable_subagents.workflows._model_turns import MAX_QUEUED_INPUTS as MAX_QUEUED_INPUTS
from durable_subagents.workflows._model_turns import (
    queued,
    take_input,
    turn_input,
)
from durable_subagents.workflows._outcomes import (
    TASK_ENDING_ERRORS,
    error_message,
    final_stop_reason,
    tool_error,
    unanswered,
)
from durable_subagents.workflows._stream import ended
from durable_subagents.workflows._subtasks import SPAWN_TOOLS, ParentLeft
from durable_subagents.workflows._task_face import TaskFace
from durable_subagents.workflows._tool_calls import (
    waits_on_activities,
)
from durable_subagents.workflows._tree import MAX_REGISTERED as MAX_REGISTERED

with workflow.unsafe.imports_passed_through():
    from durable_subagents.context._context import describe
    from durable_subagents.context._output_schema import answer_json
    from durable_subagents.policy import Verdict
    from durable_subagents.types import (
        Message,
        TaskResult,
        TaskStatus,
        ToolCall,
    )
    from durable_subagents.wire._ledger import (
        SPEND_UPDATE,
        TREE_BUDGET_SIGNAL,
        SpendReport,
        TreeBudget,
    )
    from durable_subagents.wire._payloads import (
        CHILD_STATE_SIGNAL,
        DECIDE_SIGNAL,
        GIVE_UP_SIGNAL,
        HELD_ERROR,
        REGISTER_CHILD_SIGNAL,
        RESERVE_TASK_UPDATE,
        SEND_INPUT_SIGNAL,
        STATUS_QUERY,
        WORKFLOW,
        ChildState,
        CompactInput,
        Decisions,
        ModelTurnInput,
        ModelTurnResult,
        TaskInput,
        TaskState,
        ToolCallResult,
    )
    from durable_subagents.wire._stream_items import (
        DIRECT_SIGNAL,
        FORWARD_SIGNAL,
        StreamDirect,
        StreamForward,
    )


@workflow.defn(name=WORKFLOW)
class SubagentWorkflow(TaskFace):
    """One subagent task: model turns and tool calls until a final answer or a limit."""

    @workflow.init
    def __init__(self, input: TaskInput) -> None:
        super().__init__(input)

    # ------------------------------------------------------------------ signals / queries

    @workflow.signal(name=SEND_INPUT_SIGNAL)
    def send_input(self, text: str) -> None:
        """Queue follow-up or steering input; the next turn takes it in.

        Checked here as the client checks it (anyone who may signal the task can send
        one): an input that is no text or over the prompt's size, or one past
        ``MAX_QUEUED_INPUTS`` waiting, is dropped and logged.
        """
        if not queued(text, self._inbox):
            return
        self._inbox.append(text)
        line = " ".join(text.split())
        self._events.event("input", line if len(line) <= 200 else line[:199] + "…")

    @workflow.signal(name=REGISTER_CHILD_SIGNAL)
    def register_child(self, task_id: str) -> None:
        """A task spawned through the client names this one as its parent.

        It is cancelled when this task is cancelled, fails or times out, as a child
        workflow would be, even when the process that spawned it is gone.
        """
        self._adopted.register(task_id)

    @workflow.signal(name=CHILD_STATE_SIGNAL)
    def child_state(self, state: ChildState) -> None:
        """A child subagent paused or resumed: its pending calls surface on this task."""
        self._children.update(state)

    @workflow.signal(name=DECIDE_SIGNAL)
    def decide(self, decisions: Decisions) -> None:
        """Approve or reject calls of the current pause (stale or mismatched ones are ignored).

        Decisions on a child's calls (``<child task id>/<call id>``) go to the child.
        """
        self._events.event("decision", decisions.summary())
        own = self._children.route_theirs(decisions)
        if own is None:
            return
        ignored, narrowed = self._approvals.take(own)
        for why, call_ids in ignored:
            self._ignore(own, why, call_ids)
        if narrowed:
            self._publish(TaskStatus.PAUSED)

    def _ignore(self, decisions: Decisions, why: str, call_ids: list[str] | None) -> None:
        """Drop a stale decision: said in the task's events, in the memo when next written."""
        self._approvals.ignore(decisions, why, call_ids)
        self._events.event("decision_ignored", f"pause {decisions.pause_id}: {why}")
        self._published.ignored = self._approvals.ignored

    @workflow.update(name=RESERVE_TASK_UPDATE)
    def reserve_tree_task(self, task_id: str) -> None:
        """A task of this one's tree is about to start ``task_id``: count it (``max_tasks``)."""
        self._tree.take(task_id)

    @reserve_tree_task.validator
    def _reservation_allowed(self, task_id: str) -> None:
        """Refused before it reaches the history: no id, or no room left in the tree."""
        self._tree.check(task_id)

    @workflow.update(name=SPEND_UPDATE)
    def record_spend(self, report: SpendReport) -> TreeBudget:
        """A task of this one's tree says what it has spent so far: does the tree hold?"""
        self._ledger.take(report)
        self._spend_changed()
        return self._ledger.word()

    @record_spend.validator
    def _spend_allowed(self, report: SpendReport) -> None:
        """Refused before it reaches the history: no budget here, or no task of the tree."""
        self._ledger.check(report, self._tree.ids)

    @workflow.signal(name=TREE_BUDGET_SIGNAL)
    def tree_budget(self, message: TreeBudget) -> None:
        """The tree's top task holds this task's model turns, or lets them go on."""
        self._hold.take(message)

    @workflow.signal(name=GIVE_UP_SIGNAL)
    def give_up(self, reason: str) -> None:
        """Fail, rather than stay held, if a bug in workflow code holds the task."""
        self._given_up = reason[:500] if isinstance(reason, str) and reason else "given up"

    @workflow.signal(name=FORWARD_SIGNAL)
    def stream_forward(self, batch: StreamForward) -> None:
        """A task below this one sends its stream's new items: this stream keeps them."""
        self._stream.take_forward(batch)

    @workflow.signal(name=DIRECT_SIGNAL)
    def stream_direct(self, batch: StreamDirect) -> None:
        """A child's model turn sends its live pieces: this stream keeps them, in order."""
        self._stream.take_direct(batch)

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> dict[str, Any]:
        """The live state (needs a worker; prefer the memo, which does not)."""
        return dict(self._published.memo)

    # ------------------------------------------------------------------ run

    @workflow.run
    async def run(self, input: TaskInput) -> TaskResult:
        """Run the agent loop; honour the time limit and cancellation."""
        self._input = input
        self._model = input.model
        state = input.state
        if state is not None:
            self._head = state.head
            self._turns = state.turns
            self._usage = state.usage
            self._model = state.model or input.model
            self._runs = state.runs
            self._children.restore(state.children)
            self._tree.ids = list(state.tree_tasks)
            self._ledger.own(state.usage, state.turns)
            self._adopted.restore(state.adopted)
            self._invalid_answers = state.invalid_answers
            self._models.context = state.context or self._models.context
            self._compactions = state.compactions
        if input.tree_root is None and input.max_tasks is not None:
            self._tree.limit = input.max_tasks
        self._ledger.open(input, state.ledger if state is not None else None)
        self._children.interrupt = lambda: self._ledger.exhausted
        self._published.memo = dict(workflow.memo())
        if input.streams_to_parent and input.parent_id:
            self._stream.forward_to(input.parent_id)
        pending = list(state.pending_messages) if state else []
        loop = asyncio.create_task(self._loop(pending))
        try:
            await workflow.wait_condition(loop.done, timeout=self._time_left(input))
        except TimeoutError:
            await self._stop(loop)
            await self._background.settle()
            result = self._finish(
                TaskStatus.TIMED_OUT,
                stop_reason="time_limit",
                error=f"time limit of {input.time_limit:g}s reached",
            )
            await self._notify_end(result.stop_reason, result.error)
            return await self._closed(result)
        except asyncio.CancelledError:
            self._approvals.close()
            self._publish(TaskStatus.CANCELLING)
            await self._stop(loop)
            await self._background.settle()
            self._publish(TaskStatus.CANCELLED, stop_reason="cancelled")
            await self._notify_end("cancelled", None)
            await self._close_stream(TaskStatus.CANCELLED)
            raise
        try:
            result = loop.result()
        except TASK_ENDING_ERRORS as err:
            raise await self._fail(error_message(err), "TaskFailed") from err
        except Exception as err:
            # Anything else is a bug of workflow code (or of a library it calls): it fails
            # this workflow task, which Temporal retries, so the task is held at its last
            # recorded step, and shown as retrying, until a worker with a fix resumes it;
            # unless a worker gave it up (SUBAGENTS_FAIL_HELD_AFTER): then it fails.
            if self._given_up is None:
                raise
            message = f"{self._given_up}: {type(err).__name__}: {err}"
            raise await self._fail(message, HELD_ERROR) from err
        await self._background.settle()
        await self._notify_end(result.stop_reason, result.error)
        return await self._closed(result)

    async def _closed(self, result: TaskResult) -> TaskResult:
        """The run's result, once its stream said so and let its watchers go."""
        await self._close_stream(result.status, result.error)
        return result.model_copy(update={"stream_end": self._stream.log.end})

    async def _close_stream(self, status: TaskStatus, error: str | None = None) -> None:
        self._events.closed(status, error)
        await self._stream.settle()

    async def _fail(self, message: str, error_type: str) -> ApplicationError:
        """Publish the failure, cancel the registered tasks, notify: the error to raise."""
        await self._background.settle()
        self._publish(TaskStatus.FAILED, error=message)
        await self._adopted.cancel()
        await self._notify_end(None, message)
        await self._close_stream(TaskStatus.FAILED, message)
        # What it used goes with the failure: its parent counts it in its tree's usage.
        used = (self._tree_usage() or self._usage).model_dump()
        return ApplicationError(message, used, type=error_type, non_retryable=True)

    def _time_left(self, input: TaskInput) -> timedelta | None:
        if not input.time_limit:
            return None
        self._time_limit_from = budget.time_limit_from(input)
        return budget.time_left(input.time_limit, self._time_limit_from)

    async def _stop(self, loop: asyncio.Task[TaskResult]) -> None:
        """Cancel the loop and wait until its running activities acknowledged."""
        loop.cancel()
        self._approvals.close()
        try:
            await loop
        except (asyncio.CancelledError, FailureError):
            pass
        await self._children.cancel_all()
        await self._adopted.cancel()

    # ------------------------------------------------------------------ the loop

    async def _loop(self, pending: list[Message]) -> TaskResult:
        assert self._input is not None
        inp = self._input
        spec = inp.agent
        # Yield once, so a cancel request that arrived with the start stops the task
        # before it schedules anything.
        await asyncio.sleep(0)
        await self._bind_activity_options()
        new: list[Message] = pending
        state = inp.state
        if (self._head is not None and not new) or (state is not None and state.awaiting_input):
            # A follow-up run: its input arrives as the start signal.
            await workflow.wait_condition(lambda: bool(self._inbox))
        if self._head is None and not new:
            if spec.system_prompt:
                new.append(Message(role="system", content=spec.system_prompt))
            new.append(Message(role="user", content=inp.prompt))
        first_turn_of_run = self._turns
        while True:
            new += take_input(self._inbox)
            if self._turns >= inp.max_turns:
                return self._finish(TaskStatus.COMPLETED, stop_reason="max_turns", pending=new)
            if self._over_budget():
                return self._finish(TaskStatus.COMPLETED, stop_reason="token_budget", pending=new)
            if self._ledger.exhausted and not await self._budget_raised():
                return self._finish(TaskStatus.COMPLETED, stop_reason="budget", pending=new)
            await self._hold.wait(lambda line: self._events.event("budget", line))
            if (
                self._turns > first_turn_of_run
                and workflow.info().is_continue_as_new_suggested()
                and not self._children.running
            ):
                await self._continue_as_new(new)
            self._turns += 1
            self._progress()
            turn = await self._model_turn(new)
            compactions = 0
            while turn.compact:
                compactions += 1
                await self._compact(turn, compactions)
                turn = await self._model_turn([], compacted=True)
            self._models.learn(turn)
            self._head = turn.head
            self._usage = self._usage + turn.usage
            self._model = turn.model or self._model
            await self._spent()
            self._events.turn(self._turns, turn)
            self._stream.trim()
            if not turn.same_tools:
                self._worker.take(turn)
            self._last_text, self._last_text_ref = turn.text, turn.text_ref
            self._schema_ref = turn.output_schema_ref or self._schema_ref
            new = []
            told: str | None = None
            if inp.output_schema is not None:
                if turn.output is not None:
                    if not self._inbox:
                        return self._answered(turn)
                    new = set_aside(turn)  # the model reads the input first
                    continue
                if turn.output_error is not None:
                    self._invalid_answers += 1
                    told = feedback(turn, self._invalid_answers)
                    if turn.output_call is None:  # a text reply: the model is told
                        new = [Message(role="user", content=told)]
                        continue
            if not turn.tool_calls:
                if self._inbox:
                    continue  # input came while the model answered: it goes on
                return self._finish(TaskStatus.COMPLETED, stop_reason=final_stop_reason(turn))
            stop = "max_turns" if self._turns >= inp.max_turns else None
            stop = stop or ("token_budget" if self._over_budget() else None)
            if stop is not None:
                answered = unanswered(turn.tool_calls, stop)  # each, as a follow-up needs
                return self._finish(TaskStatus.COMPLETED, stop_reason=stop, pending=answered)
            self._progress()
            worker = self._worker
            verdicts = turn_verdicts(
                turn.tool_calls,
                spec,
                worker.offered,
                read_only=worker.read_only,
                protected=worker.protected,
                answers=answer_verdicts(turn, told) if inp.output_schema is not None else {},
            )
            self._child_share = budget.child_share(self._free_tokens(), spawns_run(turn.tool_calls))
            asks = [c for c in turn.tool_calls if verdicts[c.id][0] == "ask"]
            if asks:
                verdicts.update(
                    await self._approvals.pause(
                        asks, turn=self._turns, timeout=inp.approval_timeout, publish=self._publish
                    )
                )
            if waits_on_activities(turn.tool_calls, verdicts, spec.local_read_tools):
                # A command may run for minutes: meanwhile the memo shows this turn's usage
                # (the throttle would have left the last write's).
                self._publish(TaskStatus.RUNNING)
            ran = turn.read_results
            results = await asyncio.gather(
                *(self._tool_call(c, verdicts[c.id], ran.get(c.id)) for c in turn.tool_calls)
            )
            if any(r.interrupted for r in results):
                results = await self._ask_rerun(turn.tool_calls, list(results))
            if any(r.held is not None for r in results):
                results = await self._settle_held(list(results))
            new = [r.to_message() for r in results]

    async def _bind_activity_options(self) -> None:
        """Fix the run's activity options (its worker's, narrowed by its agent) and depth.

        The worker's are kept in the run's input, so a run continued as new and the
        task's children are bound by them too.
        """
        assert self._input is not None
        self._input = await bound_by_worker(self._input)
        options = task_options(self._input, warn=True)
        self._models.options = self._tools.options = options

    def _answered(self, turn: ModelTurnResult) -> TaskResult:
        """Finish with the turn's answer, which matched the output schema."""
        assert turn.output is not None
        self._output = turn.output
        self._last_text, self._last_text_ref = answer_json(turn.output), None
        return self._finish(
            TaskStatus.COMPLETED, stop_reason=final_stop_reason(turn), pending=accepted(turn)
        )

    def _over_budget(self) -> bool:
        return budget.over_budget(self._input, self._usage, self._children)

    def _free_tokens(self) -> int | None:
        return budget.free_tokens(self._input, self._usage, self._children)

    # ------------------------------------------------------------------ model turns

    def _turn_input(self, new: list[Message], *, compacted: bool = False) -> ModelTurnInput:
        assert self._input is not None
        records, self._tools.records = self._tools.records, {}
        return turn_input(
            self._input,
            head=self._head,
            new=new,
            records=records,
            model=self._model,
            turn=self._turns,
            known_tools=self._worker.digest(),
            context=self._models.context,
            schema_ref=self._schema_ref,
            compacted=compacted,
            watched=self._stream.watched(),
            stream_end=self._stream.log.end,
        )

    async def _model_turn(self, new: list[Message], *, compacted: bool = False) -> ModelTurnResult:
        turn_input = self._turn_input(new, compacted=compacted)
        if turn_input.stream_parent is not None:
            self._stream.direct_from = turn_input.stream_after  # its pieces go there too
        try:
            return await self._models.turn(turn_input, self._turns, self._model)
        except asyncio.CancelledError:
            self._events.turn_failed(self._turns, "cancelled")
            raise
        except FailureError as err:
            self._events.turn_failed(self._turns, ended(err))
            raise
        finally:
            self._stream.direct_from = None

    async def _compact(self, turn: ModelTurnResult, attempt: int) -> None:
        """Compact the conversation before the turn is run again (``compact_context``).

        The compaction point it appends is a message of the transcript: a replay
        reads the same head from the activity's recorded result.
        """
        assert self._input is not None
        self._head = turn.head
        self._models.learn(turn)
        reason = turn.compact or "threshold"
        number = self._compactions + 1
        compact_input = CompactInput(
            turn=self._turn_input([]), reason=reason, number=number, attempt=attempt
        )
        result = await self._models.compact(compact_input, self._model)
        self._usage = self._usage + result.usage
        await self._spent()
        if result.changed:
            self._head = result.head
            self._compactions += 1
            workflow.logger.info("%s", describe(result.compaction))
            self._events.event("compaction", describe(result.compaction))
        self._progress()

    # ------------------------------------------------------------------ tool calls

    async def _tool_call(
        self, call: ToolCall, verdict: Verdict, ran: ToolCallResult | None
    ) -> ToolCallResult:
        """Run a call of the turn as ``verdict`` says (``ran``: the turn ran it already)."""
        assert self._input is not None
        action, error = verdict
        if action != "allow":
            if ran is not None:
                # The turn judges by the same rules: a difference is a bug to hear of.
                workflow.logger.error(
                    "turn %d ran call %s, which is not allowed", self._turns, call.id
                )
            return tool_error(call, error or f"{call.name} was not run")
        if ran is not None:
            return self._tools.ran(call, ran)
        if call.name in SPAWN_TOOLS:
            run = self._children.tool(
                call,
                parent=self._input,
                offered=self._worker.offered,
                parent_model=self._model,
                left=self._left,
            )
            return await self._tools.shown_running(call, run)
        return await self._tools.run(call, self._input, self._worker.read_only)

    async def _ask_rerun(
        self, calls: list[ToolCall], results: list[ToolCallResult]
    ) -> list[ToolCallResult]:
        """Pause for the calls their worker's death cut off (``ToolCalls.ask_rerun``)."""
        assert self._input is not None
        read_only, turn = self._worker.read_only, self._turns
        pause = functools.partial(self._approvals.pause, turn=turn, publish=self._publish)
        return await self._tools.ask_rerun(calls, results, self._input, read_only, pause)

    async def _settle_held(self, results: list[ToolCallResult]) -> list[ToolCallResult]:
        """Pause for what the turn's commands changed in protected paths, then settle."""
        assert self._input is not None
        pause = functools.partial(self._approvals.pause, turn=self._turns, publish=self._publish)
        return await self._tools.settle_held(results, self._input, pause)

    def _left(self) -> ParentLeft:
        """What this task has left for a child: turns, seconds and tokens."""
        assert self._input is not None
        return budget.parent_left(
            self._input,
            turns=self._turns,
            time_limit_from=self._time_limit_from,
            free=self._free_tokens(),
            share=self._child_share,
        )

    async def _continue_as_new(self, new: list[Message]) -> None:
        assert self._input is not None
        await self._stream.settle()  # releases the watchers' polls: handlers can finish
        await workflow.wait_condition(workflow.all_handlers_finished)
        await self._background.settle()
        await self._notes.started()
        new = new + [Message(role="user", content=text) for text in self._inbox]
        state = TaskState(
            head=self._head,
            turns=self._turns,
            usage=self._usage,
            pending_messages=new,
            model=self._model,
            runs=self._runs + 1,
            children=self._children.finished,
            adopted=self._adopted.carried,
            time_limit_from=self._time_limit_from,
            invalid_answers=self._invalid_answers,
            context=self._models.context,
            compactions=self._compactions,
            stream=self._stream.carry(),
            tree_tasks=self._tree.ids,
            ledger=self._ledger.state,
        )
        # On versioned workers the new run starts on the deployment's current version,
        # like a follow-up run. Temporal's default would keep it on this run's version,
        # and a long task would hold that version's workers up for as long as it lives.
        # What it carries (the input and its state) is a replay-bound payload: newer
        # code reads it.
        workflow.continue_as_new(
            self._input.model_copy(update={"state": state}),
            memo=self._published.memo,
            search_attributes=workflow.info().typed_search_attributes,
            initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE,
        )


__all__ = ["SubagentWorkflow"]
