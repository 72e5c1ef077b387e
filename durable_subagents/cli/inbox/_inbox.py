"""The inbox: paused task trees, one pause in full, and decisions bound to what was read.

A pause is a tree: a parent's pending calls include its paused children's, as
``<child>/<child pause>/<call>``. The inbox lists each tree once, under its top task,
with every call that waits in it; a paused child whose calls its parent surfaces is not
listed again. Decisions go to the top task, which routes them below.

It reads from Temporal alone (visibility, memos and transcripts), so it answers while
no worker runs. One listing a poll interval serves every waiting page.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections import OrderedDict
from typing import Any
from urllib.parse import quote as url_quote

from pydantic import BaseModel, Field
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from durable_subagents.cli.inbox._access import Grant
from durable_subagents.client import SubagentClient
from durable_subagents.client._decisions import MAX_REASON_BYTES
from durable_subagents.client._task_state import info_from, quote
from durable_subagents.client._tree_usage import add_running_subagents
from durable_subagents.errors import PayloadEncryptionError, TaskNotFound, WrongTaskState
from durable_subagents.types import PendingApproval, TaskEvent, TaskInfo, TaskStatus
from durable_subagents.wire import _search_attributes as sa
from durable_subagents.wire._payloads import WORKFLOW

__all__ = [
    "CallRef",
    "CancelRequest",
    "DecisionRequest",
    "DecisionResult",
    "HeldTask",
    "Inbox",
    "InboxEntry",
    "InboxView",
    "InputRequest",
    "PauseView",
    "PendingCall",
    "RejectRequest",
    "TaskList",
]

MAX_HELD = 100
"""Held tasks one listing reads (each is described for its failing workflow task)."""
MAX_CALLS_READ = 4096
"""Calls one decision may name as read (a tree's pause holds at most 16 x 64 + 64)."""


# ---------------------------------------------------------------- what the API speaks


class PendingCall(BaseModel):
    """A call waiting for a decision, in the inbox or in a pause read in full."""

    call_id: str
    """What a decision names: ``<call>``, or ``<child>/<child pause>/<call>`` for a
    child's call surfaced on its parent."""
    task_id: str
    """The task whose call it is (the child, for a child's call)."""
    tool_name: str
    arguments_preview: str
    arguments_hash: str
    """What the decision binds to: a call asked again with other arguments is another."""
    resolved_path: str | None = None
    """Where the call's path leads through symlinks, when that differs from what it says."""
    arguments: dict[str, Any] | None = None
    """The full arguments (a pause read in full); None where they could not be read
    (then the preview is all there is)."""


class InboxEntry(BaseModel):
    """One paused tree: its top task, its pause, and every call that waits in it."""

    task: TaskInfo
    pause_id: str
    calls: list[PendingCall]
    web_ui: str | None = None
    """The top task in the Temporal Web UI, when the server knows where that is."""


class HeldTask(BaseModel):
    """A task held by its failing workflow task: nothing to decide, something to fix."""

    task: TaskInfo
    web_ui: str | None = None


class InboxView(BaseModel):
    """The inbox as one token sees it."""

    version: str
    """Changes whenever an entry, a pause or a call does (``since`` in a long poll)."""
    entries: list[InboxEntry]
    held: list[HeldTask] = []
    """Tasks a failing workflow task holds (a bug in workflow code, until a fixed worker
    resumes them), each with ``task.retrying`` naming the error and the attempt. Listed
    where the server flags such workflows (``TemporalReportedProblems``)."""


class PauseView(BaseModel):
    """One pause of a task, its calls with their full arguments."""

    task_id: str
    pause_id: str
    status: TaskStatus
    calls: list[PendingCall]
    web_ui: str | None = None


class CallRef(BaseModel):
    """A call as the decider read it: a decision counts only for these, as they were."""

    call_id: str = Field(max_length=2000)
    tool_name: str = Field(max_length=200)
    arguments_hash: str = Field(max_length=200)


class DecisionRequest(BaseModel):
    """An approval, bound to the pause read and to each call's arguments as read."""

    pause_id: str = Field(max_length=2000)
    """The pause read: if the task paused again since, nothing is decided (409)."""
    calls: list[CallRef] = Field(min_length=1, max_length=MAX_CALLS_READ)
    """Every call read (id, tool, argument hash), as the pause showed them."""
    call_ids: list[str] | None = Field(None, max_length=MAX_CALLS_READ)
    """The calls to decide; null: every call read that is still pending. A call named
    that was not read, or was read with other arguments, is refused (409)."""
    budget_usd: float | None = Field(None, gt=0, allow_inf_nan=False)
    """An approval of a tree's ``raise_budget`` call: the tree's new budget in USD
    (null: one more of the budget it was spawned with)."""

    def shown(self) -> set[tuple[str, str, str]]:
        """The calls read, as ``SubagentClient.approve(shown=...)`` takes them."""
        return {(c.call_id, c.tool_name, c.arguments_hash) for c in self.calls}


class RejectRequest(DecisionRequest):
    """A rejection; the model reads ``reason`` as the rejected calls' result."""

    reason: str | None = Field(None, max_length=MAX_REASON_BYTES)


class DecisionResult(BaseModel):
    """What a decision did."""

    task: TaskInfo
    """The task when the decision was sent (it goes on once a worker reads it)."""
    decided: list[str]
    """The calls decided."""
    not_shown: list[str]
    """Calls pending in the pause that were not among those read (added since, such as
    a second child's pause): left pending, to be read and decided."""


class InputRequest(BaseModel):
    """Steering or follow-up input for a task."""

    text: str


class CancelRequest(BaseModel):
    """Cancel a task; with ``wait``, for up to ``timeout`` seconds until it stopped."""

    wait: bool = False
    timeout: float = Field(10.0, ge=0, le=60)


class EventPage(BaseModel):
    """A page of a task tree's stream: its events after the offset asked for, in order."""

    events: list[TaskEvent]
    next: int | None = None
    """The offset to ask after next (the last event's; the one asked for if none came)."""


EVENTS_PAGE = 200
"""Events one ``/events`` answer holds at most."""
EVENTS_LINGER = 0.2
"""Seconds a waiting ``/events`` answer gathers events after the first came."""


class TaskList(BaseModel):
    """Tasks, newest first."""

    tasks: list[TaskInfo]


# ---------------------------------------------------------------- the inbox


def _owner(task_id: str, call_id: str) -> str:
    return call_id.split("/", 1)[0] if "/" in call_id else task_id


def _call(task_id: str, p: PendingApproval, arguments: dict[str, Any] | None = None) -> PendingCall:
    return PendingCall(
        call_id=p.call_id,
        task_id=_owner(task_id, p.call_id),
        tool_name=p.tool_name,
        arguments_preview=p.arguments_preview,
        arguments_hash=p.arguments_hash,
        resolved_path=p.resolved_path,
        arguments=None if arguments is None else in_schema_order(p.tool_name, arguments),
    )


def _schema_orders() -> dict[str, list[str]]:
    """The parameters of the tools a client knows, in their schemas' order, by tool."""
    from durable_subagents.tools import BUILTIN_TOOLS
    from durable_subagents.workflows._tree import SPAWN_TOOL_SPECS

    specs = [*(t.spec for t in BUILTIN_TOOLS.values()), *SPAWN_TOOL_SPECS]
    return {s.name: list(s.parameters.get("properties") or {}) for s in specs}


_SCHEMA_ORDERS: dict[str, list[str]] | None = None


def in_schema_order(tool_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments as its tool's schema lists them (``write_file``: path, content).

    The transcript keeps arguments with their keys sorted; people read a call as the
    tool declares it. The built-in tools' and the spawn tools' schemas are known here;
    another tool's arguments (an MCP server's, a worker's own) keep the stored order.
    Names the schema lacks come last.
    """
    global _SCHEMA_ORDERS
    if _SCHEMA_ORDERS is None:
        _SCHEMA_ORDERS = _schema_orders()
    order = _SCHEMA_ORDERS.get(tool_name, [])
    first = {name: arguments[name] for name in order if name in arguments}
    return {**first, **{k: v for k, v in arguments.items() if k not in first}}


class Inbox:
    """What ``subagents serve`` reads and decides through its ``SubagentClient``.

    Args:
        client: Connected with the deployment's settings (its payload keys decrypt
            the memos, its blob store holds the full arguments).
        task_queue: The queue whose paused tasks the inbox lists.
        ui_url: The Temporal Web UI's address, for links to the tasks.
        poll: Seconds a listing of paused tasks serves before it is read again.
    """

    def __init__(
        self,
        client: SubagentClient,
        *,
        task_queue: str,
        ui_url: str | None = None,
        poll: float = 2.0,
    ) -> None:
        self.client = client
        self.task_queue = task_queue
        self.ui_url = ui_url.rstrip("/") if ui_url else None
        self.poll = poll
        self._listing: list[TaskInfo] = []
        self._listed_at = float("-inf")
        self._listing_task: asyncio.Task[list[TaskInfo]] | None = None
        self._held: list[TaskInfo] = []
        self._problems_flagged = True
        self._parents: OrderedDict[str, str | None] = OrderedDict()
        """Each task's parent id, as far as looked up (it never changes)."""
        self._arguments: OrderedDict[tuple[str, str, str], dict[str, Any] | None] = OrderedDict()
        """Full arguments by (task, call, hash): a call's arguments never change."""

    # ------------------------------------------------------------------ reading

    def web_ui(self, info: TaskInfo) -> str | None:
        """The task's page in the Temporal Web UI, if the server was told where it is."""
        if self.ui_url is None:
            return None
        namespace = url_quote(self.client.temporal.namespace, safe="")
        url = f"{self.ui_url}/namespaces/{namespace}/workflows/{url_quote(info.id, safe='')}"
        return url + (f"/{url_quote(info.run_id, safe='')}/history" if info.run_id else "")

    async def task(self, grant: Grant, task_id: str) -> TaskInfo:
        """A task the grant reaches.

        Raises:
            TaskNotFound: no such task, or not one the grant reaches (the same message).
        """
        try:
            info = await self.client.check_task(task_id)
        except TaskNotFound:
            raise self._not_found(task_id) from None
        self._remember(info)
        if not await grant.reaches(info, self._parent):
            raise self._not_found(task_id)
        return info

    def _not_found(self, task_id: str) -> TaskNotFound:
        return TaskNotFound(
            f"no task {task_id!r} in namespace {self.client.temporal.namespace!r}; "
            "list_tasks() lists the tasks"
        )

    async def tasks(
        self, grant: Grant, parent_id: str | None, status: str | None
    ) -> list[TaskInfo]:
        """``list_tasks``, less the tasks the grant does not reach."""
        infos = await self.client.list_tasks(parent_id=parent_id, status=status)
        for info in infos:
            self._remember(info)
        return [i for i in infos if await grant.reaches(i, self._parent)]

    async def view(self, grant: Grant, max_age: float | None = None) -> InboxView:
        """The inbox as ``grant`` sees it, from a listing at most ``max_age`` s old."""
        listing = await self._paused(self.poll if max_age is None else max_age)
        by_id = {i.id: i for i in listing}
        entries = []
        for info in listing:
            parent = by_id.get(info.parent_id or "")
            if parent is not None and any(
                p.call_id.startswith(f"{info.id}/") for p in parent.pending_approvals
            ):
                continue  # its calls are listed under its parent
            if not info.pause_id or not info.pending_approvals:
                continue
            if not await grant.reaches(info, self._parent):
                continue
            entries.append(
                InboxEntry(
                    task=info,
                    pause_id=info.pause_id,
                    calls=[_call(info.id, p) for p in info.pending_approvals],
                    web_ui=self.web_ui(info),
                )
            )
        held = [
            HeldTask(task=info, web_ui=self.web_ui(info))
            for info in self._held
            if await grant.reaches(info, self._parent)
        ]
        key: list[Any] = [
            (e.task.id, e.pause_id, [(c.call_id, c.arguments_hash) for c in e.calls])
            for e in entries
        ]
        key += [(h.task.id, h.task.retrying) for h in held]
        version = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]
        return InboxView(version=version, entries=entries, held=held)

    async def wait(self, grant: Grant, since: str | None, timeout: float) -> InboxView:
        """The inbox once its version differs from ``since``, or at ``timeout``.

        Every waiter shares one listing per poll interval, however many pages wait.
        """
        deadline = time.monotonic() + timeout
        while True:
            view = await self.view(grant)
            left = deadline - time.monotonic()
            if view.version != since or left <= 0:
                return view
            await asyncio.sleep(min(self.poll, left))

    async def events(
        self, grant: Grant, task_id: str, after: int | None, tree: bool, wait: float
    ) -> EventPage:
        """The task's (and with ``tree`` its subtree's) events after ``after``.

        With ``wait``, a long poll on the task's stream: it answers once events came
        (and ``EVENTS_LINGER`` more for the rest of a burst), or after ``wait`` seconds.
        """
        await self.task(grant, task_id)
        if not wait:
            events = await self.client.events_since(task_id, after, tree=tree, limit=EVENTS_PAGE)
        else:
            events = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + wait
            stream = self.client.watch(task_id, tree=tree, after=after)
            try:
                while len(events) < EVENTS_PAGE:
                    left = deadline - loop.time()
                    if left <= 0:
                        break
                    try:
                        async with asyncio.timeout(left):
                            event = await anext(stream)
                    except (TimeoutError, StopAsyncIteration):
                        break
                    events.append(event)
                    deadline = min(deadline, loop.time() + EVENTS_LINGER)
            finally:
                await stream.aclose()
        last = next((e.offset for e in reversed(events) if e.offset is not None), after)
        return EventPage(events=events, next=last)

    def changed(self) -> None:
        """Read the paused tasks afresh at the next view (after a decision here)."""
        self._listed_at = float("-inf")

    async def pause(self, grant: Grant, task_id: str) -> PauseView:
        """The task's current pause with the full arguments of each call.

        Raises:
            TaskNotFound: no such task the grant reaches.
            WrongTaskState: the task is not paused.
        """
        info = await self.task(grant, task_id)
        if info.status != TaskStatus.PAUSED or not info.pause_id:
            raise WrongTaskState(
                f"task {task_id!r} is {info.status.value}, not paused; there is nothing to "
                "decide (check_task shows pending approvals while it is paused)",
                info.status.value,
            )
        wanted = [(info.id, p.call_id, p.arguments_hash) for p in info.pending_approvals]
        if any(k not in self._arguments for k in wanted):
            read = await self.client.pending_arguments(info)
            for (task, call, digest), p in zip(wanted, info.pending_approvals, strict=True):
                self._keep(self._arguments, (task, call, digest), read.get(p.call_id), 4096)
        calls = [
            _call(info.id, p, self._arguments.get(k))
            for k, p in zip(wanted, info.pending_approvals, strict=True)
        ]
        return PauseView(
            task_id=info.id,
            pause_id=info.pause_id,
            status=info.status,
            calls=calls,
            web_ui=self.web_ui(info),
        )

    # ------------------------------------------------------------------ deciding

    async def decide(
        self, grant: Grant, task_id: str, request: DecisionRequest, *, approved: bool
    ) -> DecisionResult:
        """Approve or reject calls of the pause read, as they were read.

        Raises:
            TaskNotFound: no such task the grant reaches.
            WrongTaskState: the task is not paused, or on another pause than the one read.
            UnknownCallId: a call named was not read, or has other arguments now.
        """
        await self.task(grant, task_id)
        shown = request.shown()
        try:
            if approved and request.budget_usd is not None:
                info = await self.client.raise_budget(
                    task_id, request.budget_usd, pause_id=request.pause_id
                )
            elif approved:
                info = await self.client.approve(
                    task_id, request.call_ids, pause_id=request.pause_id, shown=shown
                )
            else:
                reason = request.reason if isinstance(request, RejectRequest) else None
                info = await self.client.reject(
                    task_id, request.call_ids, reason, pause_id=request.pause_id, shown=shown
                )
        finally:
            self.changed()  # decided, or found changed: either way, list afresh
        chosen = set(request.call_ids) if request.call_ids is not None else None
        read = [p for p in info.pending_approvals if _key(p) in shown]
        return DecisionResult(
            task=info,
            decided=[p.call_id for p in read if chosen is None or p.call_id in chosen],
            not_shown=[p.call_id for p in info.pending_approvals if _key(p) not in shown],
        )

    # ------------------------------------------------------------------ internals

    async def _paused(self, max_age: float) -> list[TaskInfo]:
        """The queue's paused tasks, listed at most ``max_age`` seconds ago."""
        if time.monotonic() - self._listed_at <= max_age:
            return self._listing
        if self._listing_task is None or self._listing_task.done():
            self._listing_task = asyncio.create_task(self._list_paused())
        listing = await asyncio.shield(self._listing_task)
        return listing

    async def _list_paused(self) -> list[TaskInfo]:
        started = time.monotonic()
        query = (
            f"WorkflowType = '{WORKFLOW}' AND ExecutionStatus = 'Running' AND "
            f"{sa.STATUS.name} = 'paused' AND TaskQueue = {quote(self.task_queue)}"
        )
        infos: list[TaskInfo] = []
        async for execution in self.client.temporal.list_workflows(query):
            try:
                memo = await execution.memo()
            except PayloadEncryptionError:
                continue  # a task under a key this server lacks: nothing to show of it
            info = info_from(execution.id, execution.run_id, WorkflowExecutionStatus.RUNNING, memo)
            if info.status == TaskStatus.PAUSED:
                await add_running_subagents(self.client.temporal, info)  # the tree's cost
                infos.append(info.public())
                self._remember(info)
        infos.sort(key=lambda i: i.created_at.timestamp() if i.created_at else 0.0)
        self._held = await self._list_held()
        self._listing, self._listed_at = infos, started
        return infos

    async def _list_held(self) -> list[TaskInfo]:
        """The queue's tasks whose workflow task keeps failing, with what fails.

        Temporal flags such a workflow with ``TemporalReportedProblems`` (servers 1.29
        and later, where ``system.numConsecutiveWorkflowTaskProblemsToTriggerSearchAttribute``
        is set; the bundled dev server sets it); a server without it lists none.
        """
        if not self._problems_flagged:
            return []
        query = (
            f"WorkflowType = '{WORKFLOW}' AND ExecutionStatus = 'Running' AND "
            f"TemporalReportedProblems IS NOT NULL AND TaskQueue = {quote(self.task_queue)}"
        )
        held: list[TaskInfo] = []
        try:
            async for execution in self.client.temporal.list_workflows(query, limit=MAX_HELD):
                with contextlib.suppress(TaskNotFound, PayloadEncryptionError):
                    info = await self.client.check_task(execution.id)
                    if info.retrying:
                        held.append(info)
                        self._remember(info)
        except RPCError as err:
            if err.status != RPCStatusCode.INVALID_ARGUMENT:
                raise
            self._problems_flagged = False  # the server knows no such attribute
        return held

    def _remember(self, info: TaskInfo) -> None:
        self._keep(self._parents, info.id, info.parent_id, 65536)

    @staticmethod
    def _keep(cache: OrderedDict[Any, Any], key: Any, value: Any, size: int) -> None:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > size:
            cache.popitem(last=False)

    async def _parent(self, task_id: str) -> TaskInfo | None:
        """A parent for scope checks: its id and parent id (None: not a task here)."""
        if task_id not in self._parents:
            try:
                self._remember(await self.client.check_task(task_id))
            except TaskNotFound:
                self._keep(self._parents, task_id, _OUTSIDE, 65536)
        parent = self._parents[task_id]
        if parent == _OUTSIDE:
            return None
        return TaskInfo(id=task_id, status=TaskStatus.RUNNING, parent_id=parent)


_OUTSIDE = "\0outside"
"""A parent id recorded only (an orchestrator's own id, not a task of the namespace)."""


def _key(p: PendingApproval) -> tuple[str, str, str]:
    return (p.call_id, p.tool_name, p.arguments_hash)
