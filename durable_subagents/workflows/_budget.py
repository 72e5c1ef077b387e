"""A task's limits in time and tokens, and what it has left of them for a child.

Tokens count this task's usage and its finished children's; a running child's budget
is reserved until it finishes. Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow

from durable_subagents.workflows._subtasks import ChildTasks, ParentLeft

with workflow.unsafe.imports_passed_through():
    from durable_subagents.types import Usage
    from durable_subagents.wire._payloads import TaskInput


def tokens_used(usage: Usage, children: ChildTasks) -> int:
    """Tokens this task and its finished children used."""
    own = usage.input_tokens + usage.output_tokens
    return own + children.tokens()[0]


def over_budget(inp: TaskInput | None, usage: Usage, children: ChildTasks) -> bool:
    """Whether the task used its whole token budget (if it has one)."""
    budget = inp.token_budget if inp else None
    return budget is not None and tokens_used(usage, children) >= budget


def free_tokens(inp: TaskInput | None, usage: Usage, children: ChildTasks) -> int | None:
    """Budget neither used (by this task and finished children) nor reserved."""
    budget = inp.token_budget if inp else None
    if budget is None:
        return None
    return max(budget - tokens_used(usage, children) - children.tokens()[1], 0)


def child_share(free: int | None, spawns: int) -> int | None:
    """Each child's token budget when a turn spawns ``spawns`` children.

    The parent keeps one share for itself: n children get n/(n+1) of what is free.
    """
    return None if free is None or not spawns else free // (spawns + 1)


def parent_left(
    inp: TaskInput,
    *,
    turns: int,
    time_limit_from: datetime | None,
    free: int | None,
    share: int | None,
) -> ParentLeft:
    """What this task has left for a child: turns, seconds and tokens."""
    seconds = None
    if inp.time_limit and time_limit_from is not None:
        elapsed = (workflow.now() - time_limit_from).total_seconds()
        seconds = max(inp.time_limit - elapsed, 0.0)
    tokens = None if free is None or share is None else min(free, share)
    return ParentLeft(turns=max(inp.max_turns - turns, 1), seconds=seconds, tokens=tokens)


def time_left(time_limit: float, since: datetime) -> timedelta:
    """What is left of ``time_limit`` seconds counted from ``since`` (at least 1 ms)."""
    left = time_limit - (workflow.now() - since).total_seconds()
    return timedelta(seconds=max(left, 0.001))


def time_limit_from(inp: TaskInput) -> datetime:
    """When this chain of runs' time limit started: its first run's start.

    Counted by the server's clock; a follow-up run gets a fresh limit.
    """
    state = inp.state
    from_state = state.time_limit_from if state is not None else None
    return from_state or workflow.info().start_time
