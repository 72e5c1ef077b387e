"""Tools an orchestrating LLM calls to manage subagents: schemas plus a dispatcher.

The model sees nine function tools (eight when a person approves, see
``SubagentTools``); ``SubagentTools.call`` runs one and returns a
JSON string for the model. Caller mistakes come back as ``{"error": ...}`` so the
model can correct itself; the dispatcher also handles ``after_pause`` for the model.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from durable_subagents.agents import BUILTIN_AGENTS, UnloadableAgent
from durable_subagents.client._client import SubagentClient
from durable_subagents.errors import InvalidRequest, SubagentError, TaskNotFound, UnknownCallId
from durable_subagents.types import PendingApproval, TaskEvent, TaskInfo, TaskStatus
from durable_subagents.wire._ledger import BUDGET_TOOL
from durable_subagents.wording._error_wording import for_model

MAX_WAIT = 600.0
"""Seconds any single wait may block, whatever the model asks for."""

StatusName = Literal[
    "pending", "running", "paused", "cancelling", "completed", "failed", "cancelled", "timed_out"
]

_NEXT = {
    TaskStatus.PENDING: "pending: no worker has taken it yet; call check_subagent again later",
    TaskStatus.RUNNING: "running: call check_subagent again later (wait=true blocks until it "
    "finishes or pauses); send_subagent_input steers it, cancel_subagent stops it",
    TaskStatus.PAUSED: "paused: call approve_tool_calls or reject_tool_calls (all pending "
    "calls, or some call_ids)",
    TaskStatus.CANCELLING: "cancelling: call check_subagent again to see it cancelled",
    TaskStatus.COMPLETED: "completed: read result; send_subagent_input continues the same "
    "conversation",
    TaskStatus.FAILED: "failed: see error; spawn a new subagent to retry",
    TaskStatus.CANCELLED: "cancelled: spawn a new subagent if the work is still needed",
    TaskStatus.TIMED_OUT: "timed_out: result holds its partial output; spawn a new subagent "
    "to go on",
}
_NEXT_PERSON = {
    **_NEXT,
    TaskStatus.PAUSED: "paused: a person approves or rejects these calls, not you (`subagents "
    "approve`/`reject` with the task id); check_subagent (wait=true) waits for that "
    "decision, reject_tool_calls refuses calls you do not want, cancel_subagent stops it",
}
_ROW = {"id", "agent", "description", "status", "turns"}
_VIEW = {
    "id",
    "agent",
    "status",
    "turns",
    "result",
    "output",
    "error",
    "stop_reason",
    "pause_id",
    "usage",
    "budget_usd",
    "spent_usd",
    "retrying",
    "waiting",
}
_DECIDED = "decision sent; the subagent resumes shortly: call check_subagent again"


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SpawnSubagent(_Args):
    """Start a subagent on a self-contained task and get its task_id at once.

    Use it to delegate work that can run on its own; spawn several to work in parallel.
    Returns {"task_id"}; then call check_subagent or wait_subagents for the result.
    """

    agent: str = Field(description="Agent name; one of the agents listed above.")
    prompt: str = Field(description="The full task: the subagent sees nothing else.")
    description: str = Field("", description="A short label (3-8 words) for listings.")
    model: str | None = Field(None, description="'provider:model'; default: the agent's.")
    max_turns: int | None = Field(None, ge=1, description="Turn limit; default: the agent's.")
    tools: list[str] | None = Field(None, description="Restrict it to these of its tools.")
    reasoning_effort: Literal["low", "medium", "high"] | None = Field(
        None, description="How hard a reasoning model thinks; at most the agent's."
    )
    output_schema: dict[str, Any] | None = Field(
        None,
        description=(
            "A JSON Schema (type object) its answer must match; then the task's 'output' "
            "is the validated answer, as JSON."
        ),
    )
    budget_usd: float | None = Field(
        None,
        gt=0,
        description=(
            "USD it and every subagent below it may spend in all; then it pauses until "
            "a person raises the budget."
        ),
    )


class CheckSubagent(_Args):
    """Get a subagent's state; by default wait until it finishes or needs a decision.

    Returns the task (status, result, error, pending approvals, usage) and a 'next'
    hint. With wait=true it returns when the task is finished or paused, or at the
    timeout with its current state (then check again).
    """

    task_id: str = Field(description="The id spawn_subagent returned.")
    wait: bool = Field(True, description="Block until finished or paused.")
    timeout: float | None = Field(None, ge=0, description="Seconds to wait (at most 600).")
    events_after: int | None = Field(
        None,
        ge=-1,
        description=(
            "Also return what it did since this event offset (its text, tool calls, "
            "status): -1 for everything, then the 'events_next' of the last reply."
        ),
    )


class WaitSubagents(_Args):
    """Wait for several subagents: the first that needs you (any) or all of them (all).

    Returns every task's state, in the order given, each with a 'next' hint.
    """

    task_ids: list[str] = Field(min_length=1, description="Task ids to wait for.")
    mode: Literal["any", "all"] = Field("any", description="'any' or 'all'.")
    timeout: float | None = Field(None, ge=0, description="Seconds to wait (at most 600).")


class ApproveToolCalls(_Args):
    """Let a paused subagent run the tool calls it asked permission for.

    Read each pending call's full arguments first (pending_approvals; show_tool_call
    when they were cut). Then check_subagent.
    """

    task_id: str = Field(description="The paused task.")
    call_ids: list[str] | None = Field(None, description="Calls to approve; default: all.")


class RejectToolCalls(_Args):
    """Refuse tool calls of a paused subagent; it gets the reason and goes on without them."""

    task_id: str = Field(description="The paused task.")
    call_ids: list[str] | None = Field(None, description="Calls to reject; default: all.")
    reason: str | None = Field(None, description="Why, and what to do instead.")


class SendSubagentInput(_Args):
    """Send a message to a subagent: steer a running one, or follow up on a completed one.

    A completed task continues the same conversation; then check_subagent again.
    """

    task_id: str = Field(description="The task.")
    text: str = Field(description="The message for the subagent.")


class CancelSubagent(_Args):
    """Stop a subagent now (its model call and commands are killed). Returns its state."""

    task_id: str = Field(description="The task to cancel.")


class ShowToolCall(_Args):
    """Show the full arguments of a pending tool call, in pages, before deciding it.

    Use it when a pending approval says its arguments were cut.
    """

    task_id: str = Field(description="The paused task.")
    call_id: str = Field(description="The pending call.")
    offset: int = Field(0, ge=0, description="Character to start from (the last 'next_offset').")


class ListSubagents(_Args):
    """List the subagents you spawned, newest first (id, agent, description, status, turns)."""

    status: StatusName | None = Field(None, description="Only tasks in this status.")


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    """A compact JSON Schema: no titles, optional fields as plain types (not nullable)."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    schema.pop("description", None)
    schema.setdefault("required", [])
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
        variants = [v for v in prop.pop("anyOf", []) if v.get("type") != "null"]
        if variants:
            prop.update(variants[0])
            if prop.get("default", 0) is None:
                del prop["default"]
    return schema


