"""What a deep tree costs per model turn: a chain five levels deep against one level.

Each tree is a chain: every task but the last spawns one child (``spawn_subagent``),
waits for it (``wait_subagents``) and answers; the last answers at once. A tree of
depth 1 is two tasks and 4 turns; of depth 5, six tasks and 16 turns. ``--trees``
trees of each depth run at once on one in-process worker, the depths in alternating
rounds so both meet the same machine. Printed per model turn, over every task of
every tree: the worker process's CPU, and the history's events and bytes.

    .venv/bin/python bench/bench_depth.py [--trees 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from temporalio.client import Client

from durable_subagents import SubagentClient, TaskStatus, connect_client
from durable_subagents.agents import AgentSpec
from durable_subagents.config import Settings
from durable_subagents.testing import DevServer, free_port
from durable_subagents.worker import create_worker

WAIT = {"tool_calls": [{"name": "wait_subagents", "arguments": {}}]}


def chain_model(depth: int) -> str:
    """A scripted model whose task spawns a chain ``depth`` levels deep below it."""
    model = "scripted:" + json.dumps([{"text": "leaf"}])
    for level in range(depth - 1, -1, -1):
        spawn = {"agent": "lead", "prompt": f"level {level + 1}", "model": model}
        turns = [{"tool_calls": [{"name": "spawn_subagent", "arguments": spawn}]}, WAIT]
        model = "scripted:" + json.dumps([*turns, {"text": f"L{level}"}])
    return model


async def tree_of(client: SubagentClient, root: str) -> list[str]:
    ids = [root]
    while children := await client.list_tasks(parent_id=ids[-1]):
        ids.append(children[0].id)
    return ids


async def history(temporal: Client, task_id: str) -> tuple[int, int]:
    events = size = 0
    async for event in temporal.get_workflow_handle(task_id).fetch_history_events():
        events += 1
        size += event.ByteSize()
    return events, size


async def round_of(
    temporal: Client, client: SubagentClient, depth: int, trees: int
) -> tuple[float, float, float]:
    """CPU ms, history events and history bytes per model turn of ``trees`` trees."""
    model = chain_model(depth)
    started = time.process_time()
    roots = [
        await client.spawn_task("lead", "go", model=model, max_depth=depth) for _ in range(trees)
    ]
    infos = await asyncio.gather(*(client.check_task(r, wait=True, timeout=600) for r in roots))
    cpu = time.process_time() - started
    assert all(i.status == TaskStatus.COMPLETED for i in infos), infos
    turns = events = size = 0
    for root in roots:
        ids = await tree_of(client, root)
        assert len(ids) == depth + 1, ids
        for task_id in ids:
            turns += (await client.check_task(task_id)).turns
            e, s = await history(temporal, task_id)
            events, size = events + e, size + s
    return cpu * 1000 / turns, events / turns, size / turns


async def main(trees: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        async with DevServer(port=free_port(), ui_port=free_port(), db=root / "t.db") as dev:
            temporal = await connect_client(dev.address)
            settings = Settings(
                address=dev.address,
                task_queue=f"depth-{uuid.uuid4().hex[:6]}",
                allow_scripted=True,
                models="*",
                data_dir=root,
                workspace=root,
            )
            client = SubagentClient(temporal, task_queue=settings.task_queue)
            client.agents["lead"] = AgentSpec(name="lead", tools=["read_file"], may_spawn=True)
            results: dict[int, list[tuple[float, float, float]]] = {1: [], 5: []}
            async with create_worker(temporal, settings):
                await round_of(temporal, client, 1, 2)  # warm up
                for _ in range(rounds):
                    for depth in results:
                        results[depth].append(await round_of(temporal, client, depth, trees))
    print(f"{trees} trees a round, {rounds} rounds, medians per model turn")
    print("| depth | tasks a tree | turns a tree | worker CPU | history events | history KB |")
    print("|---|---|---|---|---|---|")
    base = [statistics.median(r[i] for r in results[1]) for i in range(3)]
    for depth, runs in results.items():
        cpu, events, size = (statistics.median(r[i] for r in runs) for i in range(3))
        kb = size / 1024
        print(
            f"| {depth} | {depth + 1} | {3 * depth + 1} | {cpu:.1f} ms ({cpu / base[0]:.2f}x) "
            f"| {events:.1f} ({events / base[1]:.2f}x) | {kb:.2f} ({size / base[2]:.2f}x) |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--trees", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.trees, args.rounds))
