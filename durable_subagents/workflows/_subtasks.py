"""Subagents that spawn subagents: the two tools the workflow itself handles.

An agent with ``may_spawn`` is offered ``spawn_subagent`` and ``wait_subagents``. They
run in the workflow, not as activities: a child is a child workflow, so cancelling the
parent cancels it durably. A child never gets more than its parent: its tools are
those of its agent that the parent was offered, the parent's rules apply to it as
restrictions, its mode is the stricter of the two, and it cannot spawn in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import CancelledError, ChildWorkflowError, FailureError

from durable_subagents.workflows._activity_options import task_options
from durable_subagents.workflows._background import Background
from durable_subagents.workflows._outcomes import tool_error

with workflow.unsafe.imports_passed_through():
    from durable_subagents.agents import resolve_agent
    from durable_subagents.agents._spec import SPAWN_TOOLS
    from durable_subagents.errors import InvalidRequest
    from durable_subagents.spawn import (
        SpawnOptions,
        build_task_input,
        child_spec,
        start_metadata,
        static_details,
        static_summary,
    )
    from durable_subagents.types import (
        PendingApproval,
        TaskResult,
        TaskStatus,
        ToolCall,
        ToolSpec,
        Usage,
    )
    from durable_subagents.wire._payloads import (
        DECIDE_SIGNAL,
        OWN_TASKS_ACTIVITY,
        WORKFLOW,
        CallDecision,
        ChildState,
        Decisions,
        TaskInput,
        ToolCallResult,
    )
    from durable_subagents.wire._stream_items import MAX_DEPTH


_USAGE = "usage"
"""A finished child's entry: its tree's usage (kept out of the reports the model reads)."""

SPAWN_SUBAGENT, WAIT_SUBAGENTS = SPAWN_TOOLS


SPAWN_TOOL_SPECS = [
    ToolSpec(
        name=SPAWN_SUBAGENT,
        description=(
            "Start a subagent on a self-contained part of your task; it runs in parallel "
            "and returns its task_id at once. Give it everything it needs in the prompt: "
            "it sees nothing else. Then call wait_subagents for its result. Agents: "
            "explore (find things), plan (write a plan), research (answer from the "
            "workspace), general (edit and run commands). A subagent never gets tools "
            "you do not have."
        ),
        parameters={
            "type": "object",
            "properties": {
                "agent": {
                    "type": "string",
                    "enum": ["explore", "plan", "research", "general"],
                    "description": "Which agent to start.",
                },
                "prompt": {"type": "string", "description": "The complete task."},
                "description": {"type": "string", "description": "A 3-8 word label."},
                "model": {
                    "type": "string",
                    "description": "'provider:model'; default: the same model as yours.",
                },
            },
            "required": ["agent", "prompt"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        name=WAIT_SUBAGENTS,
        description=(
            "Wait for subagents you started: returns when all of them have finished, or "
            "as soon as one is paused waiting for the user's approval (then call it again "
            "to keep waiting). Returns each one's status and result."
        ),
        parameters={
            "type": "object",
            "properties": {
                "task_ids": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Which subagents; default: every one you started.",
                }
            },
            "additionalProperties": False,
        },
    ),
]


PAUSED_CALLS = "waiting_for_the_users_approval_of"
"""The key of a paused child's pending calls in a ``wait_subagents`` report."""
MAX_CHILDREN = 16
"""Subagents one task may spawn in all (children cannot spawn in turn: depth 1)."""
MAX_SPAWNS_PER_TURN = 8
"""``spawn_subagent`` calls one model turn may make; more are refused."""
MIN_CHILD_TOKENS = 1_000
"""A child's token budget is never smaller; with less left, spawning is refused."""
WAIT_REPORT_BYTES = 64 * 1024
"""Longest ``wait_subagents`` report (as JSON); longer results are cut to fit."""


