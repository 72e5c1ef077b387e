"""``SubagentWorkflow``: the agent loop as a durable Temporal workflow.

Deterministic: no I/O here. Model turns and tool calls are activities called by
stable names; the transcript lives in the blob store and the workflow keeps only its
head, so the history stays small however long the conversation gets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

from durable_subagents.workflows._answers import accepted, answer_verdicts, feedback, set_aside
from durable_subagents.workflows._current_details import TaskView, current_details
from durable_subagents.workflows._notify import Notifications
from durable_subagents.workflows._outcomes import (
    error_message,
    final_stop_reason,
    tool_error,
    tool_timeout,
)
from durable_subagents.workflows._subtasks import (
    MAX_SPAWNS_PER_TURN,
    SPAWN_SUBAGENT,
    SPAWN_TOOL_SPECS,
    SPAWN_TOOLS,
    ChildTasks,
    ParentLeft,
    ToolCallRefused,
)

with workflow.unsafe.imports_passed_through():
    from durable_subagents import _search_attributes as sa
    from durable_subagents import policy
    from durable_subagents._context import describe
    from durable_subagents._output_schema import answer_json
    from durable_subagents._payloads import (
        CHILD_STATE_SIGNAL,
        COMPACT_ACTIVITY,
        DECIDE_SIGNAL,
        MAX_CALLS_PER_TURN,
        MODEL_TURN_ACTIVITY,
        REGISTER_CHILD_SIGNAL,
        RUN_TOOL_ACTIVITY,
        SEND_INPUT_SIGNAL,
        STATUS_QUERY,
        WORKFLOW,
        CallDecision,
        ChildState,
        CompactInput,
        CompactResult,
        ContextInput,
        Decisions,
        ModelTurnInput,
        ModelTurnResult,
        NotifyTask,
        TaskInput,
        TaskState,
        ToolCallInput,
        ToolCallResult,
        tool_queue,
        tools_digest,
    )
    from durable_subagents.errors import NON_RETRYABLE_ERROR_TYPES
    from durable_subagents.policy import call_hash
    from durable_subagents.spawn import model_label
    from durable_subagents.types import (
        Message,
        PendingApproval,
        TaskResult,
        TaskStatus,
        ToolCall,
        Usage,
    )

_INPUT_PER_TURN = 128 * 1024
"""Bytes of queued input one model turn takes in (the rest waits for the next)."""
_RESULTS_PER_TURN = 128 * 1024
"""Bytes of tool results a model-turn input carries inline; larger ones go by name."""
_REASON_LIMIT = 4096
"""Longest rejection reason passed to the model (longer ones are cut)."""
_REASONS_PER_TURN = 64 * 1024
"""Characters of rejection reasons the calls of one pause pass on in all."""
_REASON_LEAST = 200
"""Characters of its reason a rejected call passes on however many calls a pause has."""

TOOL_CALLS_AT_ONCE = 8
"""Tool calls of one task that run at once: as many as it has tool threads
(``MAX_THREADS_PER_TASK``); more would only hold worker slots while they wait."""
CHILD_TOOL_CALLS_AT_ONCE = 2
"""The same for a subagent's child: a task and its ``MAX_CHILDREN`` children then hold
at most 8 + 16 x 2 = 40 tool slots at once, under a worker's default 100, so one
prompt-injected tree cannot fill them."""
_PROGRESS_EVERY = timedelta(seconds=1)
"""Least workflow time between two memo writes of progress alone (see ``_progress``)."""

MAX_COMPACTIONS_PER_TURN = 4
"""Compactions in a row one turn may need before the task fails (each goes further;
the last resort turns every tool result into a note)."""

_IGNORED_KEPT = 10
"""How many ignored decisions the memo keeps (the newest)."""

_Verdict = tuple[str, str | None]
"""``(action, error)``: ``allow``, ``ask``, or ``deny`` with the error the model sees."""

MAX_PAYLOAD_BYTES = 256 * 1024
"""Largest activity input this workflow schedules (Temporal's hard cap is 2 MB)."""

_Result = TypeVar("_Result")

_MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=10,
    non_retryable_error_types=NON_RETRYABLE_ERROR_TYPES,
)
_TOOL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_attempts=3,
    non_retryable_error_types=NON_RETRYABLE_ERROR_TYPES,
)


def _lands_elsewhere(call: ToolCall) -> str | None:
    """Where the call's path leads, when a symlink makes that differ from what it says.

    None for a path that did not resolve inside the workspace (its tool refuses it).
    """
    path = call.path
    if call.written_path is None or path is None or path.startswith("/"):
        return None
    return path


_PAUSE_TIMER = timedelta(days=1)
"""How long each timer of a pause without an approval timeout runs; another follows."""


async def _wait_named(decided: Callable[[], bool], timeout: float | None, summary: str) -> None:
    """Wait until ``decided()``, or ``timeout`` seconds, under a timer named ``summary``.

    The Web UI opens a task on its Timeline, where a paused task is a running workflow
    whose last bar is a finished model turn. A running timer is drawn there up to now,
    with its name: so the pause is, for as long as it lasts. Without an approval
    timeout the wait has no end: each timer that fires is followed by another.
    """
    if timeout:
        try:
            await workflow.wait_condition(
                decided, timeout=timedelta(seconds=timeout), timeout_summary=summary
            )
        except TimeoutError:
            pass
        return
    while True:
        try:
            await workflow.wait_condition(decided, timeout=_PAUSE_TIMER, timeout_summary=summary)
            return
        except TimeoutError:
            continue


