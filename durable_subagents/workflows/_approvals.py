"""Which of a turn's tool calls run, wait for a decision, or go back as an error.

The verdicts are pure (permission rules, the caps on one turn's calls); a pause keeps
the calls that ask and the decisions the ``decide`` signal brought, and waits for them
under a named timer. Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow

from durable_subagents.workflows._subtasks import MAX_SPAWNS_PER_TURN, SPAWN_SUBAGENT

with workflow.unsafe.imports_passed_through():
    from durable_subagents import policy
    from durable_subagents.agents import AgentSpec
    from durable_subagents.policy import Verdict, call_hash, verdict
    from durable_subagents.types import PendingApproval, TaskStatus, ToolCall
    from durable_subagents.wire._payloads import MAX_CALLS_PER_TURN, CallDecision, Decisions

_REASON_LIMIT = 4096
"""Longest rejection reason passed to the model (longer ones are cut)."""
_REASONS_PER_TURN = 64 * 1024
"""Characters of rejection reasons the calls of one pause pass on in all."""
_REASON_LEAST = 200
"""Characters of its reason a rejected call passes on however many calls a pause has."""

_IGNORED_KEPT = 10
"""How many ignored decisions the memo keeps (the newest)."""

_PAUSE_TIMER = timedelta(days=1)
"""How long each timer of a pause without an approval timeout runs; another follows."""


def lands_elsewhere(call: ToolCall) -> str | None:
    """Where the call's path leads, when a symlink makes that differ from what it says.

    None for a path that did not resolve inside the workspace (its tool refuses it).
    """
    path = call.path
    if call.written_path is None or path is None or path.startswith("/"):
        return None
    return path


def said(call: ToolCall) -> str:
    """What an MCP tool's server says of it, for the person deciding (never trusted)."""
    if call.read_only_hint is None:
        return ""
    word = "read-only" if call.read_only_hint else "changes things"
    return f" [server says: {word}; not checked]"


async def wait_named(decided: Callable[[], bool], timeout: float | None, summary: str) -> None:
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


def pause_summary(pause_id: str | None, pending: list[PendingApproval]) -> str:
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


def turn_verdicts(
    calls: list[ToolCall],
    spec: AgentSpec,
    offered: list[str],
    *,
    read_only: set[str],
    protected: list[str] | None,
    answers: dict[str, Verdict],
) -> dict[str, Verdict]:
    """The verdict on each call of a turn: its own, an answer's, then the turn's limits.

    Args:
        calls: The turn's calls.
        spec: The task's agent.
        offered: The tools the worker offered the model.
        read_only: The offered tools the worker reported as read-only.
        protected: Every protected path the run's workers reported (see ``verdict``).
        answers: The verdicts on the turn's ``final_answer`` calls, which replace theirs.
    """
    verdicts = {
        c.id: verdict(c, spec, offered, read_only=read_only, protected=protected) for c in calls
    }
    verdicts.update(answers)
    _refuse_over_limits(calls, verdicts)
    return verdicts


def _refuse_over_limits(calls: list[ToolCall], verdicts: dict[str, Verdict]) -> None:
    """Refuse, in ``verdicts``, the calls of a turn past what one turn may make."""
    shared = _shared_ids(calls)
    if shared:
        # Calls that share an id would share one verdict and one decision: the
        # worker gives each call its own id, so only a broken worker sends these.
        for call_id in shared:
            verdicts[call_id] = ("deny", f"not run: call id {call_id!r} is not unique")
    if len(calls) > MAX_CALLS_PER_TURN:
        for c in calls[MAX_CALLS_PER_TURN:]:
            verdicts[c.id] = (
                "deny",
                f"not run: at most {MAX_CALLS_PER_TURN} tool calls run in one turn; "
                "make the rest in your next turn",
            )
    spawns = [c for c in calls if c.name == SPAWN_SUBAGENT]
    if len(spawns) > MAX_SPAWNS_PER_TURN:
        for c in spawns[MAX_SPAWNS_PER_TURN:]:
            verdicts[c.id] = (
                "deny",
                f"not run: at most {MAX_SPAWNS_PER_TURN} subagents may be spawned in "
                "one turn; wait for these, then spawn more if still needed",
            )


def spawns_run(calls: list[ToolCall]) -> int:
    """How many of a turn's ``spawn_subagent`` calls may start a child."""
    return min(sum(c.name == SPAWN_SUBAGENT for c in calls), MAX_SPAWNS_PER_TURN)


