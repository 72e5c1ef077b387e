"""What running the file tools in a process per call costs, beside running them in-process.

Run: ``.venv/bin/python bench/bench_file_tools.py [--calls 200] [--turns 20] [--repeats 5]``

Two measures, each interleaved (forked, in-process, forked, ...) so the ratio holds on
a noisy machine:

- **per call**: ``tool.run`` of ``read_file``, ``grep``, ``list_files`` and
  ``write_file`` on a copy of this package's source (with this repository's
  ``.gitignore``), in a child of the fork server against a thread of this process
  (the same tools with ``forked`` switched off): wall time, and CPU time of every
  process involved (on a loaded machine the wall time is mostly waiting for a CPU);
- **per turn**: a task of N turns with one ``read_file`` each (run within its model
  turn, as in ``bench_core.py``), on a dev server and a worker this script starts, spawn to
  ``check_task(wait=True)`` returning completed, divided by N;
- **storm** (``--storm N``): a bystander's three-step task (three ``read_file`` turns),
  quiet and while another task of the same worker runs eight ``grep`` calls at once
  through 300 directories of ~31 KiB wildcard ``.gitignore`` files, N times each,
  interleaved. The target: the bystander within 2x of its quiet time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from temporalio.client import Client

from durable_subagents import SubagentClient, TaskStatus, connect_client
from durable_subagents.config import Settings
from durable_subagents.testing import DevServer, free_port, workspace_for_tools
from durable_subagents.tools import (
    Tool,
    ToolContext,
    grep,
    list_files,
    read_file,
    write_file,
)
from durable_subagents.tools._processes import fork_server, running_calls
from durable_subagents.tools._sandbox_host import tool_user
from durable_subagents.worker import create_worker

# Its workers run the scripted model and any model of the local fake servers: a worker
# runs only the models its settings allow.
os.environ.setdefault("SUBAGENTS_ALLOW_SCRIPTED", "true")
os.environ.setdefault("SUBAGENTS_MODELS", "*")

REPO = Path(__file__).resolve().parents[1]
FILE_TOOLS = (read_file, grep, list_files, write_file)
CALLS: dict[str, tuple[Tool, dict[str, Any], bool]] = {
    "read_file, 2-byte file": (read_file, {"path": "f.txt"}, False),
    "read_file, 2-byte file, a task's first call": (read_file, {"path": "f.txt"}, True),
    "read_file, 420-line module": (
        read_file,
        {"path": "src/tools/_search.py"},
        False,
    ),
    "grep 'def ', the package (~80 files)": (grep, {"pattern": "def ", "path": "src"}, False),
    "list_files '**/*.py', the package": (list_files, {"pattern": "**/*.py"}, False),
    "write_file, 1 KB": (write_file, {"path": "out/w.txt", "content": "x" * 1024}, False),
}
"""Label: the tool, its arguments, and whether each call is a new task's (a fresh
process; otherwise one task's calls reuse its process, as a task's turns do)."""


def forking(on: bool) -> None:
    """Run the built-in file tools in a child (on) or in a thread of this process (off)."""
    for t in FILE_TOOLS:
        t.forked = on


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await call()
    return (time.perf_counter() - start) * 1000


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def server_cpu() -> float:
    """CPU seconds of the fork server and of its children, living and reaped."""
    pid = fork_server().pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    ticks = 0
    for n, each in enumerate([str(pid), *children]):
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # reaped meanwhile: counted in the server's children's time
        ticks += sum(int(f) for f in fields[11 : 15 if n == 0 else 13])
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass
class Row:
    label: str
    wall: dict[bool, list[float]]
    """Milliseconds per call, forked (True) and in-process (False)."""
    cpu: dict[bool, float]
    """CPU milliseconds per call: this process's, plus the server's and its children's."""


