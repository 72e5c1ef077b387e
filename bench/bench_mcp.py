"""What a call of an MCP server's tool over stdio costs, beside a built-in ``read_file``.

Run: ``.venv/bin/python bench/bench_mcp.py [--calls 200] [--starts 10] [--turns 20] [--repeats 5]``

Three measures, each interleaved (MCP, built-in, MCP, ...) so the ratio holds on a
noisy machine:

- **per call**: ``McpTool.run`` of ``mcp-server-time``'s ``get_current_time`` and
  ``mcp-server-git``'s ``git_status`` through the worker's ``McpServers`` (a warm,
  pooled server process), against ``read_file.run`` of a 2-byte file (in a task's
  forked child, as a worker runs it): wall time p50 / p95;
- **first call**: a fresh ``McpServers`` for each call: the server's process started
  (as the tool user on a root worker), ``initialize``, the call, against a task's first
  ``read_file`` (its child forked);
- **per turn**: a task of N turns with one call each on a dev server and a worker this
  script starts, spawn to ``check_task(wait=True)`` returning completed, divided by N:
  ``mcp__time__get_current_time`` (a ``run_tool`` activity on the tools queue) against
  ``read_file`` (run within its model turn).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import date
from pathlib import Path
from typing import Any

from durable_subagents import AgentSpec, SubagentClient, TaskStatus, connect_client
from durable_subagents.config import Settings
from durable_subagents.testing import DevServer, free_port, workspace_for_tools
from durable_subagents.tools import ToolContext, read_file
from durable_subagents.tools._sandbox_host import tool_user, unreachable
from durable_subagents.tools.mcp import McpServer
from durable_subagents.tools.mcp._names import offerable_schema
from durable_subagents.tools.mcp._sessions import McpServers
from durable_subagents.tools.mcp._tools import McpTool
from durable_subagents.worker import create_worker

# Its workers run the scripted model and any model of the local fake servers: a worker
# runs only the models its settings allow.
os.environ.setdefault("SUBAGENTS_ALLOW_SCRIPTED", "true")
os.environ.setdefault("SUBAGENTS_MODELS", "*")

TOOL_USER = (10001, 10001)
"""Owner of the bench's workspace when run as root, as a user's checkout would be."""
SITE_PACKAGES = sysconfig.get_paths()["purelib"]


def server_python(run_as: tuple[int, int] | None) -> str:
    """A Python of this version the servers' user can run (this one when it can)."""
    mine = os.path.realpath(sys.executable)
    if run_as is None or unreachable(Path(mine), run_as) is None:
        return mine
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (f"/usr/bin/{version}", shutil.which(version)):
        if candidate and unreachable(Path(candidate), run_as) is None:
            return candidate
    raise SystemExit(f"no {version} the tool user can run")


def servers(run_as: tuple[int, int] | None) -> dict[str, McpServer]:
    python = server_python(run_as)
    env = {"PYTHONPATH": SITE_PACKAGES}
    return {
        "time": McpServer(name="time", command=python, args=("-m", "mcp_server_time"), env=env),
        "git": McpServer(name="git", command=python, args=("-m", "mcp_server_git"), env=env),
    }


def held(workspace: Path) -> int:
    return os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


async def mcp_tool(pool: McpServers, server: str, name: str, workspace: Path, fd: int) -> McpTool:
    [info] = [t for t in await pool.list_tools(server, workspace, fd) if t.name == name]
    schema = offerable_schema(info.input_schema)
    return McpTool(info, f"mcp__{server}__{name}", schema, pool, pool.servers[server].timeout)


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await call()
    return (time.perf_counter() - start) * 1000


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


CALLS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "mcp-server-time get_current_time": ("time", "get_current_time", {"timezone": "UTC"}),
    "mcp-server-git git_status": ("git", "git_status", {"repo_path": "."}),
}


async def per_call(workspace: Path, calls: int) -> dict[str, list[float]]:
    run_as = tool_user(workspace)
    fd = held(workspace)
    pool = McpServers(servers(run_as), env={"PATH": os.environ["PATH"]}, run_as=tool_user)
    try:
        ctx = ToolContext(workspace=workspace, task_id="bench", run_as=run_as, workspace_fd=fd)
        tools = {
            label: (await mcp_tool(pool, server, name, workspace, fd), arguments)
            for label, (server, name, arguments) in CALLS.items()
        }
        times: dict[str, list[float]] = {label: [] for label in ["read_file", *tools]}
        for tool, arguments in tools.values():  # warm up: each server's process started
            await tool.run(ctx, arguments)
        await read_file.run(ctx, {"path": "f.txt"})
        for _ in range(calls):
            times["read_file"].append(await timed(lambda: read_file.run(ctx, {"path": "f.txt"})))
            for label, (tool, arguments) in tools.items():
                times[label].append(await timed(lambda t=tool, a=arguments: t.run(ctx, a)))
        return times
    finally:
        await pool.aclose()
        os.close(fd)