@dataclass
class ParentLeft:
    """What the spawning task has left: a child gets no more.

    Attributes:
        turns: Turns the parent may still take.
        seconds: Seconds until the parent's time limit; None: it has none.
        tokens: Tokens the child may have (the parent's share for it); None: no budget.
    """

    turns: int
    seconds: float | None
    tokens: int | None


async def start_child(
    task_input: TaskInput, child_id: str, task_queue: str
) -> workflow.ChildWorkflowHandle[Any, TaskResult]:
    """Start a subagent task as a child of the calling workflow.

    The child carries the memo and search attributes of any spawned task, and the
    parent close policy ``REQUEST_CANCEL``: closing the parent cancels it durably.
    """
    memo, attributes = start_metadata(task_input)
    return await workflow.start_child_workflow(
        WORKFLOW,
        task_input,
        result_type=TaskResult,
        id=child_id,
        task_queue=task_queue,
        memo=memo,
        search_attributes=attributes,
        static_summary=static_summary(task_input),
        static_details=static_details(task_input, child_id),
        parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
        cancellation_type=workflow.ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
    )


class ChildTasks:
    """The children of one subagent task: starting, waiting, pauses and decisions.

    Workflow code (deterministic): it runs inside ``SubagentWorkflow``.
    """

    def __init__(self, on_change: Callable[[], None], background: Background) -> None:
        self._on_change = on_change
        self._background = background
        self._watchers: dict[str, asyncio.Task[None]] = {}
        self._handles: dict[str, workflow.ChildWorkflowHandle[Any, TaskResult]] = {}
        self._states: dict[str, ChildState] = {}
        self._done: dict[str, dict[str, Any]] = {}
        self._told: set[tuple[str, str]] = set()
        self._known: list[str] = []
        """Every child id, registered before its start resolves (its signals may come first)."""
        self._budgets: dict[str, int] = {}
        """Token budgets given to children, reserved until they finish."""

    @property
    def running(self) -> bool:
        """Whether any child has not finished."""
        return any(task_id not in self._done for task_id in self._known)

    @property
    def finished(self) -> dict[str, dict[str, Any]]:
        """Summaries of finished children (carried over a continue-as-new)."""
        return dict(self._done)

    @property
    def count(self) -> int:
        """Children spawned so far (this run and earlier ones)."""
        return len(self._known)

    def tokens(self) -> tuple[int, int]:
        """``(used, reserved)``: tokens finished children used, and budgets of running ones.

        A child that failed or was cancelled reports no usage: its whole budget counts.
        """
        used = reserved = 0
        for task_id in self._known:
            budget = self._budgets.get(task_id, 0)
            done = self._done.get(task_id)
            if done is None:
                reserved += budget
            elif "tokens" in done:
                used += int(done["tokens"])
            else:
                used += budget
        return used, reserved

    def usage(self) -> Usage:
        """The usage of the finished children and of every task below them."""
        total = Usage()
        for done in self._done.values():
            if isinstance(done.get(_USAGE), dict):
                total = total + Usage.model_validate(done[_USAGE])
        return total

    def restore(self, finished: dict[str, dict[str, Any]]) -> None:
        """Take over the finished children of an earlier run."""
        self._done.update(finished)
        self._known += [t for t in finished if t not in self._known]

    # ------------------------------------------------------------------ tools

    async def spawn(
        self,
        call: ToolCall,
        *,
        parent: TaskInput,
        parent_tools: list[str],
        parent_model: str,
        left: ParentLeft,
    ) -> str:
        """Start a child for a ``spawn_subagent`` call; the model gets its task id.

        The child's turns, time and tokens are capped by what the parent has ``left``,
        and a task spawns at most ``MAX_CHILDREN``.
        """
        if call.arguments_ref:
            # Over 8 KB, the arguments are in this task's blobs, and the workflow holds a
            # preview of each text: the child would get 200 characters of its prompt.
            raise ToolCallRefused(
                "the arguments of spawn_subagent are over 8 KB; write the details to a "
                "file in the workspace and give the subagent a short prompt that names it"
            )
        args = call.arguments
        if len(self._known) >= MAX_CHILDREN:
            raise ToolCallRefused(
                f"this task has spawned {MAX_CHILDREN} subagents, the most one task may; "
                "wait for them and use their results"
            )
        budget = left.tokens
        if budget is not None and budget < MIN_CHILD_TOKENS:
            raise ToolCallRefused(
                f"only {budget} tokens of this task's budget are left for a subagent, "
                f"under the {MIN_CHILD_TOKENS} one needs: finish the work yourself"
            )
        model = str(args.get("model") or "")
        provider = parent_model.split(":", 1)[0]
        if model and (model.split(":", 1)[0] != provider or model.startswith("scripted:@")):
            raise ToolCallRefused(
                f"model {model!r} is not allowed: a subagent may only use a {provider} "
                "model, like its parent; leave model out to use the same one"
            )
        try:
            agent = resolve_agent(str(args.get("agent", "")))
            spec = child_spec(parent.agent, parent_tools, agent)
            prompt = args.get("prompt")
            options = SpawnOptions(
                model=model or None,
                max_turns=min(spec.max_turns, left.turns),
                approval_timeout=parent.approval_timeout,
                time_limit=max(left.seconds, 1.0) if left.seconds is not None else None,
                workspace=parent.workspace,
                token_budget=budget,
            )
            task_input = build_task_input(
                spec,
                prompt if isinstance(prompt, str) else "",
                options,
                description=str(args.get("description") or ""),
                parent_id=workflow.info().workflow_id,
                default_model=parent_model,
                created_at=workflow.now(),
                check_model=False,
            )
        except InvalidRequest as err:
            raise ToolCallRefused(str(err)) from None
        task_input.parent_is_subagent = True
        task_input.streams_to_parent = True
        own = workflow.info().workflow_id
        task_input.stream_ancestors = [own, *parent.stream_ancestors][:MAX_DEPTH]
        # The child is bound by what its parent's activities are: narrowed, never wider.
        task_input.activity_options = task_options(parent)
        child_id = f"subagent-{spec.name}-{workflow.uuid4().hex[:12]}"
        self._known.append(child_id)
        if budget is not None:
            self._budgets[child_id] = budget
        try:
            handle = await start_child(task_input, child_id, workflow.info().task_queue)
        except BaseException:
            self._known.remove(child_id)
            self._budgets.pop(child_id, None)
            raise
        self._handles[child_id] = handle
        self._watchers[child_id] = asyncio.create_task(self._watch(child_id, handle))
        return json.dumps({"task_id": child_id, "agent": spec.name, "tools": spec.tools})

    async def tool(
        self,
        call: ToolCall,
        *,
        parent: TaskInput,
        offered: list[str],
        parent_model: str,
        left: Callable[[], ParentLeft],
    ) -> ToolCallResult:
        """Run a ``spawn_subagent`` or ``wait_subagents`` call; a refused one is an error.

        Args:
            call: The call, approved.
            parent: This task's input.
            offered: The tools this task was offered (a child gets no others).
            parent_model: This task's model.
            left: What this task has left for a child, when it spawns one.
        """
        try:
            if call.name == SPAWN_SUBAGENT:
                content = await self.spawn(
                    call,
                    parent=parent,
                    parent_tools=[t for t in offered if t not in SPAWN_TOOLS],
                    parent_model=parent_model,
                    left=left(),
                )
            else:
                content = await self.wait(call)
        except ToolCallRefused as err:
            return tool_error(call, str(err))
        return ToolCallResult(call_id=call.id, tool_name=call.name, content=content)

    async def wait(self, call: ToolCall) -> str:
        """Wait until the children are done, or one has a pause the model was not told of."""
        requested = call.arguments.get("task_ids")
        ids = [str(i) for i in requested] if isinstance(requested, list) else list(self._known)
        ids = list(dict.fromkeys(ids))  # each child once in the report
        unknown = [i for i in ids if i not in self._known]
        if unknown:
            started = ", ".join(self._known) or "none"
            named = ", ".join(i[:100] for i in unknown[:5])
            if len(unknown) > 5:
                named += f" and {len(unknown) - 5} more"
            raise ToolCallRefused(f"not subagents of this task: {named}; started: {started}")
        if not ids:
            raise ToolCallRefused("no subagents were started; call spawn_subagent first")
        await workflow.wait_condition(
            lambda: all(i in self._done for i in ids) or any(self._new_pause(i) for i in ids)
        )
        report = []
        for task_id in ids:
            if task_id in self._done:
                done = {k: v for k, v in self._done[task_id].items() if k != _USAGE}
                report.append({"task_id": task_id, **done})
                continue
            state = self._states.get(task_id)
            if state is not None and state.status == TaskStatus.PAUSED and state.pause_id:
                self._told.add((task_id, state.pause_id))
                report.append(
                    {
                        "task_id": task_id,
                        "status": "paused",
                        PAUSED_CALLS: [p.arguments_preview for p in state.pending_approvals],
                        "next": "it resumes when the user decides; call wait_subagents again",
                    }
                )
            else:
                report.append({"task_id": task_id, "status": "running"})
        text = json.dumps(report)
        if len(text) > WAIT_REPORT_BYTES:
            # Results a model wrote, escaped by JSON (an emoji takes 12 bytes): uncut,
            # sixteen of them were over the parent's model-turn payload limit.
            share = WAIT_REPORT_BYTES // len(report) - 2  # each entry's ", " or "[]"
            text = json.dumps([_fit(entry, share) for entry in report])
        return text

    # ------------------------------------------------------------------ pauses

    def update(self, state: ChildState) -> None:
        """A child reported its pause state (the ``child_state`` signal)."""
        if state.task_id in self._known and state.task_id not in self._done:
            self._states[state.task_id] = state
            self._on_change()

    def pending(self) -> tuple[str | None, list[PendingApproval]]:
        """The first paused child's composite pause id, and every paused child's calls.

        Call ids are ``<child task id>/<child pause id>/<call id>``: a decision goes to
        that child and counts only for that pause.
        """
        pause_id: str | None = None
        calls: list[PendingApproval] = []
        for task_id, state in self._states.items():
            if state.status != TaskStatus.PAUSED or not state.pause_id:
                continue
            pause_id = pause_id or f"{task_id}:{state.pause_id}"
            calls += [
                p.model_copy(update={"call_id": f"{task_id}/{state.pause_id}/{p.call_id}"})
                for p in state.pending_approvals
            ]
        return pause_id, calls

    async def route(self, decisions: list[CallDecision]) -> None:
        """Forward decisions on children's calls to the children they belong to."""
        by_pause: dict[tuple[str, str], list[CallDecision]] = {}
        for d in decisions:
            task_id, _, rest = d.call_id.partition("/")
            pause_id, _, call_id = rest.partition("/")
            own = d.model_copy(update={"call_id": call_id})
            by_pause.setdefault((task_id, pause_id), []).append(own)
        for (task_id, pause_id), own_decisions in by_pause.items():
            handle = self._handles.get(task_id)
            if handle is not None and pause_id:
                await handle.signal(
                    DECIDE_SIGNAL, Decisions(pause_id=pause_id, decisions=own_decisions)
                )

    def route_theirs(self, decisions: Decisions) -> Decisions | None:
        """Send the decisions on children's calls (``<child task id>/<call id>``) on.

        Returns:
            The decisions on this task's own calls; None when there were none.
        """
        routed = [d for d in decisions.decisions if "/" in d.call_id]
        if not routed:
            return decisions
        self._background.start(self.route(routed), "routing decisions to children")
        own = [d for d in decisions.decisions if "/" not in d.call_id]
        return decisions.model_copy(update={"decisions": own}) if own else None

    async def cancel_all(self) -> None:
        """Cancel running children and wait until they acknowledged."""
        running = [t for i, t in self._watchers.items() if i not in self._done]
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(asyncio.CancelledError, FailureError):
                await task

    # ------------------------------------------------------------------ internals

    def _new_pause(self, task_id: str) -> bool:
        state = self._states.get(task_id)
        return (
            state is not None
            and state.status == TaskStatus.PAUSED
            and state.pause_id is not None
            and (task_id, state.pause_id) not in self._told
        )

    async def _watch(
        self, task_id: str, handle: workflow.ChildWorkflowHandle[Any, TaskResult]
    ) -> None:
        try:
            result = await handle
            self._done[task_id] = {
                "status": result.status.value,
                "result": result.result[:4000],
                "error": result.error,
                "turns": result.turns,
                "tokens": result.usage.input_tokens + result.usage.output_tokens,
            }
            usage = result.tree_usage or result.usage
            self._done[task_id][_USAGE] = usage.model_dump()
        except ChildWorkflowError as err:
            cause = err.cause
            status = "cancelled" if isinstance(cause, CancelledError) else "failed"
            self._done[task_id] = {"status": status, "error": getattr(cause, "message", str(err))}
        self._states.pop(task_id, None)
        self._on_change()


