"""What a running tree has used so far: its running subagents' memos added to the top's.

A task's memo counts its own usage and that of its subagents that finished (their
trees' whole usage, reported with their results). A running subagent reports nothing
until it ends, so ``check_task`` adds what each running task below says of itself:
its memo's ``tree_usage`` (or ``usage``), found level by level through the
``SubagentParent`` search attribute. Visibility lags a little behind the workflows,
so the figure of a running tree is as of each task's last published progress.
"""

from __future__ import annotations

from temporalio.client import Client

from durable_subagents.client._task_state import InternalInfo, quote
from durable_subagents.errors import PayloadEncryptionError
from durable_subagents.types import Usage
from durable_subagents.wire import _search_attributes as sa
from durable_subagents.wire._payloads import WORKFLOW

MAX_LEVELS = 10
"""Levels below a task read (a tree's depth is capped below this: ``MAX_DEPTH_LIMIT``)."""
PARENTS_PER_QUERY = 50
"""Parent ids one visibility query names."""


async def add_running_subagents(temporal: Client, info: InternalInfo) -> None:
    """Add the running subagents' usage to ``info.tree_usage`` and ``tree_cost_usd``.

    Only a task that runs and has spawned is looked at: a closed one's figure is whole.
    """
    if info.status.terminal or not info.children:
        return
    total = info.tree_usage or info.usage
    parents, seen = [info.id], {info.id}
    for _ in range(MAX_LEVELS):
        running: list[str] = []
        for i in range(0, len(parents), PARENTS_PER_QUERY):
            names = ", ".join(quote(p) for p in parents[i : i + PARENTS_PER_QUERY])
            query = (
                f"WorkflowType = '{WORKFLOW}' AND ExecutionStatus = 'Running' "
                f"AND {sa.PARENT.name} IN ({names})"
            )
            async for execution in temporal.list_workflows(query):
                if execution.id in seen:
                    continue
                seen.add(execution.id)
                try:
                    memo = await execution.memo()
                except PayloadEncryptionError:
                    continue  # a key this client lacks: its usage is not readable here
                own = memo.get("tree_usage") or memo.get("usage")
                if isinstance(own, dict):
                    total = total + Usage.model_validate(own)
                if memo.get("children"):
                    running.append(execution.id)
        if not running:
            break
        parents = running
    info.tree_usage = total
    info.tree_cost_usd = total.cost_usd
