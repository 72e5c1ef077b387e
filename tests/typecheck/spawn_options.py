"""What mypy says of spawn options: checked by ``mypy`` (see pyproject.toml), never run.

``spawn_task`` and ``start_subagent`` take ``**options: Unpack[SpawnKwargs]``, so a
misspelt option or one of the wrong type is a type error where the call is written.
Each ``type: ignore`` below must be needed (``warn_unused_ignores``): the day the
declaration stops reaching a door, these lines fail the type check.
"""

from typing import assert_type

from durable_subagents import SubagentClient
from durable_subagents.spawn import SpawnKwargs
from durable_subagents.workflows import start_subagent


async def spawn(client: SubagentClient) -> None:
    task_id = await client.spawn_task(
        "explore",
        "Where is the retry logic?",
        "find retries",
        None,
        model="openai:gpt-4.1-mini",
        max_turns=5,
        tools=["read_file", "grep"],
        permission_mode="plan",
        permissions=[{"tool": "bash", "pattern": "rm *", "action": "deny"}],
        output_schema={"type": "object"},
        task_id="retries-1",
    )
    assert_type(task_id, str)
    options: SpawnKwargs = {"max_turns": 5, "time_limit": 60.0}
    await client.spawn_task("explore", "x", **options)

    await client.spawn_task("explore", "x", max_turn=5)  # type: ignore[call-arg]
    await client.spawn_task("explore", "x", max_turns="5")  # type: ignore[arg-type]
    await client.spawn_task("explore", "x", network="no")  # type: ignore[arg-type]
    await client.spawn_task("explore", "x", "label", None, None)  # type: ignore[call-arg]
    late: SpawnKwargs = {"time_limit": "soon"}  # type: ignore[typeddict-item]
    await client.spawn_task("explore", "x", **late)


async def start_in_a_workflow() -> None:
    handle = await start_subagent("explore", "x", time_limit=60, network=False, task_queue="q")
    assert_type(handle.id, str)
    await start_subagent("explore", "x", time_limit="soon")  # type: ignore[arg-type]
    await start_subagent("explore", "x", tols=["grep"])  # type: ignore[call-arg]
