"""``subagents budget``: raise the budget of a task tree that has spent it."""

from __future__ import annotations

import shlex
from typing import Annotated

import typer

from durable_subagents.cli._common import (
    Address,
    JsonOut,
    Namespace,
    Profile,
    TaskQueue,
    again,
    console,
    make_settings,
    run,
    usage_check,
)

__all__ = ["budget"]


def budget(
    task_id: str,
    usd: Annotated[float, typer.Option(help="The tree's new budget in USD, in all")],
    pause: Annotated[
        str | None,
        typer.Option("--pause", help="Raise only if the task is still on this pause"),
    ] = None,
    address: Address = None,
    namespace: Namespace = None,
    profile: Profile = None,
    task_queue: TaskQueue = None,
    as_json: JsonOut = False,
) -> None:
    """Raise the budget of a task tree that has spent it (spawned with --budget-usd).

    The tree goes on; `subagents reject ID --all` stops it instead.
    """
    from durable_subagents.spawn import check_budget_usd

    usage_check(lambda: check_budget_usd(usd), "--usd")
    settings = make_settings(address, namespace, task_queue, profile=profile)

    async def main() -> None:
        from durable_subagents.cli._render import info_json
        from durable_subagents.cli._tasks import _client

        client = await _client(settings)
        info = await client.raise_budget(task_id, usd, pause_id=pause)
        if as_json:
            print(info_json(info, decision={"approved": True, "budget_usd": usd}))
            return
        spent = f"{info.spent_usd:.4f}" if info.spent_usd is not None else "?"
        console.print(
            f"raised the budget of {info.id}'s tree to {usd:g} USD (spent {spent} USD)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        command = f"subagents check {shlex.quote(info.id)} --wait"
        console.print(f"  next: {again(command)}", markup=False, highlight=False, soft_wrap=True)

    run(main())
