"""The scripted model as an attacker: one task that runs its calls."""

from __future__ import annotations

from typing import Any

from durable_subagents import SubagentClient, TaskStatus

from . import CEILING
from .tasks import script


def bash(*commands: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": c}} for c in commands]}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


async def tool_outputs(client: SubagentClient, task_id: str) -> list[str]:
    return [m.content for m in await client.get_transcript(task_id) if m.role == "tool"]


async def run_attack(
    client: SubagentClient, *turns: dict[str, Any], agent: str = "general", **options: Any
) -> tuple[str, list[str]]:
    """Spawn the attacker, wait for it to finish, return its id and its tool outputs."""
    task_id = await client.spawn_task(
        agent, "summarise the README", model=script(*turns, {"text": "done"}), **options
    )
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info
    return task_id, await tool_outputs(client, task_id)
