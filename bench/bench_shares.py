"""A bystander's task beside a task tree of 40 busy commands: each tree's share of the CPU.

Run: ``.venv/bin/python bench/bench_shares.py [--repeats 5] [--modes cgroups,fallback]``

A dev server and one worker (this process) with the default 100 tool slots. The tree
is a lead task whose first turn runs 8 ``bash`` busy loops and spawns 16 children, each
of which runs 2 more: 8 + 16 x 2 = 40 calls, the most one tree runs at once. The
bystander is a three-step task (three turns of ``bash -c 'echo step'``, then an answer),
timed from spawn to ``check_task(wait=True)`` returning completed: quiet, and once all
40 loops run (or ``--wait`` seconds have passed: the column ``loops`` says how many
ran) and ``--settle`` seconds more have passed (the worker has then started
every child and call: what is measured is the tree's steady state, not its start),
``--repeats`` times each, interleaved (quiet, loud, quiet, ...).

Modes: ``cgroups`` (the worker's cgroups: one CPU weight per tree, a root worker here),
``fallback`` (the worker as if it could make none: idle priority once a tree's commands
have had their CPU second), ``as-is`` (whatever the worker does by itself, for runs
against another version of the library). The target: the bystander within 3x of its
quiet time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path

from durable_subagents import AgentSpec, SubagentClient, TaskStatus, connect_client
from durable_subagents.config import Settings
from durable_subagents.testing import DevServer, free_port, workspace_for_tools
from durable_subagents.worker import create_worker

# Its workers run the scripted model and any model of the local fake servers: a worker
# runs only the models its settings allow.
os.environ.setdefault("SUBAGENTS_ALLOW_SCRIPTED", "true")
os.environ.setdefault("SUBAGENTS_MODELS", "*")

LOOPS_AT_ONCE = 8
CHILDREN = 16
CHILD_LOOPS = 2


def loop(tag: str) -> dict[str, object]:
    command = f"while :; do :; done # {tag}"
    return {"name": "bash", "arguments": {"command": command, "timeout": 600}}


def tree_model(tag: str) -> str:
    """The lead: 8 children (a turn spawns at most 8), then 8 more and its own 8 loops."""
    child = "scripted:" + json.dumps([{"tool_calls": [loop(tag)] * CHILD_LOOPS}, {"text": "x"}])
    arguments = {"agent": "general", "prompt": "spin", "model": child}
    spawns = [{"name": "spawn_subagent", "arguments": arguments}] * (CHILDREN // 2)
    turns = [{"tool_calls": spawns}, {"tool_calls": spawns + [loop(tag)] * LOOPS_AT_ONCE}]
    return "scripted:" + json.dumps([*turns, {"text": "x"}])


BYSTANDER = "scripted:" + json.dumps(
    {"turns": [{"tool_calls": [{"name": "bash", "arguments": {"command": "echo step"}}]}],
     "repeat": 3, "final": "ok"}
)  # fmt: skip


def running_loops(tag: str) -> int:
    """The tree's loops running now: their shells, seen from the host."""
    wanted = f"bash\0-c\0while :; do :; done # {tag}\0".encode()
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                count += (entry / "cmdline").read_bytes() == wanted
            except OSError:
                continue
    return count


@contextmanager
def mode(name: str) -> Iterator[str]:
    """The worker's calls held as ``name`` says; yields what holds them."""
    if name == "as-is":
        yield "as the worker finds it"
        return
    from durable_subagents.tools import _cgroup_host, _cgroups, _limits

    found = _cgroup_host.available(), _cgroup_host.missing()
    if name == "fallback":
        off = dict.fromkeys(_cgroups.CONTROLLERS, "turned off by the bench")
        _cgroup_host._found = ([], off)
    elif "cpu" not in {c for h in found[0] for c in h.controllers}:
        raise SystemExit("no cpu cgroup for tool calls here: run as root, or --modes fallback")
    try:
        yield _limits.limit_mechanisms()["cpu"]
    finally:
        _cgroup_host._found = (found[0], found[1])


async def bystander(client: SubagentClient) -> float:
    started = time.perf_counter()
    task_id = await client.spawn_task("general", "bench", model=BYSTANDER)
    info = await client.check_task(task_id, wait=True, timeout=600)
    assert info.status == TaskStatus.COMPLETED, info
    return time.perf_counter() - started


async def measure(
    client: SubagentClient, repeats: int, settle: float, wait: float
) -> tuple[list[float], list[float], list[int]]:
    """The bystander's seconds quiet and beside the tree, and the loops that then ran."""
    quiet: list[float] = []
    loud: list[float] = []
    loops: list[int] = []
    await bystander(client)  # warm up
    for _ in range(repeats):
        quiet.append(await bystander(client))
        tag = uuid.uuid4().hex[:12]
        tree = await client.spawn_task("spinner", "spin", model=tree_model(tag))
        # A worker that weighs each loop as a bystander's command may never start all
        # 40 (the tree's own turns wait behind its loops): measure beside what runs.
        deadline = time.monotonic() + wait
        while running_loops(tag) < LOOPS_AT_ONCE + CHILDREN * CHILD_LOOPS:
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(settle)  # the worker done starting the tree: its steady state
        loops.append(running_loops(tag))
        loud.append(await bystander(client))
        await client.cancel_task(tree, wait=True, timeout=600)
    return quiet, loud, loops


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5, help="bystander runs per side")
    parser.add_argument("--modes", default="cgroups,fallback", help="cgroups, fallback, as-is")
    parser.add_argument(
        "--settle", type=float, default=3.0, help="seconds between the 40th loop and the bystander"
    )
    parser.add_argument(
        "--wait", type=float, default=120.0, help="seconds to wait for the 40 loops at most"
    )
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-shares-") as tmp_name:
        tmp = Path(tmp_name)
        workspace = tmp / "ws"
        workspace.mkdir()
        workspace_for_tools(workspace)
        server = DevServer(port=free_port(), ui=False, db=tmp / "shares.db")
        await server.start()
        try:
            settings = Settings(
                address=server.address,
                namespace=server.namespace,
                task_queue=f"bench-shares-{uuid.uuid4().hex[:8]}",
                data_dir=tmp / "data",
                blob_dir=tmp / "blobs",
                workspace=workspace,
            )
            temporal = await connect_client(server.address, server.namespace)
            client = SubagentClient(
                temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
            )
            client.agents["spinner"] = AgentSpec(
                name="spinner", tools=["bash"], permission_mode="dont_ask", may_spawn=True
            )
            for name in args.modes.split(","):
                with mode(name) as held_by:
                    async with create_worker(temporal, settings):
                        measured = await measure(client, args.repeats, args.settle, args.wait)
                rows.append((name, held_by, *measured))
        finally:
            await server.stop()
    print(f"# a bystander beside a 40-call busy tree ({date.today()}, ", end="")
    print(f"{platform.machine()}, {platform.system()} {platform.release()})")
    print()
    print("| mode | CPU held by | quiet s (median, range) | beside the loops s | loops | ratio |")
    print("|---|---|---|---|---|---|")
    for name, held_by, quiet, loud, loops in rows:
        q, loud_s = statistics.median(quiet), statistics.median(loud)
        print(
            f"| {name} | {held_by} | {q:.2f} ({min(quiet):.2f}-{max(quiet):.2f}) | "
            f"{loud_s:.2f} ({min(loud):.2f}-{max(loud):.2f}) | {min(loops)}-{max(loops)} | "
            f"{loud_s / q:.2f}x |"
        )
    print()
    print("Target: the bystander within 3x of its quiet time.")


if __name__ == "__main__":
    asyncio.run(main())
