"""Deciding a pause: approvals and rejections, and what this client decided.

A decision names the pause and each call's argument hash, so one sent after the task
paused again (perhaps under the same call ids) decides nothing. A decider that says
which calls it read (``shown``) decides only those. The client remembers what it
decided, so that its waits skip a pause it answered.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durable_subagents.client._task_state import InternalInfo, describe_task
from durable_subagents.errors import InvalidRequest, SubagentError, UnknownCallId, WrongTaskState
from durable_subagents.spawn import refuse_unencodable
from durable_subagents.types import Message, TaskInfo, TaskStatus
from durable_subagents.wire._ledger import BUDGET_TOOL
from durable_subagents.wire._payloads import DECIDE_SIGNAL, CallDecision, Decisions

__all__ = [
    "MAX_REASON_BYTES",
    "DecisionMemory",
    "check_reason",
    "decisions_for",
    "full_arguments",
    "send_decisions",
    "shown_only",
]

MAX_REASON_BYTES = 4096
"""Longest rejection reason (it is the rejected call's result the model reads)."""


def decisions_for(
    info: InternalInfo,
    call_ids: Sequence[str] | None,
    *,
    approved: bool,
    reason: str | None,
    budget_usd: float | None = None,
) -> Decisions:
    """The ``decide`` signal for calls of the task's current pause.

    ``None`` expands to every pending call of this pause, each bound to its argument
    hash, so a late "approve all" can never approve a later pause.

    Raises:
        UnknownCallId: a call id is not pending in the current pause.
        InvalidRequest: ``call_ids`` is empty.
    """
    assert info.pause_id is not None
    pending = {p.call_id: p for p in info.pending_approvals}
    if isinstance(call_ids, str):
        call_ids = [call_ids]
    chosen = list(pending) if call_ids is None else list(dict.fromkeys(call_ids))
    if not chosen:
        raise InvalidRequest(
            "call_ids is empty; name the calls to decide, or pass None for every call of "
            f"pause {info.pause_id}"
        )
    unknown = [c for c in chosen if c not in pending]
    if unknown:
        raise UnknownCallId(
            f"call(s) {', '.join(unknown)} are not pending in pause {info.pause_id}; "
            f"pending: {', '.join(pending) or 'none'}"
        )
    decisions = Decisions(
        pause_id=info.pause_id,
        decisions=[
            CallDecision(
                call_id=c,
                arguments_hash=pending[c].arguments_hash,
                approved=approved,
                reason=reason,
                budget_usd=budget_usd,
            )
            for c in chosen
        ],
    )
    return decisions


@dataclass
class Decided:
    """The calls of one pause this client decided (call id -> approved)."""

    pause_id: str
    calls: dict[str, bool] = field(default_factory=dict)
    complete: bool = False
    """Every call of the pause is decided: the task resumes once it reads them."""


class DecisionMemory:
    """The decisions a client sent, per task, so that its waits skip a decided pause.

    Between a decision and the task taking it in (at once with a worker, whenever one
    comes back without), the task still reads as paused on that pause; a wait that
    returned it would hand the caller a pause it already answered.
    """

    LIMIT = 10_000
    """Tasks remembered at most (the oldest are forgotten first)."""

    def __init__(self) -> None:
        self._tasks: OrderedDict[str, Decided] = OrderedDict()

    def get(self, task_id: str, pause_id: str | None) -> Decided | None:
        """What was decided of ``pause_id`` (forgetting an older pause's decisions)."""
        decided = self._tasks.get(task_id)
        if decided is not None and decided.pause_id != pause_id:
            del self._tasks[task_id]
            return None
        return decided

    def peek(self, task_id: str) -> Decided | None:
        """What was decided on ``task_id``'s latest decided pause."""
        return self._tasks.get(task_id)

    def skip(self, task_id: str) -> str | None:
        """The pause of ``task_id`` this client decided completely, if any."""
        decided = self._tasks.get(task_id)
        return decided.pause_id if decided is not None and decided.complete else None

    def repeats(self, info: InternalInfo, decisions: Decisions) -> bool:
        """Whether every decision was sent before, with the same verdict."""
        decided = self.get(info.id, info.pause_id)
        return decided is not None and all(
            decided.calls.get(d.call_id) is d.approved for d in decisions.decisions
        )

    def record(self, info: InternalInfo, decisions: Decisions) -> None:
        """Remember decisions sent on ``info``'s pause."""
        assert info.pause_id is not None
        decided = self.get(info.id, info.pause_id) or Decided(info.pause_id)
        for d in decisions.decisions:
            decided.calls.setdefault(d.call_id, d.approved)
        decided.complete = {p.call_id for p in info.pending_approvals} <= decided.calls.keys()
        self._tasks[info.id] = decided
        self._tasks.move_to_end(info.id)
        while len(self._tasks) > self.LIMIT:
            self._tasks.popitem(last=False)


def check_reason(reason: object) -> None:
    """Refuse a rejection reason that is not short text.

    Raises:
        InvalidRequest: not text, not encodable, or over ``MAX_REASON_BYTES``.
    """
    if isinstance(reason, str):
        refuse_unencodable("reason", reason)
    if reason is not None and (
        not isinstance(reason, str) or len(reason.encode()) > MAX_REASON_BYTES
    ):
        raise InvalidRequest(
            f"reason must be text of at most {MAX_REASON_BYTES} bytes; the model reads "
            "it as the rejected call's result, so keep it short"
        )


async def send_decisions(
    temporal: Client,
    memory: DecisionMemory,
    task_id: str,
    call_ids: Sequence[str] | None,
    *,
    approved: bool,
    reason: str | None,
    shown: Collection[tuple[str, str, str]] | None = None,
    pause_id: str | None = None,
    budget_usd: float | None = None,
) -> TaskInfo:
    """Send decisions on calls of the current pause.

    With ``shown`` (``(call id, tool, argument hash)`` of the calls the decider has
    read), only those are decided: ``None`` means every one of them still pending,
    and a call named that is not among them is refused. A pause can end and another
    ask again under the same call id, or a second child pause beside the first,
    between the read and the decision.
    """
    check_reason(reason)
    info = await describe_task(temporal, task_id)
    if info.status != TaskStatus.PAUSED or not info.pause_id:
        raise WrongTaskState(
            f"task {task_id!r} is {info.status.value}, not paused; there is nothing to "
            "decide (check_task shows pending approvals while it is paused)",
            info.status.value,
        )
    if (
        pause_id is not None
        and info.pause_id != pause_id
        and never_a_pause(pause_id, info.pause_id)
    ):
        raise WrongTaskState(
            f"task {task_id!r} has no pause {pause_id!r} (pause ids read pause-<turn>-<8 "
            f"hex digits>, as check_task shows them), so nothing was decided; it is on pause "
            f"{info.pause_id}",
            info.status.value,
        )
    if pause_id is not None and info.pause_id != pause_id:
        raise WrongTaskState(
            f"task {task_id!r} is on pause {info.pause_id}, not {pause_id}: it paused "
            "again since you read it, so nothing was decided. Read the new pause "
            "(check_task) and decide that one",
            info.status.value,
        )
    if shown is not None:
        call_ids = shown_only(info, call_ids, shown)
    if budget_usd is not None:
        call_ids = raise_call(info)
    decisions = decisions_for(
        info, call_ids, approved=approved, reason=reason, budget_usd=budget_usd
    )
    if memory.repeats(info, decisions):
        return info.public()  # sent already: the task reads it when it resumes
    try:
        await temporal.get_workflow_handle(task_id).signal(DECIDE_SIGNAL, decisions)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        now = await describe_task(temporal, task_id)
        raise WrongTaskState(
            f"task {task_id!r} is {now.status.value}: it ended before the decision arrived",
            now.status.value,
        ) from None
    memory.record(info, decisions)
    return info.public()


def raise_call(info: InternalInfo) -> list[str]:
    """The task's ``raise_budget`` call, the one a new budget decides.

    Raises:
        WrongTaskState: the task does not wait for its tree's budget to be raised.
        InvalidRequest: the new budget does not pass what the tree has spent.
    """
    calls = [p.call_id for p in info.pending_approvals if p.tool_name == BUDGET_TOOL]
    if not calls:
        raise WrongTaskState(
            f"task {info.id!r} does not wait for its budget to be raised (only the top task "
            "of a tree spawned with budget_usd does, once the tree has spent it); "
            "check_task shows what it waits for",
            info.status.value,
        )
    return calls


_PAUSE_ID = re.compile(r"(?:(?P<task>[^:]+):)?pause-(?P<turn>[1-9][0-9]*)-[0-9a-f]{8}")
"""A pause id as tasks make them: ``pause-<turn>-<8 hex>``, a child's behind its id."""


def never_a_pause(given: str, current: str) -> bool:
    """Whether the pause id ``given`` was never one of the task's pauses.

    It is not the form pauses have, or it names a turn after the current pause's (turns
    count on across runs) of the same task; an earlier pause may have been real.
    """
    mine, now = _PAUSE_ID.fullmatch(given), _PAUSE_ID.fullmatch(current)
    if mine is None:
        return True
    if now is None or mine["task"] != now["task"]:
        return False
    return int(mine["turn"]) > int(now["turn"])


def shown_only(
    info: InternalInfo, call_ids: Sequence[str] | None, shown: Collection[tuple[str, str, str]]
) -> list[str]:
    """The calls to decide among ``call_ids`` (None: all pending) that were shown as pending.

    Raises:
        UnknownCallId: a call named was not shown, or none of the pending calls was.
    """
    pending = {p.call_id: p for p in info.pending_approvals}
    named = list(pending) if call_ids is None else list(call_ids)
    unseen = [
        c
        for c in named
        if c in pending and (c, pending[c].tool_name, pending[c].arguments_hash) not in shown
    ]
    chosen = [c for c in named if c not in unseen]
    if unseen and (call_ids is not None or not chosen):
        raise UnknownCallId(
            f"call(s) {', '.join(unseen)} of pause {info.pause_id} were not shown to you, "
            "or have changed since: call check_task to read them, then decide"
        )
    return chosen


async def full_arguments(
    info: TaskInfo,
    read_transcript: Callable[[str], Awaitable[list[Message]]],
    read_blob: Callable[[str, str], Awaitable[bytes]] | None = None,
) -> dict[str, dict[str, Any] | None]:
    """The full arguments of each pending call, by call id (``pending_arguments``).

    A child's call (``<child>/<pause>/<call>``) is read from the child's transcript;
    a decision no model asked for (a command's held changes, ``apply_changes``) from
    its arguments' blob, or its preview where that holds them whole (a tree's
    ``raise_budget``); one that cannot be read is None.
    """
    transcripts: dict[str, list[Message] | None] = {}

    async def find(task_id: str, call_id: str) -> dict[str, Any] | None:
        if "/" in call_id:  # a child's call: <child task id>/<child pause id>/<call id>
            child, _, rest = call_id.partition("/")
            return await find(child, rest.partition("/")[2])
        if task_id not in transcripts:
            try:
                transcripts[task_id] = await read_transcript(task_id)
            except (SubagentError, OSError, ValueError):
                transcripts[task_id] = None
        for message in reversed(transcripts[task_id] or []):
            for call in message.tool_calls if message.role == "assistant" else []:
                if call.id == call_id and not call.arguments_ref:
                    return call.arguments
        return None

    async def from_blob(task_id: str, call_id: str, ref: str) -> dict[str, Any] | None:
        if "/" in call_id:
            child, _, rest = call_id.partition("/")
            return await from_blob(child, rest.partition("/")[2], ref)
        if read_blob is None:
            return None
        try:
            arguments = json.loads(await read_blob(task_id, ref))
        except (SubagentError, OSError, ValueError):
            return None
        return arguments if isinstance(arguments, dict) else None

    out: dict[str, dict[str, Any] | None] = {}
    for p in info.pending_approvals:
        found = await find(info.id, p.call_id)
        if found is None and p.arguments_ref:
            found = await from_blob(info.id, p.call_id, p.arguments_ref)
        if found is None and p.tool_name == BUDGET_TOOL:
            found = _small_arguments(p.arguments_preview)
        out[p.call_id] = found
    return out


def _small_arguments(preview: str) -> dict[str, Any] | None:
    """The arguments of a call no model made, whole in its preview (``raise_budget · {...}``)."""
    _, _, text = preview.partition(" · ")
    try:
        arguments = json.loads(text)
    except ValueError:
        return None
    return arguments if isinstance(arguments, dict) else None