async def per_call(workspace: Path, calls: int) -> list[Row]:
    rows = []
    for label, (tool, arguments, fresh) in CALLS.items():
        # A root worker's file tools run as its tool user (in a thread they cannot).
        run_as = tool_user(workspace)
        ctx = ToolContext(workspace=workspace, task_id="bench", run_as=run_as)
        wall: dict[bool, list[float]] = {True: [], False: []}
        cpu = {True: 0.0, False: 0.0}
        for on in (True, False):  # warm up (the cache of compiled ignore rules, too)
            forking(on)
            await tool.run(ctx, arguments)
        await asyncio.sleep(0.2)  # the next spare is forked
        server_before = server_cpu()
        for n in range(calls):
            for on in (True, False):
                forking(on)
                if fresh:
                    ctx = ToolContext(workspace=workspace, task_id=f"bench-{n}", run_as=run_as)
                    await asyncio.sleep(0.02)  # a model turn: the next spare is forked
                start, used = time.perf_counter(), time.process_time()
                await tool.run(ctx, arguments)
                wall[on].append((time.perf_counter() - start) * 1000)
                cpu[on] += time.process_time() - used
        await asyncio.sleep(0.2)  # the last child is reaped
        cpu[True] += server_cpu() - server_before
        rows.append(Row(label, wall, {on: cpu[on] * 1000 / calls for on in cpu}))
    forking(True)
    return rows


@contextlib.asynccontextmanager
async def served(
    tmp: Path, workspace: Path, name: str
) -> AsyncIterator[tuple[Client, Settings, SubagentClient]]:
    """A dev server of its own, and a client and settings for a queue named ``name``."""
    server = DevServer(port=free_port(), ui_port=free_port(), db=tmp / f"{name}.db", ui=False)
    await server.start()
    try:
        settings = Settings(
            address=server.address,
            namespace=server.namespace,
            task_queue=f"bench-{name}-{uuid.uuid4().hex[:8]}",
            data_dir=tmp / f"{name}-data",
            blob_dir=tmp / f"{name}-blobs",
            workspace=workspace,
        )
        temporal = await connect_client(server.address, server.namespace)
        client = SubagentClient(
            temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
        )
        yield temporal, settings, client
    finally:
        await server.stop()


async def per_turn(
    tmp: Path, workspace: Path, turns: int, repeats: int
) -> tuple[list[float], list[float]]:
    async with served(tmp, workspace, "files") as (temporal, settings, client):
        model = "scripted:" + json.dumps(
            {
                "turns": [{"tool_calls": [{"name": "read_file", "arguments": {"path": "f.txt"}}]}],
                "repeat": turns,
                "final": "done",
            }
        )

        async def run() -> None:
            task_id = await client.spawn_task("explore", "bench", model=model)
            info = await client.check_task(task_id, wait=True, timeout=300)
            assert info.status == TaskStatus.COMPLETED, info

        times: dict[bool, list[float]] = {True: [], False: []}
        async with create_worker(temporal, settings):
            for on in (True, False):
                forking(on)
                await run()
            for _ in range(repeats):
                for on in (True, False):
                    forking(on)
                    times[on].append(await timed(run) / turns)
        forking(True)
        return times[True], times[False]


STORM_DIRS = 300


def storm_tree(workspace: Path) -> None:
    """The attacker's tree: ignore files of distinct wildcard patterns (the costliest)."""
    for d in range(STORM_DIRS):
        os.makedirs(workspace / f"storm/d{d}", exist_ok=True)
        lines = "".join(f"{16 * '?'}{d}x{i}\n" for i in range(1300))
        (workspace / f"storm/d{d}/.gitignore").write_text(lines)