async def first_calls(workspace: Path, starts: int) -> dict[str, list[float]]:
    run_as = tool_user(workspace)
    times: dict[str, list[float]] = {"read_file": [], "mcp-server-time": []}
    for n in range(starts):
        fd = held(workspace)
        try:
            ctx = ToolContext(
                workspace=workspace, task_id=f"bench-{n}", run_as=run_as, workspace_fd=fd
            )
            await asyncio.sleep(0.05)  # a model turn: the next spare is forked
            times["read_file"].append(
                await timed(lambda c=ctx: read_file.run(c, {"path": "f.txt"}))
            )
            pool = McpServers(servers(run_as), env={"PATH": os.environ["PATH"]}, run_as=tool_user)
            try:
                started = time.perf_counter()
                await pool.call("time", "get_current_time", {"timezone": "UTC"},
                                workspace=workspace, workspace_fd=fd)  # fmt: skip
                times["mcp-server-time"].append((time.perf_counter() - started) * 1000)
            finally:
                await pool.aclose()
        finally:
            os.close(fd)
    return times


async def per_turn(tmp: Path, workspace: Path, turns: int, repeats: int) -> dict[str, list[float]]:
    config = tmp / "servers.json"
    declared = {
        name: s.model_dump(mode="json", exclude={"name", "source"})
        for name, s in servers(tool_user(workspace)).items()
    }
    config.write_text(json.dumps({"mcpServers": declared}))
    server = DevServer(port=free_port(), ui_port=free_port(), db=tmp / "mcp.db", ui=False)
    await server.start()
    try:
        settings = Settings(
            address=server.address,
            namespace=server.namespace,
            task_queue=f"bench-mcp-{uuid.uuid4().hex[:8]}",
            data_dir=tmp / "data",
            blob_dir=tmp / "blobs",
            workspace=workspace,
            mcp_config=str(config),
        )
        temporal = await connect_client(server.address, server.namespace)
        agents = {"bench": AgentSpec(name="bench", permission_mode="dont_ask")}
        client = SubagentClient(
            temporal, task_queue=settings.task_queue, blob_store=settings.blob_store(),
            agents=agents,
        )  # fmt: skip
        calls = {
            "read_file": {"name": "read_file", "arguments": {"path": "f.txt"}},
            "mcp__time__get_current_time": {
                "name": "mcp__time__get_current_time",
                "arguments": {"timezone": "UTC"},
            },
        }

        async def run(label: str) -> None:
            body = {"turns": [{"tool_calls": [calls[label]]}], "repeat": turns, "final": "done"}
            task_id = await client.spawn_task(
                "bench", "bench", model="scripted:" + json.dumps(body)
            )
            info = await client.check_task(task_id, wait=True, timeout=300)
            assert info.status == TaskStatus.COMPLETED, info

        times: dict[str, list[float]] = {label: [] for label in calls}
        async with create_worker(temporal, settings):
            for label in calls:
                await run(label)
            for _ in range(repeats):
                for label in calls:
                    times[label].append(await timed(lambda lb=label: run(lb)) / turns)
        return times
    finally:
        await server.stop()


def prepare(workspace: Path) -> Path:
    """A git repository with a 2-byte file, the tool user's (when run as root)."""
    workspace.mkdir()
    (workspace / "f.txt").write_text("x\n")
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    return workspace_for_tools(workspace, TOOL_USER)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200, help="warm calls per tool")
    parser.add_argument("--starts", type=int, default=10, help="first calls per side")
    parser.add_argument("--turns", type=int, default=20, help="turns of the per-turn task")
    parser.add_argument("--repeats", type=int, default=5, help="runs of it per side")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as tmp_name:
        tmp = Path(tmp_name)
        workspace = prepare(tmp / "ws")

        warm = await per_call(workspace, args.calls)
        cold = await first_calls(workspace, args.starts)
        turns = await per_turn(tmp, workspace, args.turns, args.repeats)

    load = os.getloadavg()[0]
    print(f"{date.today()} · {os.cpu_count()} cores · Python {platform.python_version()}")
    print(f"load average {load:.1f}\n")
    base = statistics.median(warm["read_file"])
    print(f"| call ({args.calls} each, warm) | p50 ms | p95 ms | p50 vs read_file |")
    print("|---|---|---|---|")
    for label, values in warm.items():
        ratio = statistics.median(values) / base
        print(
            f"| {label} | {statistics.median(values):.2f} | {p(values, 0.95):.2f} | {ratio:.1f}x |"
        )
    print(f"\n| a task's first call ({args.starts} each) | p50 ms | max ms |")
    print("|---|---|---|")
    for label, values in cold.items():
        print(f"| {label} | {statistics.median(values):.1f} | {max(values):.1f} |")
    base = statistics.median(turns["read_file"])
    print(f"\n| {args.turns}-turn task, one call a turn | ms per turn (median of {args.repeats}) "
          "| ratio |")  # fmt: skip
    print("|---|---|---|")
    for label, values in turns.items():
        median = statistics.median(values)
        print(f"| {label} | {median:.1f} | {median / base:.2f}x |")


if __name__ == "__main__":
    asyncio.run(main())
