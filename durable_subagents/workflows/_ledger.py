"""A tree's spend ledger in money (``budget_usd``), kept by the tree's top task.

Every task below the top reports its total spend to the top after each of its model
turns, before it starts another (the top's ``record_spend`` update, through a local
activity: its result is recorded, so a worker's death sends it again at most, and the
top keeps each task's largest total, so a turn is never lost nor counted twice). The
answer says whether the tree holds: once its spend reaches its budget, no task of the
tree starts another model turn. Turns already running finish, so the spend may pass
the budget by at most one turn per running task. The top task then pauses on a
``raise_budget`` call: a person raises the budget (the top tells every task of its
tree, ``tree_budget``, and the tree goes on) or rejects it (the tree stops,
stop_reason ``budget``).

Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from durable_subagents.types import ToolCall, Usage
    from durable_subagents.wire._ledger import (
        BUDGET_TOOL,
        MAX_BUDGET_USD,
        SPEND_ACTIVITY,
        TREE_BUDGET_SIGNAL,
        LedgerState,
        SpendReport,
        TreeBudget,
    )
    from durable_subagents.wire._payloads import CallDecision, TaskInput
    from durable_subagents.wording._money import usd

__all__ = ["SpendLedger", "TreeHold", "report_spend", "reports_spend", "unpriced"]


class SpendLedger:
    """The top task's ledger: its budget, each task's spend, and whether the tree holds.

    Attributes:
        state: What a continue-as-new carries (None: the tree has no budget).
    """

    def __init__(self) -> None:
        self.state: LedgerState | None = None
        self.holding = False
        """The tree was told to hold (its budget is spent, not yet raised)."""
        self._own = 0.0
        """The top task's own spend (its usage's cost)."""
        self._own_turns = 0
        """The top task's own model turns."""

    def open(self, inp: TaskInput, carried: LedgerState | None) -> None:
        """Keep the ledger of a top task whose spawn set ``budget_usd``."""
        if inp.tree_root is None and inp.budget_usd is not None:
            self.state = carried or LedgerState(budget_usd=inp.budget_usd)

    @property
    def budget(self) -> float | None:
        return self.state.budget_usd if self.state is not None else None

    def own(self, usage: Usage, turns: int) -> None:
        """The top task's own spend so far, over its ``turns``."""
        self._own = usage.cost_usd or 0.0
        self._own_turns = turns

    def check(self, report: SpendReport, tree: list[str]) -> None:
        """Refuse a report that is not one of this tree's (``record_spend``'s validator).

        Raises:
            ValueError: the tree has no budget, the task is none it counted, or the
                total is no finite sum of money.
        """
        if self.state is None:
            raise ValueError("this task keeps no budget in money for its tree")
        if not isinstance(report, SpendReport) or report.task_id not in tree:
            raise ValueError(f"{getattr(report, 'task_id', report)!r:.80} is no task of this tree")
        if not math.isfinite(report.cost_usd) or report.cost_usd < 0 or report.turns < 0:
            raise ValueError("a spend is a finite sum of money of 0 or more, over 0 or more turns")

    def take(self, report: SpendReport) -> None:
        """Take a task's total (checked first): a lower total than before changes nothing."""
        assert self.state is not None
        task_id = report.task_id
        self.state.spent[task_id] = max(report.cost_usd, self.state.spent.get(task_id, 0.0))
        self.state.turns[task_id] = max(report.turns, self.state.turns.get(task_id, 0))

    def word(self) -> TreeBudget:
        """What the tree is told: whether it holds, as of the newest announcement."""
        assert self.state is not None
        return TreeBudget(held=self.holding, epoch=self.state.epoch)

    def hold(self, held: bool) -> TreeBudget:
        """Hold the tree's model turns, or let them go on: the new word, to announce."""
        assert self.state is not None
        self.holding = held
        self.state.epoch += 1
        return self.word()

    @property
    def spent(self) -> float:
        """What the tree spent: the top task and every task that reported."""
        if self.state is None:
            return 0.0
        return self._own + sum(self.state.spent.values())

    @property
    def exhausted(self) -> bool:
        return self.state is not None and self.spent >= self.state.budget_usd

    def spawn_refusal(self) -> str | None:
        """Why the tree may start no more tasks now (None: it may).

        A new task needs at least one turn: priced as the tree's turns so far cost on
        average, it must fit in what is left.
        """
        state = self.state
        if state is None:
            return None
        left = state.budget_usd - self.spent
        turns = self._own_turns + sum(state.turns.values())
        reserve = self.spent / turns if turns else 0.0
        if left > 0 and left >= reserve:
            return None
        return (
            f"the task tree has spent {usd(self.spent)} of its {usd(state.budget_usd)} "
            f"budget, and a subagent needs about {usd(reserve)} for a turn: do the rest "
            "of the work yourself, or finish"
        )

    def by_task(self, own_id: str) -> dict[str, float]:
        """Each task's spend, the top task's first (what ``check_task`` shows)."""
        if self.state is None:
            return {}
        return {
            own_id: round(self._own, 9),
            **{k: round(v, 9) for k, v in self.state.spent.items()},
        }

    def ask(self, turn: int) -> ToolCall:
        """The ``raise_budget`` call the top task pauses on."""
        assert self.state is not None
        spent = self.spent
        return ToolCall(
            id=f"budget-{turn}-{self.state.epoch}",
            name=BUDGET_TOOL,
            arguments={
                "budget_usd": self.state.budget_usd,
                "spent_usd": round(spent, 6),
                "tasks": len(self.state.spent) + 1,
            },
        )

    def raised(self, decision: CallDecision | None, first: float) -> None:
        """Raise the budget as the approval says: to its ``budget_usd``, else by ``first``."""
        assert self.state is not None
        wanted = decision.budget_usd if decision is not None else None
        if not _valid(wanted):
            wanted = self.state.budget_usd + first
        assert wanted is not None
        self.state.budget_usd = min(wanted, MAX_BUDGET_USD)

    def warn_due(self, share: float | None) -> bool:
        """Whether the soft limit (``budget_warn_at``) was passed just now, once."""
        state = self.state
        if state is None or share is None or state.warned:
            return False
        if self.spent < share * state.budget_usd:
            return False
        state.warned = True
        return True

    @staticmethod
    async def announce(word: TreeBudget, tree: list[str]) -> None:
        """Tell every task of the tree whether it may start model turns."""

        async def tell(task_id: str) -> None:
            try:
                await workflow.get_external_workflow_handle(task_id).signal(
                    TREE_BUDGET_SIGNAL, word
                )
            except Exception:  # it has ended: nothing to hold
                workflow.logger.debug("tree budget not told to %s", task_id)

        await asyncio.gather(*(tell(t) for t in tree))