async def storm(tmp: Path, workspace: Path, repeats: int) -> tuple[list[float], list[float]]:
    """Seconds of the bystander's task, quiet and in the storm."""
    async with served(tmp, workspace, "storm") as (temporal, settings, client):
        reads = {"tool_calls": [{"name": "read_file", "arguments": {"path": "f.txt"}}]}
        bystander = "scripted:" + json.dumps({"turns": [reads], "repeat": 3, "final": "ok"})
        greps = [{"name": "grep", "arguments": {"pattern": f"n{i}"}} for i in range(8)]
        attacker = "scripted:" + json.dumps({"turns": [{"tool_calls": greps}], "final": "done"})

        async def run() -> float:
            started = time.perf_counter()
            task_id = await client.spawn_task("explore", "bench", model=bystander)
            info = await client.check_task(task_id, wait=True, timeout=300)
            assert info.status == TaskStatus.COMPLETED, info
            return time.perf_counter() - started

        quiet: list[float] = []
        loud: list[float] = []
        async with create_worker(temporal, settings):
            await run()
            for _ in range(repeats):
                quiet.append(await run())
                task_id = await client.spawn_task("explore", "bench", model=attacker)
                for _ in range(3000):  # until its searches run (a minute at most)
                    if running_calls(task_id):
                        break
                    await asyncio.sleep(0.02)
                loud.append(await run())
                info = await client.check_task(task_id, wait=True, timeout=300)
                assert info.status == TaskStatus.COMPLETED, info
        return quiet, loud


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200, help="calls per tool and side")
    parser.add_argument("--turns", type=int, default=20, help="turns of the per-turn task")
    parser.add_argument("--repeats", type=int, default=5, help="runs of it per side")
    parser.add_argument("--storm", type=int, default=5, help="bystander runs per side")
    parser.add_argument("--only-storm", action="store_true", help="measure the storm alone")
    args = parser.parse_args()
    started = time.perf_counter()
    await asyncio.to_thread(fork_server)
    print(f"fork server started in {(time.perf_counter() - started) * 1000:.0f} ms")
    with tempfile.TemporaryDirectory(prefix="bench-files-") as tmp_name:
        tmp = Path(tmp_name)
        workspace = tmp / "ws"
        shutil.copytree(REPO / "durable_subagents", workspace / "src")
        shutil.copy(REPO / ".gitignore", workspace / ".gitignore")
        (workspace / "f.txt").write_text("x\n")
        (workspace / "out").mkdir()
        workspace_for_tools(workspace)  # a root worker's tool user may write it
        if not args.only_storm:
            calls = await per_call(workspace, args.calls)
            forked, threaded = await per_turn(tmp, workspace, args.turns, args.repeats)
        storm_tree(workspace)
        workspace_for_tools(workspace)
        quiet, loud = await storm(tmp, workspace, args.storm)
    if args.only_storm:
        storm_table(quiet, loud)
        return

    print(f"# file tools in a process per call vs in-process ({date.today()}, ", end="")
    print(f"{platform.machine()}, {platform.system()} {platform.release()})")
    print()
    print(
        "| call | in-process p50 ms | forked p50 ms | added p50 ms | forked p95 ms "
        "| in-process CPU ms | forked CPU ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in calls:
        on, off = row.wall[True], row.wall[False]
        added = statistics.median(on) - statistics.median(off)
        print(
            f"| {row.label} | {statistics.median(off):.2f} | {statistics.median(on):.2f} | "
            f"{added:+.2f} | {p(on, 0.95):.2f} | {row.cpu[False]:.2f} | {row.cpu[True]:.2f} |"
        )
    print()
    print("CPU: this process's time (both sides), plus the fork server's and its children's")
    print("(forked side: the spares forked ahead, the calls, the exits).")
    print()
    print(f"| {args.turns}-turn task, one read_file a turn | in-process | forked | ratio |")
    print("|---|---|---|---|")
    on_ms, off_ms = statistics.median(forked), statistics.median(threaded)
    print(f"| ms per turn (median of {args.repeats}) | {off_ms:.1f} | {on_ms:.1f} | ", end="")
    print(f"{on_ms / off_ms:.2f}x |")
    storm_table(quiet, loud)


def storm_table(quiet: list[float], loud: list[float]) -> None:
    print()
    print("| bystander's 3-step task | quiet | in the storm | ratio (target < 2x) |")
    print("|---|---|---|---|")
    q, s = statistics.median(quiet), statistics.median(loud)
    print(f"| seconds (median of {len(quiet)}) | {q:.2f} | {s:.2f} | {s / q:.2f}x |")


if __name__ == "__main__":
    asyncio.run(main())