def _describe(model: type[BaseModel]) -> str:
    return " ".join((model.__doc__ or "").split())


class SubagentTools:
    """Function tools that let an LLM spawn, watch, steer and stop subagents.

    Example:
        >>> tools = SubagentTools(client, parent_id="orchestrator-1")
        >>> response = llm(messages, tools=tools.openai_schemas())
        >>> text = await tools.call(call.function.name, call.function.arguments)

    Args:
        client: The ``SubagentClient`` the tools act through.
        parent_id: Recorded on every spawned task; ``list_subagents`` shows only these.
        default_wait: Seconds a check or wait blocks when the model gives no timeout.
        approvals: Who approves a subagent's paused calls. ``"model"``: the
            orchestrating model (``approve_tool_calls``). ``"person"``: a person, through
            ``subagents approve``/``reject`` or your own ``SubagentClient.approve``; the
            model is not offered ``approve_tool_calls`` (it may still reject or cancel),
            and its checks and waits go on through a pause until a person decided. Use
            it when subagents read text you do not trust: what a hostile subagent writes
            reaches the orchestrating model, and so could talk it into an approval.
        reach: Which tasks the model may check, wait for, decide, steer or cancel by
            id. ``"any"``: every task of the namespace whose id it is given.
            ``"own"``: only those spawned with this ``parent_id`` (others answer as not
            found), so text a hostile subagent writes cannot point the model at
            another orchestrator's tasks.
    """

    def __init__(
        self,
        client: SubagentClient,
        parent_id: str | None = None,
        default_wait: float = 120.0,
        *,
        approvals: Literal["model", "person"] = "model",
        reach: Literal["any", "own"] = "any",
    ) -> None:
        if approvals not in ("model", "person"):
            raise InvalidRequest(f"approvals must be 'model' or 'person', got {approvals!r}")
        if reach not in ("any", "own"):
            raise InvalidRequest(f"reach must be 'any' or 'own', got {reach!r}")
        if reach == "own" and not parent_id:
            raise InvalidRequest(
                "reach='own' needs a parent_id: the tasks spawned with it are the model's own"
            )
        self.reach = reach
        self.client = client
        self.parent_id = parent_id
        self.default_wait = min(default_wait, MAX_WAIT)
        self.approvals = approvals
        self._next = _NEXT_PERSON if approvals == "person" else _NEXT
        self._tools: dict[str, tuple[type[_Args], Callable[[Any], Awaitable[Any]]]] = {
            "spawn_subagent": (SpawnSubagent, self._spawn),
            "check_subagent": (CheckSubagent, self._check),
            "wait_subagents": (WaitSubagents, self._wait),
            "approve_tool_calls": (ApproveToolCalls, self._approve),
            "reject_tool_calls": (RejectToolCalls, self._reject),
            "send_subagent_input": (SendSubagentInput, self._send),
            "cancel_subagent": (CancelSubagent, self._cancel),
            "show_tool_call": (ShowToolCall, self._show_call),
            "list_subagents": (ListSubagents, self._list),
        }
        if approvals == "person":
            del self._tools["approve_tool_calls"]
        self._shown: dict[str, set[tuple[str, str, str]]] = {}
        """Pending calls each task's views showed the model: approvals cover only these."""

    @property
    def names(self) -> list[str]:
        """The tool names, in a stable order."""
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """Provider-neutral ``{"name", "description", "parameters"}`` for every tool."""
        out = []
        for name, (model, _) in self._tools.items():
            description, parameters = _describe(model), _schema(model)
            if model is SpawnSubagent:
                agents = {
                    n: spec
                    for n, spec in {**BUILTIN_AGENTS, **self.client.agents}.items()
                    if not isinstance(spec, UnloadableAgent)  # a broken file: not offered
                }
                parameters["properties"]["agent"]["enum"] = list(agents)
                description += "\nAgents:" + "".join(
                    f"\n- {n}: {spec.description or '(no description)'}"
                    for n, spec in agents.items()
                )
            out.append({"name": name, "description": description, "parameters": parameters})
        return out

    def openai_schemas(self) -> list[dict[str, Any]]:
        """Tools in the OpenAI Chat Completions ``tools=`` shape."""
        return [{"type": "function", "function": s} for s in self.schemas()]

    def anthropic_schemas(self) -> list[dict[str, Any]]:
        """Tools in the Anthropic Messages ``tools=`` shape."""
        return [
            {"name": s["name"], "description": s["description"], "input_schema": s["parameters"]}
            for s in self.schemas()
        ]

    async def call(self, name: str, arguments: Mapping[str, Any] | str | None = None) -> str:
        """Run one tool call of the model and return the JSON text to give back to it.

        Args:
            name: The tool name the model called.
            arguments: Its arguments, as a mapping or the model's JSON string.

        Returns:
            A JSON object as text; ``{"error": ...}`` for caller mistakes (unknown tool,
            bad arguments, unknown agent or task, a decision with nothing paused).
        """
        if name not in self._tools:
            if name == "approve_tool_calls":
                return _dump({"error": _PERSON_APPROVES})
            return _dump({"error": f"unknown tool {name!r}, available: {', '.join(self._tools)}"})
        model, handler = self._tools[name]
        try:
            if isinstance(arguments, str):
                arguments = json.loads(arguments) if arguments.strip() else {}
            args = model.model_validate(arguments or {})
            await self._within_reach(args)
            return _dump(await handler(args))
        except json.JSONDecodeError as err:
            return _dump({"error": f"arguments of {name} are not valid JSON: {err}"})
        except ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in err.errors()
            )
            return _dump({"error": f"invalid arguments for {name}: {problems}"})
        except SubagentError as err:
            return _dump({"error": for_model(str(err))})

    # ------------------------------------------------------------------ handlers

    async def _spawn(self, a: SpawnSubagent) -> dict[str, Any]:
        task_id = await self.client.spawn_task(**a.model_dump(), parent_id=self.parent_id)
        return {"task_id": task_id, "next": "call check_subagent to wait for its result"}

    async def _check(self, a: CheckSubagent) -> dict[str, Any]:
        timeout = self._timeout(a.timeout)
        info = await (
            self._wait_one(a.task_id, timeout) if a.wait else self.client.check_task(a.task_id)
        )
        view = await self._view(info)
        if a.events_after is not None:
            after = None if a.events_after < 0 else a.events_after
            events = await self.client.events_since(a.task_id, after, limit=EVENTS_SHOWN)
            view["events"] = [_event_view(e) for e in events]
            view["events_next"] = events[-1].offset if events else a.events_after
        return view

    async def _wait_one(self, task_id: str, timeout: float) -> TaskInfo:
        """Wait until the task needs this model: finished, or paused for its decision.

        When a person approves, a pause is theirs: the wait goes on until it is decided
        (or the timeout).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        info = await self.client.check_task(task_id, True, timeout)
        while self.approvals == "person" and info.status == TaskStatus.PAUSED:
            left = deadline - loop.time()
            if left <= 0:
                break
            info = await self.client.check_task(task_id, True, left, after_pause=info.pause_id)
        return info

    async def _wait(self, a: WaitSubagents) -> dict[str, Any]:
        timeout = self._timeout(a.timeout)
        waits = [asyncio.ensure_future(self._wait_one(t, timeout)) for t in a.task_ids]
        try:
            when = asyncio.FIRST_COMPLETED if a.mode == "any" else asyncio.ALL_COMPLETED
            await asyncio.wait(waits, return_when=when)
            infos = [
                w.result() if w.done() else await self.client.check_task(t)
                for t, w in zip(a.task_ids, waits, strict=True)
            ]
        finally:
            for w in waits:
                w.cancel()
        return {"tasks": [await self._view(i) for i in infos]}

    async def _approve(self, a: ApproveToolCalls) -> dict[str, Any]:
        # Only what this model read: the pause it read may have ended since, and
        # another asks under the same call id, or a second child paused beside it.
        before = self._sent(a.task_id)
        shown = self._shown.get(a.task_id, set())
        # A tree's budget is raised by a person, never by the model it limits.
        budget = {k[0] for k in shown if k[1] == BUDGET_TOOL}
        shown = {k for k in shown if k[1] != BUDGET_TOOL}
        if budget & set(a.call_ids or ()) or (budget and a.call_ids is None and not shown):
            raise InvalidRequest(
                f"{', '.join(sorted(budget))}: a person raises a task tree's budget "
                "(subagents budget ID --usd N), not you; reject_tool_calls stops the tree"
            )
        info = await self.client.approve(a.task_id, a.call_ids, shown=shown)
        chosen = a.call_ids
        if chosen is None:
            chosen = [p.call_id for p in info.pending_approvals if _key(p) in shown]
        report = self._report(info, chosen, "approved", before)
        unseen = [p.call_id for p in info.pending_approvals if _key(p) not in shown]
        if unseen:
            report["not_shown_yet"] = unseen
            report["next"] = "call check_subagent to read the calls not shown yet, then decide"
        return report

    async def _reject(self, a: RejectToolCalls) -> dict[str, Any]:
        before = self._sent(a.task_id)
        info = await self.client.reject(a.task_id, a.call_ids, a.reason)
        return self._report(info, a.call_ids, "rejected", before)

    async def _send(self, a: SendSubagentInput) -> dict[str, Any]:
        info = await self.client.send_input(a.task_id, a.text)
        view = await self._view(info)
        view["next"] = "input sent: call check_subagent to wait for the answer"
        return view

    async def _cancel(self, a: CancelSubagent) -> dict[str, Any]:
        return await self._view(await self.client.cancel_task(a.task_id))

    async def _show_call(self, a: ShowToolCall) -> dict[str, Any]:
        info = await self.client.check_task(a.task_id)
        pending = {p.call_id: p for p in info.pending_approvals}
        if a.call_id not in pending:
            raise UnknownCallId(
                f"task {a.task_id!r} has no pending call {a.call_id!r}; pending: "
                + (", ".join(pending) or "none (check_subagent shows its state)")
            )
        arguments = (await self.client.pending_arguments(info)).get(a.call_id)
        self._shown.setdefault(info.id, set()).add(_key(pending[a.call_id]))
        if arguments is None:
            return {"error": _UNREADABLE, "preview": pending[a.call_id].arguments_preview}
        text = json.dumps(arguments, ensure_ascii=False, indent=1)
        page = text[a.offset : a.offset + ARGUMENTS_SHOWN]
        out: dict[str, Any] = {"tool": pending[a.call_id].tool_name, "arguments": page}
        if pending[a.call_id].resolved_path is not None:
            out["resolved_path"] = pending[a.call_id].resolved_path
        end = a.offset + len(page)
        out["shown"] = f"characters {a.offset}-{end} of {len(text)}"
        if end < len(text):
            out["next_offset"] = end
        return out

    async def _list(self, a: ListSubagents) -> dict[str, Any]:
        tasks = await self.client.list_tasks(parent_id=self.parent_id, status=a.status)
        rows = [t.model_dump(mode="json", include=_ROW) for t in tasks]
        return {"tasks": rows}

    # ------------------------------------------------------------------ helpers

    async def _within_reach(self, args: _Args) -> None:
        """With ``reach="own"``, refuse ids of tasks not spawned with this parent id.

        A task of someone else answers exactly as a task that does not exist.
        """
        if self.reach != "own":
            return
        one = getattr(args, "task_id", None)
        ids: list[str] = getattr(args, "task_ids", None) or ([one] if one else [])

        async def own(task_id: str) -> bool:
            try:
                return (await self.client.check_task(task_id)).parent_id == self.parent_id
            except TaskNotFound:
                return False

        for task_id, ok in zip(ids, await asyncio.gather(*map(own, ids)), strict=True):
            if not ok:
                raise TaskNotFound(
                    f"no task {task_id!r} among the subagents you spawned; list_subagents "
                    "lists them"
                )

    def _timeout(self, timeout: float | None) -> float:
        return min(self.default_wait if timeout is None else timeout, MAX_WAIT)

    def _sent(self, task_id: str) -> tuple[str | None, set[str]]:
        """The pause and calls decided so far (the client remembers what it sent)."""
        decided = self.client.decisions.peek(task_id)
        return (decided.pause_id, set(decided.calls)) if decided else (None, set())

    def _report(
        self,
        info: TaskInfo,
        call_ids: Sequence[str] | None,
        verb: str,
        before: tuple[str | None, set[str]],
    ) -> dict[str, Any]:
        pending = {p.call_id for p in info.pending_approvals}
        chosen = set(pending if call_ids is None else call_ids)
        earlier = before[1] if before[0] == info.pause_id else set()
        decided = self.client.decisions.get(info.id, info.pause_id)
        left = sorted(pending - (decided.calls.keys() if decided else set()))
        hint = f"still undecided: {', '.join(left)}" if left else _DECIDED
        report: dict[str, Any] = {"task_id": info.id, verb: sorted(chosen - earlier)}
        if chosen & earlier:
            report["already_decided"] = sorted(chosen & earlier)
            if not chosen - earlier:
                hint = "nothing was sent again: you decided these calls before; " + (
                    hint if left else "the subagent resumes shortly: call check_subagent"
                )
        report["next"] = hint
        return report

    async def _view(self, info: TaskInfo) -> dict[str, Any]:
        """A compact task view for the model, minus calls it already decided.

        Pending calls carry their full arguments (read from the transcript), cut at
        ``ARGUMENTS_SHOWN`` characters with a note naming ``show_tool_call``.
        """
        decided = self.client.decisions.get(info.id, info.pause_id)
        undecided = [
            p for p in info.pending_approvals if decided is None or p.call_id not in decided.calls
        ]
        full = await self.client.pending_arguments(info) if undecided else {}
        pending = [_pending_view(p, full.get(p.call_id)) for p in undecided]
        self._shown.setdefault(info.id, set()).update(_key(p) for p in undecided)
        view = info.model_dump(mode="json", include=_VIEW)
        if info.output is not None:
            del view["result"]  # the same answer, as JSON text
        view["pending_approvals"] = pending
        view = {k: v for k, v in view.items() if v not in (None, [])}
        paused_decided = info.status == TaskStatus.PAUSED and not pending
        view["next"] = _DECIDED if paused_decided else self._next[info.status]
        return view


_PERSON_APPROVES = (
    "approve_tool_calls is not offered here: a person approves subagents' calls (subagents "
    "approve TASK_ID). You may reject_tool_calls, cancel_subagent, or check_subagent to wait "
    "for their decision"
)
ARGUMENTS_SHOWN = 16_000
"""Characters of a pending call's arguments shown at once (``show_tool_call`` pages)."""
_UNREADABLE = (
    "the full arguments are not readable here (no access to the workers' blob store); "
    "only the preview is known: reject the call unless the preview is enough"
)