OWN_TASKS_PATCH = "registered-tasks-checked"
"""Runs from here on check each registered task's parent before cancelling it."""


class RegisteredTasks:
    """Tasks spawned through the client that named this one as their parent.

    They are cancelled when this task is cancelled, fails or times out, as child
    workflows would be; the registration (``register_child``) is durable, so this holds
    even when the process that spawned them is gone.

    Attributes:
        ids: The registered task ids, not yet cancelled (carried over a continue-as-new).
    """

    def __init__(self) -> None:
        self.ids: list[str] = []

    def add(self, task_id: str) -> None:
        """Register a task (once however often its signal comes)."""
        if task_id not in self.ids:
            self.ids.append(task_id)

    def restore(self, carried: list[str]) -> None:
        """Take the tasks an earlier run registered, before those registered since."""
        self.ids = [*carried, *self.ids]

    async def cancel(self) -> None:
        """Request cancellation of the registered tasks that name this one as parent.

        A registration is a signal anyone may send: only the ids whose task's
        ``SubagentParent`` is this task are cancelled (``own_registered_tasks``), so a
        forged registration cannot reach a stranger's task.
        """
        ids, self.ids = self.ids, []
        if ids and workflow.patched(OWN_TASKS_PATCH):
            ids = await workflow.execute_activity(
                OWN_TASKS_ACTIVITY,
                args=[workflow.info().workflow_id, ids],
                result_type=list[str],
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=RetryPolicy(maximum_attempts=5),
            )

        async def cancel(task_id: str) -> None:
            try:
                await workflow.get_external_workflow_handle(task_id).cancel()
            except Exception:  # it finished already, or never started
                workflow.logger.info("registered child %s was not cancelled", task_id)

        await asyncio.gather(*(cancel(t) for t in ids))


def _fit(entry: dict[str, Any], limit: int) -> dict[str, Any]:
    """A report entry cut until its JSON takes at most ``limit`` characters.

    The longest of its texts (result, error) or its list of pending calls is cut first,
    in proportion to the excess; the entry says what was cut.
    """
    entry = dict(entry)
    cut: dict[str, int] = {}
    while (size := len(json.dumps(entry))) > limit:
        key = max(
            (k for k in ("result", "error", PAUSED_CALLS) if entry.get(k)),
            key=lambda k: len(json.dumps(entry[k])),
            default=None,
        )
        if key is None:
            break  # only ids and counts are left
        value = entry[key]
        cut.setdefault(key, len(value))
        keep = min(len(value) * limit // size, len(value) - 1)
        entry[key] = value[: max(keep, 0)]
        entry["cut"] = ", ".join(
            f"{k}: {len(entry[k])} of {n} {'calls' if k == PAUSED_CALLS else 'characters'} shown"
            for k, n in cut.items()
        )
    return entry


class ToolCallRefused(Exception):
    """A spawn tool call the model must correct (sent back as the tool's error)."""
