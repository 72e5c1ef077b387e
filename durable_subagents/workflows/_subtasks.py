"""Subagents that spawn subagents: the two tools the workflow itself handles.

An agent with ``may_spawn`` is offered ``spawn_subagent`` and ``wait_subagents`` while
its task has depth left (``max_depth``). They run in the workflow, not as activities: a
child is a child workflow, so cancelling the parent cancels it durably. A child never
gets more than its parent: its tools are those of its agent that the parent was
offered, the parent's rules apply to it as restrictions, its mode is the stricter of
the two, it has one level fewer below it, and it picks its own children from the
agents its parent could spawn (the copy in its input). The top task of a tree counts
the tree's tasks (``max_tasks``); a task below it asks the top one for each child.
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
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    FailureError,
)

from durable_subagents.workflows._activity_options import task_options
from durable_subagents.workflows._background import Background
from durable_subagents.workflows._outcomes import tool_error
from durable_subagents.workflows._tree import (
    TreeCount,
    agents_below,
    depth_left,
    spawnable_agent,
    spawns,
)

with workflow.unsafe.imports_passed_through():
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
        Usage,
    )
    from durable_subagents.wire._payloads import (
        DECIDE_SIGNAL,
        RESERVE_TASK_ACTIVITY,
        TREE_FULL,
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

PAUSED_CALLS = "waiting_for_the_users_approval_of"
"""The key of a paused child's pending calls in a ``wait_subagents`` report."""
MAX_CHILDREN = 16
"""Subagents one task may spawn in all (its children's own count apart)."""
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

    def __init__(
        self, on_change: Callable[[], None], background: Background, tree: TreeCount
    ) -> None:
        self._on_change = on_change
        self._tree = tree
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
        self.interrupt: Callable[[], bool] = lambda: False
        """Whether a wait is to end now (the tree's budget is spent: the task pauses)."""

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
        if not spawns(parent):
            raise ToolCallRefused(
                "this task may not spawn subagents: its tree is as deep as its spawn "
                "allows (max_depth); do the work yourself"
            )
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
        below = depth_left(parent) - 1
        try:
            agent = spawnable_agent(parent, str(args.get("agent", "")))
        except InvalidRequest as err:
            raise ToolCallRefused(str(err)) from None
        model = str(args.get("model") or "")
        provider = parent_model.split(":", 1)[0]
        if (
            model
            and model != agent.model
            and (model.split(":", 1)[0] != provider or model.startswith("scripted:@"))
        ):
            # The agent's own model may be another provider's (the worker's allowlist
            # has the last word); a model's own pick stays with its parent's provider.
            raise ToolCallRefused(
                f"model {model!r} is not allowed: a subagent may only use a {provider} "
                "model, like its parent, or its agent's own; leave model out to use the "
                "agent's, else the same as yours"
            )
        try:
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
                spawnable=agents_below(parent.agents, spec) if below > 0 else {},
            )
        except InvalidRequest as err:
            raise ToolCallRefused(str(err)) from None
        task_input.parent_is_subagent = True
        task_input.streams_to_parent = True
        own = workflow.info().workflow_id
        task_input.stream_ancestors = [own, *parent.stream_ancestors][:MAX_DEPTH]
        # The child is bound by what its parent's activities are: narrowed, never wider.
        task_input.activity_options = task_options(parent)
        task_input.max_depth = below
        task_input.max_tasks = None  # the tree's top task counts them
        task_input.agents = task_input.agents or None  # none: it spawns no more
        task_input.depth = parent.depth + 1
        task_input.tree_root = parent.tree_root or own
        task_input.budget_usd = parent.budget_usd  # it reports its spend to the top
        child_id = f"subagent-{spec.name}-{workflow.uuid4().hex[:12]}"
        self._known.append(child_id)  # before any wait: the turn's other spawns count it
        if budget is not None:
            self._budgets[child_id] = budget
        try:
            await self._count(parent, child_id)
            handle = await start_child(task_input, child_id, workflow.info().task_queue)
        except BaseException:
            self._known.remove(child_id)
            self._budgets.pop(child_id, None)
            raise
        self._handles[child_id] = handle
        self._watchers[child_id] = asyncio.create_task(self._watch(child_id, handle))
        return json.dumps({"task_id": child_id, "agent": spec.name, "tools": spec.tools})

    async def _count(self, parent: TaskInput, child_id: str) -> None:
        """Count the child among its tree's tasks: here at the top, else by the top task.

        Raises:
            ToolCallRefused: the tree holds all the tasks it may.
        """
        if parent.tree_root is None:
            if parent.max_tasks is None:
                return  # a run recorded before trees were counted
            refusal = self._tree.refusal(child_id)
            if refusal is not None:
                raise ToolCallRefused(refusal)
            self._tree.take(child_id)
            return
        try:
            await workflow.execute_activity(
                RESERVE_TASK_ACTIVITY,
                args=[parent.tree_root, child_id],
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=5, non_retryable_error_types=[TREE_FULL]),
                summary="count the tree's tasks",
            )
        except ActivityError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type == TREE_FULL:
                raise ToolCallRefused(cause.message) from None
            raise ToolCallRefused(
                f"the subagent was not started: its tree's top task could not count it ({cause})"
            ) from None

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
            lambda: (
                all(i in self._done for i in ids)
                or any(self._new_pause(i) for i in ids)
                or self.interrupt()
            )
        )
        held = self.interrupt()
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
            elif held:
                report.append(
                    {
                        "task_id": task_id,
                        "status": "running",
                        "next": "held: the task tree has spent its budget; once the user "
                        "raises it, call wait_subagents again",
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
            # A failed task says what it and its subagents used (its failure's details).
            details = cause.details if isinstance(cause, ApplicationError) else ()
            if details and isinstance(details[0], dict) and "input_tokens" in details[0]:
                self._done[task_id][_USAGE] = details[0]
        self._states.pop(task_id, None)
        self._on_change()


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