EVENTS_SHOWN = 50
"""Events ``check_subagent`` returns at once (``events_after`` pages on)."""
EVENT_TEXT_SHOWN = 2000
"""Characters of one event's text ``check_subagent`` shows (the transcript has all)."""


def _event_view(event: TaskEvent) -> dict[str, Any]:
    """An event as the model reads it: its offset, kind and what it says, in short."""
    view = event.model_dump(
        mode="json",
        include={"offset", "kind", "turn", "tool", "summary", "error", "text", "result", "status"},
        exclude_none=True,
    )
    text = view.get("text")
    if isinstance(text, str) and len(text) > EVENT_TEXT_SHOWN:
        view["text"] = "…" + text[-EVENT_TEXT_SHOWN:]
    return view


def _key(p: PendingApproval) -> tuple[str, str, str]:
    """What identifies a pending call as shown: its id, tool and argument hash."""
    return p.call_id, p.tool_name, p.arguments_hash


def _pending_view(p: PendingApproval, arguments: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"call_id": p.call_id, "tool": p.tool_name}
    if p.resolved_path is not None:
        out["resolved_path"] = p.resolved_path  # where the path leads: what an approval binds
    if arguments is None:
        out["preview"] = p.arguments_preview
        out["arguments_note"] = _UNREADABLE
        return out
    text = json.dumps(arguments, ensure_ascii=False)
    if len(text) <= ARGUMENTS_SHOWN:
        out["arguments"] = arguments
    else:
        out["arguments"] = text[:ARGUMENTS_SHOWN]
        out["arguments_note"] = (
            f"cut: {ARGUMENTS_SHOWN} of {len(text)} characters shown; call show_tool_call "
            "to read the rest before deciding"
        )
    return out


def _dump(value: Mapping[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