class Approvals:
    """The current pause: the calls waiting for a decision and the decisions taken.

    Attributes:
        pause_id: The pause the task waits in (None: it waits in none).
        pending: The calls still shown as waiting for a decision.
        decisions: The decisions taken in this pause, by call id.
        ignored: The newest decisions that were ignored, and why (for the memo).
    """

    def __init__(self) -> None:
        self.pause_id: str | None = None
        self.pending: list[PendingApproval] = []
        self.decisions: dict[str, CallDecision] = {}
        self.ignored: list[dict[str, Any]] = []

    def open(self, asks: list[ToolCall], turn: int) -> None:
        """Start a pause of turn ``turn`` for the parent's decisions on ``asks``."""
        self.pause_id = f"pause-{turn}-{str(workflow.uuid4())[:8]}"
        self.pending = [
            PendingApproval(
                call_id=c.id,
                tool_name=c.name,
                arguments_preview=policy.arguments_preview(
                    c.name, c.arguments, limit=200 - len(said(c)), resolved=lands_elsewhere(c)
                )
                + said(c),
                arguments_hash=call_hash(c),
                arguments_ref=c.arguments_ref,
                resolved_path=lands_elsewhere(c),
            )
            for c in asks
        ]
        self.decisions = {}

    def close(self) -> None:
        """End the pause (decided, timed out, or the task stops)."""
        self.pause_id, self.pending = None, []

    def take(self, decisions: Decisions) -> tuple[list[tuple[str, list[str] | None]], bool]:
        """Record the decisions on this pause's calls; stale or mismatched ones are not.

        Returns:
            Why each ignored one was (with its call ids; None: all of them), in order,
            and whether the calls still pending changed (some, not all, were decided).
        """
        if decisions.pause_id != self.pause_id:
            current = self.pause_id or "none"
            return [(f"pause {decisions.pause_id} is over (current pause: {current})", None)], False
        ignored: list[tuple[str, list[str] | None]] = []
        pending = {p.call_id: p for p in self.pending}
        for d in decisions.decisions:
            call = pending.get(d.call_id)
            if call is None or d.call_id in self.decisions:
                why = "already decided" if d.call_id in self.decisions else "not pending"
                ignored.append((f"call {d.call_id}: {why}", [d.call_id]))
            elif call.arguments_hash != d.arguments_hash:
                ignored.append((f"call {d.call_id}: its arguments differ", [d.call_id]))
            else:
                self.decisions[d.call_id] = d
        undecided = [p for p in self.pending if p.call_id not in self.decisions]
        if undecided and len(undecided) < len(self.pending):
            # the first decision on a call stands; what is left stays visible
            self.pending = undecided
            return ignored, True
        return ignored, False

    def ignore(self, decisions: Decisions, why: str, call_ids: list[str] | None) -> None:
        """Keep a stale decision among the newest ignored ones."""
        workflow.logger.warning("ignoring decision: %s", why)
        ids = call_ids if call_ids is not None else [d.call_id for d in decisions.decisions]
        entry: dict[str, Any] = {"pause_id": decisions.pause_id, "call_ids": ids, "reason": why}
        self.ignored = [*self.ignored, entry][-_IGNORED_KEPT:]

    async def pause(
        self,
        asks: list[ToolCall],
        *,
        turn: int,
        timeout: float | None,
        publish: Callable[[TaskStatus], None],
    ) -> dict[str, Verdict]:
        """Pause for the parent's decisions on ``asks``; undecided calls time out as rejected.

        Args:
            asks: The calls that wait for a decision.
            turn: The turn they were made in (it names the pause).
            timeout: Seconds after which undecided calls are rejected (None: never).
            publish: Publishes the task's state in a status (paused, then running).
        """
        self.open(asks, turn)
        publish(TaskStatus.PAUSED)

        def decided() -> bool:
            return all(c.id in self.decisions for c in asks)

        await wait_named(decided, timeout, pause_summary(self.pause_id, self.pending))
        verdicts = self.verdicts(asks, timeout)
        self.close()
        publish(TaskStatus.RUNNING)
        return verdicts

    def verdicts(self, asks: list[ToolCall], timeout: float | None) -> dict[str, Verdict]:
        """The verdicts of the pause's calls: undecided ones timed out as rejected."""
        verdicts: dict[str, Verdict] = {}
        # One reason given to many calls is repeated in each result: together they fit.
        limit = max(min(_REASON_LIMIT, _REASONS_PER_TURN // len(asks)), _REASON_LEAST)
        for call in asks:
            decision = self.decisions.get(call.id)
            if decision is None:
                verdicts[call.id] = ("deny", f"approval timed out after {timeout:g}s; not run")
            elif decision.approved:
                verdicts[call.id] = ("allow", None)
            else:
                text = decision.reason or ""
                text = text if len(text) <= limit else text[: limit - 1] + "…"
                reason = f": {text}" if text else ""
                verdicts[call.id] = ("deny", f"the parent rejected this call{reason}")
        return verdicts