def _valid(value: float | None) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and 0 < value <= MAX_BUDGET_USD


class TreeHold:
    """A task below the top: whether its tree's top task holds its model turns."""

    def __init__(self) -> None:
        self.held = False
        self._epoch = 0

    def take(self, message: TreeBudget) -> None:
        """The top task's newest word wins (signals may arrive out of order)."""
        if isinstance(message, TreeBudget) and message.epoch > self._epoch:
            self._epoch, self.held = message.epoch, message.held

    async def wait(self, show: Callable[[str], None]) -> None:
        """Wait while the tree holds; ``show`` says so in the task's events once."""
        if self.held:
            show("the tree's budget is spent: waiting until it is raised")
            await workflow.wait_condition(lambda: not self.held)


def reports_spend(inp: TaskInput) -> bool:
    """Whether this task tells its tree's top task what it spends (a budget's tree)."""
    return inp.tree_root is not None and inp.budget_usd is not None


async def report_spend(inp: TaskInput, usage: Usage, turns: int) -> TreeBudget | None:
    """Tell the tree's top task what this task has spent so far; its word on the tree.

    None: nothing to tell (no price known; the worker said so when it priced the turn).
    """
    if inp.tree_root is None or usage.cost_usd is None:
        return None
    report = SpendReport(task_id=workflow.info().workflow_id, cost_usd=usage.cost_usd, turns=turns)
    word: TreeBudget = await workflow.execute_local_activity(
        SPEND_ACTIVITY,
        args=[inp.tree_root, report],
        result_type=TreeBudget,
        start_to_close_timeout=timedelta(seconds=30),
        retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
        summary="report spend to the tree's top task",
    )
    return word


def unpriced(inp: TaskInput, usage: Usage, model: str) -> str | None:
    """Why a task of a budgeted tree cannot go on: its model's turns have no price."""
    if inp.budget_usd is None or usage.cost_usd is not None:
        return None
    if not (usage.input_tokens or usage.output_tokens):
        return None
    return (
        f"model {model!r} has no price, and this task tree has a budget in USD "
        "(budget_usd): give the model a price in SUBAGENTS_PRICES (see "
        "docs/models.md#prices), or spawn without a budget"
    )
