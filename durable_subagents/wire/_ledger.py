"""The payloads of a tree's spend ledger, which its top task keeps (``budget_usd``).

Each task below the top reports what it has spent so far after each model turn (the
top task's ``record_spend`` update), and hears whether the tree holds; the top task
tells the tree when its budget was raised (``tree_budget``).
A pause of the top task asks a person to raise the budget (``raise_budget``).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = [
    "BUDGET_TOOL",
    "MAX_BUDGET_USD",
    "SPEND_ACTIVITY",
    "SPEND_UPDATE",
    "TREE_BUDGET_SIGNAL",
    "LedgerState",
    "SpendReport",
    "TreeBudget",
]

SPEND_UPDATE = "record_spend"
"""The top task's update that takes what a task of its tree has spent so far
(``SpendReport``) and answers whether the tree holds (``TreeBudget``)."""
SPEND_ACTIVITY = "report_tree_spend"
"""The local activity a task below the top sends its ``SpendReport`` by:
``[root_id, SpendReport]`` -> ``TreeBudget``."""
TREE_BUDGET_SIGNAL = "tree_budget"
"""The top task tells a task of its tree whether it may start model turns (``TreeBudget``)."""
BUDGET_TOOL = "raise_budget"
"""The name a pause shows for a tree whose budget is spent (the decision to raise it)."""
MAX_BUDGET_USD = 1_000_000.0
"""The largest budget a spawn may set, or a person raise one to."""


class SpendReport(BaseModel):
    """The ``record_spend`` update: everything one task has spent, all its runs.

    A total, not a turn's cost: the top task keeps each task's largest, so a report sent
    twice (a replay after a worker's death) or out of order counts once.
    """

    task_id: str
    cost_usd: float
    turns: int = 0


class TreeBudget(BaseModel):
    """Whether the tree's tasks may start model turns.

    The ``tree_budget`` signal, and the answer to ``record_spend``. ``epoch`` counts
    the top task's announcements: a task keeps the newest it heard.
    """

    held: bool
    epoch: int


class LedgerState(BaseModel):
    """What the top task's ledger carries over a continue-as-new."""

    budget_usd: float
    spent: dict[str, float] = Field(default_factory=dict)
    """Each reporting task's total (the top task's own is its usage's cost)."""
    turns: dict[str, int] = Field(default_factory=dict)
    epoch: int = 0
    warned: bool = False