def _pause_summary(pause_id: str | None, pending: list[PendingApproval]) -> str:
    """``Waiting for approval (pause pause-2-ab12cd34): bash · wc -l *.py and 1 more call``.

    Plain text, as the Web UI shows timer names; short, well under the 400 bytes a
    summary may have (encrypted too).
    """
    first = pending[0].arguments_preview if pending else ""
    first = first if len(first) <= 80 else first[:79] + "…"
    rest = len(pending) - 1
    more = f" and {rest} more call{'s' if rest > 1 else ''}" if rest > 0 else ""
    return f"Waiting for approval (pause {pause_id}): {first}{more}"


def _shared_ids(calls: list[ToolCall]) -> set[str]:
    """Ids that more than one call of a turn has."""
    seen: set[str] = set()
    shared: set[str] = set()
    for call in calls:
        (shared if call.id in seen else seen).add(call.id)
    return shared


@workflow.defn(name=WORKFLOW)
class SubagentWorkflow:
    """One subagent task: model turns and tool calls until a final answer or a limit."""

    def __init__(self) -> None:
        self._status = TaskStatus.PENDING
        self._turns = 0
        self._usage = Usage()
        self._head: str | None = None
        self._model = "default"
        self._model_queue: str | None = None
        """Where this run's model turns go once a worker sent one on (rate limits)."""
        self._inbox: list[str] = []
        self._last_text = ""
        self._last_text_ref: str | None = None
        self._offered: list[str] = []
        self._sandbox: str | None = None
        self._read_only: set[str] = set()
        self._reported_protected: list[str] | None = None
        """The protected paths the last turn that reported tools named (for the digest)."""
        self._protected: list[str] | None = None
        """Every protected path the run's workers reported; calls are decided with these
        (None: no turn has reported any yet, so ``PROTECTED_PATHS``)."""
        self._memo: dict[str, Any] = {}
        self._published_sa: tuple[str, int] | None = None
        self._input: TaskInput | None = None
        self._runs = 1
        self._pause_id: str | None = None
        self._pending: list[PendingApproval] = []
        self._decisions: dict[str, CallDecision] = {}
        self._children = ChildTasks(on_change=self._republish)
        self._reported: tuple[str, str | None, int] | None = None
        self._ignored: list[dict[str, Any]] = []
        self._time_limit_from: datetime | None = None
        self._adopted: list[str] = []
        self._unread_pending = 0
        self._records: dict[str, str] = {}
        """Record names of this turn's ``run_tool`` results, by call id."""
        self._child_share: int | None = None
        """Each child's token budget when this turn spawns (see ``_share``)."""
        self._progress_at: datetime | None = None
        """When the memo was last written (see ``_progress``)."""
        self._calls_at_once: asyncio.Semaphore | None = None
        """Slots for this run's tool calls (see ``_tool_slots``)."""
        self._running: dict[str, str] = {}
        """Previews of the tool calls running now, by call id (for the current details)."""
        self._queued = 0
        """Tool calls waiting for one of the slots of ``_tool_slots``."""
        self._waiting_for_model = False
        self._compacting = False
        self._context = ContextInput()
        """What the task learned of its model's context window (see ``ContextInput``)."""
        self._compactions = 0
        self._shown: tuple[TaskStatus, str | None, list[PendingApproval]] | None = None
        """What ``_publish`` last published: status, pause id and pending calls."""
        self._output: dict[str, Any] | None = None
        """The answer that matched the output schema (the result is its JSON)."""
        self._invalid_answers = 0
        """Answers of this run that did not match the output schema."""
        self._schema_ref: str | None = None
        """The blob the output schema was stored as by this run's first turn."""
        self._notes = Notifications()
        """The run's events for its ``notify_url`` (see ``_notify``)."""
        self._worker_notifies: bool | None = None
        """The workers post events of their own accord (``ModelTurnResult.notify``);
        None until a model turn of this run answered."""

    # ------------------------------------------------------------------ signals / queries

    @workflow.signal(name=SEND_INPUT_SIGNAL)
    def send_input(self, text: str) -> None:
        """Queue follow-up or steering input; the next turn takes it in."""
        self._inbox.append(text)

    @workflow.signal(name=REGISTER_CHILD_SIGNAL)
    def register_child(self, task_id: str) -> None:
        """A task spawned through the client names this one as its parent.

        It is cancelled when this task is cancelled, fails or times out, as a child
        workflow would be; the registration is durable, so this holds even when the
        process that spawned it is gone.
        """
        if task_id not in self._adopted:
            self._adopted.append(task_id)

    @workflow.signal(name=CHILD_STATE_SIGNAL)
    def child_state(self, state: ChildState) -> None:
        """A child subagent paused or resumed: its pending calls surface on this task."""
        self._children.update(state)

    @workflow.signal(name=DECIDE_SIGNAL)
    def decide(self, decisions: Decisions) -> None:
        """Approve or reject calls of the current pause (stale or mismatched ones are ignored).

        Decisions on a child's calls (``<child task id>/<call id>``) go to the child.
        """
        routed = [d for d in decisions.decisions if "/" in d.call_id]
        if routed:
            asyncio.create_task(self._children.route(routed))  # noqa: RUF006
            decisions = decisions.model_copy(
                update={"decisions": [d for d in decisions.decisions if "/" not in d.call_id]}
            )
            if not decisions.decisions:
                return
        if decisions.pause_id != self._pause_id:
            current = self._pause_id or "none"
            self._ignore(
                decisions, f"pause {decisions.pause_id} is over (current pause: {current})"
            )
            return
        pending = {p.call_id: p for p in self._pending}
        for d in decisions.decisions:
            call = pending.get(d.call_id)
            if call is None or d.call_id in self._decisions:
                why = "already decided" if d.call_id in self._decisions else "not pending"
                self._ignore(decisions, f"call {d.call_id}: {why}", [d.call_id])
            elif call.arguments_hash != d.arguments_hash:
                self._ignore(decisions, f"call {d.call_id}: its arguments differ", [d.call_id])
            else:
                self._decisions[d.call_id] = d
        undecided = [p for p in self._pending if p.call_id not in self._decisions]
        if undecided and len(undecided) < len(self._pending):
            # the first decision on a call stands; what is left stays visible
            self._pending = undecided
            self._publish(TaskStatus.PAUSED)

    def _ignore(self, decisions: Decisions, why: str, call_ids: list[str] | None = None) -> None:
        """Drop a stale decision, and say so in the memo (and so in the task's events)."""
        workflow.logger.warning("ignoring decision: %s", why)
        ids = call_ids if call_ids is not None else [d.call_id for d in decisions.decisions]
        entry = {"pause_id": decisions.pause_id, "call_ids": ids, "reason": why}
        self._ignored = [*self._ignored, entry][-_IGNORED_KEPT:]
        self._memo["ignored_decisions"] = self._ignored
        workflow.upsert_memo({"ignored_decisions": self._ignored})

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> dict[str, Any]:
        """The live state (needs a worker; prefer the memo, which does not)."""
        return dict(self._memo)

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
            self._adopted = [*state.adopted, *self._adopted]
            self._invalid_answers = state.invalid_answers
            self._context = state.context or self._context
            self._compactions = state.compactions
        self._memo = dict(workflow.memo())
        pending = list(state.pending_messages) if state else []
        loop = asyncio.create_task(self._loop(pending))
        try:
            await workflow.wait_condition(loop.done, timeout=self._time_left(input))
        except TimeoutError:
            await self._stop(loop)
            result = self._finish(
                TaskStatus.TIMED_OUT,
                stop_reason="time_limit",
                error=f"time limit of {input.time_limit:g}s reached",
            )
            await self._notify_end(result.stop_reason, result.error)
            return result
        except asyncio.CancelledError:
            self._pause_id, self._pending = None, []
            self._publish(TaskStatus.CANCELLING)
            await self._stop(loop)
            self._publish(TaskStatus.CANCELLED, stop_reason="cancelled")
            await self._notify_end("cancelled", None)
            raise
        try:
            result = loop.result()
        except (ActivityError, ApplicationError) as err:
            message = error_message(err)
            self._publish(TaskStatus.FAILED, error=message)
            await self._cancel_adopted()
            await self._notify_end(None, message)
            raise ApplicationError(message, type="TaskFailed", non_retryable=True) from err
        except workflow.NondeterminismError:
            raise
        except Exception as err:
            # A bug hit by model-controlled data would fail this workflow task on every
            # retry; failing the task says what happened instead of hanging it.
            message = f"internal error: {type(err).__name__}: {err}"
            workflow.logger.exception("subagent loop failed")
            self._publish(TaskStatus.FAILED, error=message)
            await self._cancel_adopted()
            await self._notify_end(None, message)
            raise ApplicationError(message, type="InternalError", non_retryable=True) from err
        await self._notify_end(result.stop_reason, result.error)
        return result

    def _notify_task(
        self, status: TaskStatus, stop_reason: str | None = None, error: str | None = None
    ) -> NotifyTask:
        """The task as a notification names it."""
        assert self._input is not None
        return NotifyTask(
            id=workflow.info().workflow_id,
            agent=self._input.agent.name,
            description=self._input.description,
            status=status,
            parent_id=self._input.parent_id,
            turns=self._turns,
            stop_reason=stop_reason,
            error=error,
            result_preview=self._last_text if status == TaskStatus.COMPLETED else None,
        )

    async def _notify_end(self, stop_reason: str | None, error: str | None) -> None:
        """Notify the run's end (its status is the one just published).

        A run that ends before any model turn answered (its first one failed, or it was
        cancelled) does not know whether the workers notify: its event goes to the
        worker that delivers it, which posts it to its own URL or drops it.
        """
        if self._notes.enabled(self._input, self._worker_notifies is not False):
            await self._notes.ended(self._notify_task(self._status, stop_reason, error))

    def _time_left(self, input: TaskInput) -> timedelta | None:
        if not input.time_limit:
            return None
        # Counted by the server's clock from this chain of runs' first start; a
        # follow-up run gets a fresh limit.
        state = input.state
        from_state = state.time_limit_from if state is not None else None
        self._time_limit_from = from_state or workflow.info().start_time
        left = input.time_limit - (workflow.now() - self._time_limit_from).total_seconds()
        return timedelta(seconds=max(left, 0.001))

    async def _stop(self, loop: asyncio.Task[TaskResult]) -> None:
        """Cancel the loop and wait until its running activities acknowledged."""
        loop.cancel()
        self._pause_id, self._pending = None, []
        try:
            await loop
        except (asyncio.CancelledError, FailureError):
            pass
        await self._children.cancel_all()
        await self._cancel_adopted()

    async def _cancel_adopted(self) -> None:
        """Request cancellation of the tasks registered with ``register_child``."""

        async def cancel(task_id: str) -> None:
            try:
                await workflow.get_external_workflow_handle(task_id).cancel()
            except Exception:  # it finished already, or never started
                workflow.logger.info("registered child %s was not cancelled", task_id)

        adopted, self._adopted = self._adopted, []
        await asyncio.gather(*(cancel(t) for t in adopted))

    # ------------------------------------------------------------------ the loop

    async def _loop(self, pending: list[Message]) -> TaskResult:
        assert self._input is not None
        inp = self._input
        spec = inp.agent
        # Yield once, so a cancel request that arrived with the start stops the task
        # before it schedules anything.
        await asyncio.sleep(0)
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
            new += self._take_input()
            if self._turns >= inp.max_turns:
                return self._finish(TaskStatus.COMPLETED, stop_reason="max_turns", pending=new)
            if self._over_budget():
                return self._finish(TaskStatus.COMPLETED, stop_reason="token_budget", pending=new)
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
            self._learn(turn)
            self._head = turn.head
            self._usage = self._usage + turn.usage
            self._model = turn.model or self._model
            if not turn.same_tools:
                self._offered = turn.offered_tools
                self._read_only = set(turn.read_only_tools)
                self._sandbox = turn.sandbox
                self._take_protected(turn.protected_paths)
                self._worker_notifies = turn.notify
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
                # Answer the calls, so a follow-up run continues a well-formed conversation.
                why = "its max_turns" if stop == "max_turns" else "the end of its token budget"
                unanswered = [
                    tool_error(c, f"not run: the task reached {why}").to_message()
                    for c in turn.tool_calls
                ]
                return self._finish(TaskStatus.COMPLETED, stop_reason=stop, pending=unanswered)
            self._progress()
            verdicts = {c.id: self._verdict(c) for c in turn.tool_calls}
            if inp.output_schema is not None:
                verdicts.update(answer_verdicts(turn, told))
            shared = _shared_ids(turn.tool_calls)
            if shared:
                # Calls that share an id would share one verdict and one decision: the
                # worker gives each call its own id, so only a broken worker sends these.
                for call_id in shared:
                    verdicts[call_id] = ("deny", f"not run: call id {call_id!r} is not unique")
            if len(turn.tool_calls) > MAX_CALLS_PER_TURN:
                for c in turn.tool_calls[MAX_CALLS_PER_TURN:]:
                    verdicts[c.id] = (
                        "deny",
                        f"not run: at most {MAX_CALLS_PER_TURN} tool calls run in one turn; "
                        "make the rest in your next turn",
                    )
            spawns = [c for c in turn.tool_calls if c.name == SPAWN_SUBAGENT]
            self._child_share = self._share(min(len(spawns), MAX_SPAWNS_PER_TURN))
            if len(spawns) > MAX_SPAWNS_PER_TURN:
                for c in spawns[MAX_SPAWNS_PER_TURN:]:
                    verdicts[c.id] = (
                        "deny",
                        f"not run: at most {MAX_SPAWNS_PER_TURN} subagents may be spawned in "
                        "one turn; wait for these, then spawn more if still needed",
                    )
            asks = [c for c in turn.tool_calls if verdicts[c.id][0] == "ask"]
            if asks:
                verdicts.update(await self._pause(asks))
            if self._waits_on_activities(turn.tool_calls, verdicts):
                # A command may run for minutes: meanwhile the memo shows this turn's usage
                # (the throttle would have left the last write's).
                self._publish(TaskStatus.RUNNING)
            results = await asyncio.gather(
                *(self._tool_call(c, verdicts[c.id]) for c in turn.tool_calls)
            )
            new = [r.to_message() for r in results]

    def _waits_on_activities(self, calls: list[ToolCall], verdicts: dict[str, _Verdict]) -> bool:
        """Whether a call that runs will be awaited as an activity or a child, not inline.

        Reads run as local activities within this workflow task (see ``_run_tool``):
        a turn of reads alone is over before anyone could look.
        """
        assert self._input is not None
        local = self._input.agent.local_read_tools
        return any(
            verdicts[c.id][0] == "allow" and not (local and c.name in policy.READ_ONLY_TOOLS)
            for c in calls
        )

    def _take_protected(self, reported: list[str] | None) -> None:
        """Keep the paths a worker protects; a run never drops one a worker reported.

        Workers of one deployment should share a list; if they do not, the run keeps
        the union of what served it rather than the last worker's.
        """
        self._reported_protected = reported
        if reported is None:
            return
        kept = list(self._protected or [])
        self._protected = kept + [p for p in reported if p not in kept]

    def _answered(self, turn: ModelTurnResult) -> TaskResult:
        """Finish with the turn's answer, which matched the output schema."""
        assert turn.output is not None
        self._output = turn.output
        self._last_text, self._last_text_ref = answer_json(turn.output), None
        return self._finish(
            TaskStatus.COMPLETED, stop_reason=final_stop_reason(turn), pending=accepted(turn)
        )

    def _take_input(self) -> list[Message]:
        """Queued input for the next turn, oldest first, as much as one turn carries.

        What does not fit stays queued for the turn after, so many large inputs sent
        at once cannot push a model-turn input over the payload limit.
        """
        taken: list[Message] = []
        size = 0
        while self._inbox:
            text = self._inbox[0]
            if taken and size + len(text.encode()) > _INPUT_PER_TURN:
                break
            size += len(text.encode())
            taken.append(Message(role="user", content=self._inbox.pop(0)))
        return taken

    def _tokens_used(self) -> int:
        """Tokens this task and its finished children used."""
        own = self._usage.input_tokens + self._usage.output_tokens
        return own + self._children.tokens()[0]

    def _over_budget(self) -> bool:
        budget = self._input.token_budget if self._input else None
        return budget is not None and self._tokens_used() >= budget

    def _share(self, spawns: int) -> int | None:
        """Each child's token budget when a turn spawns ``spawns`` children.

        The parent keeps one share for itself: n children get n/(n+1) of what is free.
        """
        free = self._free_tokens()
        return None if free is None or not spawns else free // (spawns + 1)

    def _free_tokens(self) -> int | None:
        """Budget neither used (by this task and finished children) nor reserved."""
        budget = self._input.token_budget if self._input else None
        if budget is None:
            return None
        return max(budget - self._tokens_used() - self._children.tokens()[1], 0)

    def _left(self) -> ParentLeft:
        """What this task has left for a child: turns, seconds and tokens."""
        assert self._input is not None
        inp = self._input
        seconds = None
        if inp.time_limit and self._time_limit_from is not None:
            elapsed = (workflow.now() - self._time_limit_from).total_seconds()
            seconds = max(inp.time_limit - elapsed, 0.0)
        free, share = self._free_tokens(), self._child_share
        tokens = None if free is None or share is None else min(free, share)
        return ParentLeft(turns=max(inp.max_turns - self._turns, 1), seconds=seconds, tokens=tokens)

    def _results_by_record(self, new: list[Message]) -> tuple[list[Message], dict[str, str]]:
        """Pass the largest tool results by record name when together they are too large.

        Each result is small (a long output is a preview and a blob reference), but a
        turn may have many: 40 parallel reads of 7 KB were over the payload limit.
        ``run_tool`` keeps every result as a record, which ``model_turn`` reads back.
        """
        sizes = [len(m.content.encode()) for m in new]
        total = sum(sizes)
        if total <= _RESULTS_PER_TURN:
            return new, {}
        out = list(new)
        records: dict[str, str] = {}
        stored = [i for i, m in enumerate(new) if m.tool_call_id in self._records]
        for i in sorted(stored, key=lambda i: -sizes[i]):
            if total <= _RESULTS_PER_TURN:
                break
            call_id = new[i].tool_call_id
            assert call_id is not None
            records[call_id] = self._records[call_id]
            out[i] = new[i].model_copy(update={"content": ""})
            total -= sizes[i]
        return out, records

    def _turn_input(self, new: list[Message], *, compacted: bool = False) -> ModelTurnInput:
        assert self._input is not None
        spec = self._input.agent
        new, records = self._results_by_record(new)
        self._records = {}
        context = self._context.model_copy(
            update={"window": spec.context_window, "compacted": compacted}
        )
        return ModelTurnInput(
            task_id=workflow.info().workflow_id,
            head=self._head,
            new_messages=new,
            result_records=records,
            model=self._model,
            tools=spec.tools,
            disallowed_tools=spec.disallowed_tools,
            read_only=spec.permission_mode == "plan",
            turn=self._turns,
            workspace=self._input.workspace,
            agent_name=spec.name,
            extra_tools=SPAWN_TOOL_SPECS if spec.may_spawn else [],
            # The schema once per run; later turns name the blob the first one stored.
            output_schema=self._input.output_schema if self._schema_ref is None else None,
            output_schema_ref=self._schema_ref,
            reasoning_effort=spec.reasoning_effort,
            temperature=spec.temperature,
            max_tokens=spec.max_output_tokens or ModelTurnInput.model_fields["max_tokens"].default,
            known_tools=(
                tools_digest(
                    self._offered,
                    list(self._read_only),
                    self._sandbox,
                    self._reported_protected,
                    bool(self._worker_notifies),
                )
                if self._offered
                else None
            ),
            context=context,
        )

    async def _model_turn(self, new: list[Message], *, compacted: bool = False) -> ModelTurnResult:
        turn_input = self._turn_input(new, compacted=compacted)
        turn_input.may_redirect = True
        self._check_size(turn_input, f"model turn {self._turns} input")
        self._waiting_for_model = True
        self._show_details()
        try:
            result = await self._schedule_turn(turn_input)
            if result.model_queue is not None:
                # A worker that rate-limits the provider on a queue of its own sent the
                # turn on without calling the model; so go this run's later turns.
                self._model_queue = result.model_queue
                result = await self._schedule_turn(turn_input)
                if result.model_queue is not None:
                    raise ApplicationError(
                        f"model turn {self._turns} was sent on from {self._model_queue} "
                        f"to {result.model_queue}: give every worker of the task queue "
                        "the same SUBAGENTS_MODEL_RATE_LIMITS",
                        type="InvalidRequest",
                        non_retryable=True,
                    )
            return result
        finally:
            self._waiting_for_model = False

    def _learn(self, turn: ModelTurnResult) -> None:
        """Keep what a turn tells of the model's window: its size, or the provider's."""
        if turn.compact:
            if turn.window:
                learned = self._context.learned
                self._context.learned = min(learned, turn.window) if learned else turn.window
            if turn.context_tokens and turn.chars:
                self._context.tokens, self._context.chars = turn.context_tokens, turn.chars
        elif turn.chars and turn.usage.input_tokens:
            self._context.tokens, self._context.chars = turn.usage.input_tokens, turn.chars

    async def _compact(self, turn: ModelTurnResult, attempt: int) -> None:
        """Compact the conversation before the turn is run again (``compact_context``).

        The compaction point it appends is a message of the transcript: a replay
        reads the same head from the activity's recorded result.
        """
        assert self._input is not None
        self._head = turn.head
        self._learn(turn)
        reason = turn.compact or "threshold"
        if attempt > MAX_COMPACTIONS_PER_TURN:
            raise ApplicationError(
                f"the conversation still did not fit the model's context window after "
                f"{MAX_COMPACTIONS_PER_TURN} compactions in a row; use a model with a "
                "larger window, or have the task read less at once",
                type="ContextWindowExceeded",
                non_retryable=True,
            )
        compact_input = CompactInput(
            turn=self._turn_input([]),
            reason=reason,
            number=self._compactions + 1,
            attempt=attempt,
        )
        self._check_size(compact_input, f"compaction {self._compactions + 1} input")
        self._compacting = True
        self._show_details()
        try:
            # its summary is a model call: under the provider's rate limit too
            result = await self._model_call(
                COMPACT_ACTIVITY,
                compact_input,
                CompactResult,
                f"compaction {self._compactions + 1} · {model_label(self._model)}",
            )
        finally:
            self._compacting = False
        self._usage = self._usage + result.usage
        if result.changed:
            self._head = result.head
            self._compactions += 1
            workflow.logger.info("%s", describe(result.compaction))
        self._progress()

    async def _schedule_turn(self, turn_input: ModelTurnInput) -> ModelTurnResult:
        # The model's name is known from the first answer on (``default`` before).
        summary = f"turn {self._turns} · {model_label(self._model)}"
        return await self._model_call(MODEL_TURN_ACTIVITY, turn_input, ModelTurnResult, summary)

    async def _model_call(
        self, activity: str, arg: Any, result_type: type[_Result], summary: str
    ) -> _Result:
        """Run an activity that calls the model, as every such call runs.

        On the provider's queue once one is learned, with the model's timeouts and retries.
        """
        return await workflow.execute_activity(
            activity,
            arg,
            task_queue=self._model_queue,
            result_type=result_type,
            start_to_close_timeout=timedelta(minutes=10),
            heartbeat_timeout=timedelta(seconds=15),
            retry_policy=_MODEL_RETRY,
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            summary=summary,
        )

    def _verdict(self, call: ToolCall) -> _Verdict:
        """Whether a call runs, waits for a decision, or goes back as an error."""
        assert self._input is not None
        if call.name not in self._offered:
            offered = ", ".join(self._offered) or "none"
            return "deny", f"unknown tool {call.name!r}; available tools: {offered}"
        if "_raw" in call.arguments:
            return "deny", "the arguments were not valid JSON; send a JSON object"
        if call.name in SPAWN_TOOLS:
            return "allow", None  # may_spawn is the permission; the children are narrowed
        spec = self._input.agent
        if call.rule_target_truncated and policy.has_rules_for(spec, call.name):
            return "deny", (
                f"{call.name}: the {policy.rule_target_key(call.arguments)} is too long to "
                "check against this agent's permission rules; make it shorter"
            )
        read_only = call.name in self._read_only or call.name in policy.READ_ONLY_TOOLS
        action = policy.decide(
            spec,
            call.name,
            call.arguments,
            read_only=read_only,
            path=call.path,  # set by workers that resolve paths for the rules
            # and, where a symlink makes it differ, the path as written (set by
            # workers that bind decisions)
            written=call.written_path,
        )
        if (
            action == "allow"
            and not spec.write_protected_paths
            and policy.protected_write(
                call.name,
                call.arguments,
                read_only=read_only,
                path=call.path,
                protected=self._protected,
            )
        ):
            action = "ask"  # agent definitions and hooks: a person decides
        if action == "deny":
            return (
                "deny",
                f"{call.name} was denied by this agent's permission rules; do not retry it",
            )
        return action, None

    async def _pause(self, asks: list[ToolCall]) -> dict[str, _Verdict]:
        """Pause for the parent's decisions on ``asks``; undecided calls time out as rejected."""
        assert self._input is not None
        self._pause_id = f"pause-{self._turns}-{str(workflow.uuid4())[:8]}"
        self._pending = [
            PendingApproval(
                call_id=c.id,
                tool_name=c.name,
                arguments_preview=policy.arguments_preview(
                    c.name, c.arguments, limit=200, resolved=_lands_elsewhere(c)
                ),
                arguments_hash=call_hash(c),
                arguments_ref=c.arguments_ref,
                resolved_path=_lands_elsewhere(c),
            )
            for c in asks
        ]
        self._decisions = {}
        self._publish(TaskStatus.PAUSED)
        timeout = self._input.approval_timeout

        def decided() -> bool:
            return all(c.id in self._decisions for c in asks)

        await _wait_named(decided, timeout, _pause_summary(self._pause_id, self._pending))
        verdicts: dict[str, _Verdict] = {}
        # One reason given to many calls is repeated in each result: together they fit.
        limit = max(min(_REASON_LIMIT, _REASONS_PER_TURN // len(asks)), _REASON_LEAST)
        for call in asks:
            decision = self._decisions.get(call.id)
            if decision is None:
                verdicts[call.id] = ("deny", f"approval timed out after {timeout:g}s; not run")
            elif decision.approved:
                verdicts[call.id] = ("allow", None)
            else:
                text = decision.reason or ""
                text = text if len(text) <= limit else text[: limit - 1] + "…"
                reason = f": {text}" if text else ""
                verdicts[call.id] = ("deny", f"the parent rejected this call{reason}")
        self._pause_id, self._pending = None, []
        self._publish(TaskStatus.RUNNING)
        return verdicts

    def _show_details(self) -> None:
        """Set what the Web UI shows as current details (no command, no history event)."""
        if self._input is None or self._shown is None:
            return
        status, pause_id, pending = self._shown
        view = TaskView(
            task_id=workflow.info().workflow_id,
            status=status,
            turns=self._turns,
            max_turns=self._input.max_turns,
            model=model_label(self._model),
            pause_id=pause_id,
            pending=pending,
            approval_timeout=self._input.approval_timeout if self._pending else None,
            waiting_for_model=self._waiting_for_model,
            running=list(self._running.values()),
            queued=self._queued,
            sandbox=self._sandbox,
            usage=self._usage,
            compactions=self._compactions,
            compacting=self._compacting,
        )
        workflow.set_current_details(current_details(view))

    async def _tool_call(self, call: ToolCall, verdict: _Verdict) -> ToolCallResult:
        assert self._input is not None
        action, error = verdict
        if action != "allow":
            return tool_error(call, error or f"{call.name} was not run")
        if call.name in SPAWN_TOOLS:
            return await self._shown_running(call, self._spawn_tool(call))
        spec = self._input.agent
        rules = None
        if call.name != "bash":
            # What the file tools judge beyond the path the call was decided on.
            read_only = call.name in self._read_only or call.name in policy.READ_ONLY_TOOLS
            rules = policy.PathRules.of(spec, call.name, read_only=read_only)
        tool_input = ToolCallInput(
            task_id=workflow.info().workflow_id,
            call=call,
            workspace=self._input.workspace,
            network=spec.network,
            env=spec.env,
            limits=spec.limits,
            write_protected_paths=spec.write_protected_paths,
            rules=rules,
        )
        self._check_size(tool_input, f"{call.name} call input")
        self._records[call.id] = policy.result_record_name(call)
        # A turn of many slow calls holds only this many of the worker's slots; the
        # rest wait here, in the workflow, where they hold nothing.
        slots = self._tool_slots()
        queued = True
        self._queued += 1
        if slots.locked():
            self._show_details()  # it waits: say so
        try:
            async with slots:
                self._queued, queued = self._queued - 1, False
                return await self._shown_running(call, self._run_tool(call, tool_input))
        finally:
            if queued:
                self._queued -= 1

    async def _shown_running(
        self, call: ToolCall, run: Coroutine[Any, Any, ToolCallResult]
    ) -> ToolCallResult:
        """Await ``run`` with ``call`` listed in the current details meanwhile."""
        self._running[call.id] = policy.arguments_preview(call.name, call.arguments, limit=200)
        self._show_details()
        try:
            result = await run
        finally:
            # No workflow call here: on eviction the SDK unwinds with its own exception.
            self._running.pop(call.id, None)
        self._show_details()
        return result

    def _tool_slots(self) -> asyncio.Semaphore:
        """How many of this task's tool calls run at once; the rest wait in the workflow."""
        if self._calls_at_once is None:
            assert self._input is not None
            child = self._input.parent_is_subagent
            self._calls_at_once = asyncio.Semaphore(
                CHILD_TOOL_CALLS_AT_ONCE if child else TOOL_CALLS_AT_ONCE
            )
        return self._calls_at_once

    async def _run_tool(self, call: ToolCall, tool_input: ToolCallInput) -> ToolCallResult:
        assert self._input is not None
        timeout = tool_timeout(call.arguments.get("timeout"))
        summary = policy.arguments_preview(call.name, call.arguments)
        if self._input.agent.local_read_tools and call.name in policy.READ_ONLY_TOOLS:
            # In-process, bounded and read-only: run within this workflow task.
            return await workflow.execute_local_activity(
                RUN_TOOL_ACTIVITY,
                tool_input,
                result_type=ToolCallResult,
                start_to_close_timeout=timedelta(seconds=timeout + 60),
                retry_policy=_TOOL_RETRY,
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary=summary,
            )
        # On the tool queue: its own slots, which a task's slow or stalled calls (up to
        # 600 s each) can fill without delaying any model turn.
        return await workflow.execute_activity(
            RUN_TOOL_ACTIVITY,
            tool_input,
            task_queue=tool_queue(workflow.info().task_queue),
            result_type=ToolCallResult,
            start_to_close_timeout=timedelta(seconds=timeout + 60),
            heartbeat_timeout=timedelta(seconds=10),
            retry_policy=_TOOL_RETRY,
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            summary=summary,
        )

    async def _spawn_tool(self, call: ToolCall) -> ToolCallResult:
        assert self._input is not None
        try:
            if call.name == SPAWN_SUBAGENT:
                content = await self._children.spawn(
                    call,
                    parent=self._input,
                    parent_tools=[t for t in self._offered if t not in SPAWN_TOOLS],
                    parent_model=self._model,
                    left=self._left(),
                )
            else:
                content = await self._children.wait(call)
        except ToolCallRefused as err:
            return tool_error(call, str(err))
        return ToolCallResult(call_id=call.id, tool_name=call.name, content=content)

    def _republish(self) -> None:
        if self._input is not None and not self._status.terminal:
            self._publish(self._status)

    async def _continue_as_new(self, new: list[Message]) -> None:
        assert self._input is not None
        await workflow.wait_condition(workflow.all_handlers_finished)
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
            adopted=self._adopted,
            time_limit_from=self._time_limit_from,
            invalid_answers=self._invalid_answers,
            context=self._context,
            compactions=self._compactions,
        )
        # On versioned workers the new run starts on the deployment's current version,
        # like a follow-up run. Temporal's default would keep it on this run's version,
        # and a long task would hold that version's workers up for as long as it lives.
        # What it carries (the input and its state) is a replay-bound payload: newer
        # code reads it.
        workflow.continue_as_new(
            self._input.model_copy(update={"state": state}),
            memo=self._memo,
            search_attributes=workflow.info().typed_search_attributes,
            initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE,
        )

    # ------------------------------------------------------------------ state

    def _finish(
        self,
        status: TaskStatus,
        *,
        stop_reason: str,
        error: str | None = None,
        pending: list[Message] | None = None,
    ) -> TaskResult:
        # Input that came too late for this run is kept: a follow-up run reads it first.
        unread = [Message(role="user", content=text) for text in self._inbox]
        self._unread_pending = sum(m.role == "user" for m in pending or [])
        self._publish(status, stop_reason=stop_reason, error=error)
        self._inbox.clear()
        return TaskResult(
            pending_messages=[*(pending or []), *unread],
            status=status,
            result=self._last_text,
            result_ref=self._last_text_ref,
            stop_reason=stop_reason,
            error=error,
            turns=self._turns,
            usage=self._usage,
            head=self._head,
            model=model_label(self._model),
            children=self._children.finished,
            output=self._output,
            compactions=self._compactions,
            tree_usage=self._tree_usage(),
        )

    def _progress(self) -> None:
        """Publish the turn's progress (turns, usage, head) while running.

        A status change is published at once; progress alone at most once per
        ``_PROGRESS_EVERY`` of workflow time, so fast turns do not add a memo event each.
        """
        if self._status == TaskStatus.RUNNING:
            last = self._progress_at
            if (
                last is not None
                and workflow.now() - last < _PROGRESS_EVERY
                and not self._new_model_name()
            ):
                self._show_details()
                return
        self._publish(TaskStatus.RUNNING)

    def _new_model_name(self) -> bool:
        """Whether the first turn just named the model (``default`` -> the worker's).

        Published at once, so ``check`` never shows ``default`` for a task whose model
        has answered.
        """
        return self._memo.get("model") != model_label(self._model)

    def _publish(
        self, status: TaskStatus, *, stop_reason: str | None = None, error: str | None = None
    ) -> None:
        """Write the state to the memo and search attributes, only what changed."""
        self._status = status
        child_pause, child_calls = self._children.pending()
        pause_id = self._pause_id or child_pause
        pending = [*self._pending, *child_calls]
        if pending and not status.terminal and status != TaskStatus.CANCELLING:
            status = TaskStatus.PAUSED  # this task, or a child of it, waits for a decision
        self._shown = (status, pause_id, pending)
        self._show_details()
        memo: dict[str, Any] = {
            "status": status.value,
            "turns": self._turns,
            "usage": self._usage.model_dump(),
            "model": model_label(self._model),
            "head": self._head,
            "pause_id": pause_id,
            "pending_approvals": [p.model_dump() for p in pending],
        }
        if self._sandbox in ("none", "unavailable"):
            memo["sandbox"] = self._sandbox  # never silent: every task says so
        if self._children.count:
            memo["children"] = self._children.count
            tree = self._tree_usage()
            if tree is not None:
                memo["tree_usage"] = tree.model_dump()
        if self._compactions:
            memo["compactions"] = self._compactions
        if stop_reason is not None:
            memo["stop_reason"] = stop_reason
        if error is not None:
            memo["error"] = error
        if status.terminal and self._last_text:
            memo["result_preview"] = self._last_text[:500]
        unread = len(self._inbox) + self._unread_pending
        if status.terminal and unread:
            memo["unread_input"] = unread  # it arrived after the last turn began
        changed = {k: v for k, v in memo.items() if self._memo.get(k) != v}
        if changed:
            self._memo.update(changed)
            workflow.upsert_memo(changed)
            self._progress_at = workflow.now()
        # Only a status change updates the search attributes: one update per turn
        # would add an event to every turn's history.
        sa_state = (status.value, self._turns)
        last = self._published_sa
        if last is not None and last[0] == status.value:
            sa_state = last
        if sa_state != last:
            self._published_sa = sa_state
            workflow.upsert_search_attributes(
                [sa.STATUS.value_set(status.value), sa.TURNS.value_set(self._turns)]
            )
        self._report_to_parent(status, pause_id, pending)
        notifies = self._notes.enabled(self._input, bool(self._worker_notifies))
        if status == TaskStatus.PAUSED and pending and notifies:
            self._notes.paused(self._notify_task(status), pause_id, pending)

    def _tree_usage(self) -> Usage | None:
        """This task's usage and its finished subagents' (None when it spawned none)."""
        if not self._children.count:
            return None
        return self._usage + self._children.usage()

    def _report_to_parent(
        self, status: TaskStatus, pause_id: str | None, pending: list[PendingApproval]
    ) -> None:
        """Tell a parent subagent task when this one pauses or resumes."""
        assert self._input is not None
        parent = workflow.info().parent
        if not self._input.parent_is_subagent or parent is None or status.terminal:
            return
        report = (status.value, pause_id, len(pending))
        if report == self._reported or (self._reported is None and not pending):
            return
        self._reported = report
        state = ChildState(
            task_id=workflow.info().workflow_id,
            status=status,
            pause_id=pause_id,
            pending_approvals=pending,
        )
        handle = workflow.get_external_workflow_handle(parent.workflow_id)
        asyncio.create_task(handle.signal(CHILD_STATE_SIGNAL, state))  # noqa: RUF006

    def _check_size(self, value: object, what: str) -> None:
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


__all__ = ["SubagentWorkflow"]
