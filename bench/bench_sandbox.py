"""What the tool sandbox costs per ``bash`` call.

Run: ``.venv/bin/python bench/bench_sandbox.py [--calls 200]``

Times ``bash`` calls through the tool itself (``bash.run``: spawn, run, collect output,
clean up) with the sandbox (bwrap, with the per-call cgroup where the worker can make
one) and without it (``none``, a plain process group on the host), interleaved so the
ratio is comparable on a noisy machine. The target is under 15 ms added per call.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import tempfile
import time
from datetime import date
from pathlib import Path

from durable_subagents.testing import workspace_for_tools
from durable_subagents.tools import ToolContext, bash
from durable_subagents.tools._limits import limit_mechanisms
from durable_subagents.tools._sandbox_host import bwrap_executable, detect_sandbox, tool_user

COMMANDS = {
    "true": "true",
    "echo + pipe": "echo hello | tr a-z A-Z",
    "python3 -c pass": "python3 -c pass",
}


async def timed(ctx: ToolContext, command: str) -> float:
    start = time.perf_counter()
    await bash.run(ctx, {"command": command})
    return (time.perf_counter() - start) * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200, help="calls per command and mode")
    args = parser.parse_args()
    detect_sandbox("auto")
    with tempfile.TemporaryDirectory() as tmp:
        workspace_for_tools(Path(tmp))  # a root worker's commands run as its owner
        runs_as = tool_user(Path(tmp))
        sandboxed = ToolContext(workspace=Path(tmp), task_id="bench", sandbox="auto")
        host = ToolContext(workspace=Path(tmp), task_id="bench", sandbox="none")
        for ctx in (sandboxed, host):  # warm up
            for _ in range(5):
                await timed(ctx, "true")
        rows = []
        for label, command in COMMANDS.items():
            times: dict[str, list[float]] = {"bwrap": [], "none": []}
            for _ in range(args.calls):
                times["bwrap"].append(await timed(sandboxed, command))
                times["none"].append(await timed(host, command))
            p50 = {k: statistics.median(v) for k, v in times.items()}
            p95 = {k: sorted(v)[int(len(v) * 0.95) - 1] for k, v in times.items()}
            rows.append((label, p50, p95))

    print(f"# bash call cost, sandbox vs host ({date.today()}, {platform.machine()}, ", end="")
    print(f"{platform.system()} {platform.release()}, bwrap {bwrap_executable()})")
    print(f"limits: {limit_mechanisms()}")
    print(f"commands run as: {'the worker' if runs_as is None else f'uid {runs_as[0]}'}")
    print()
    print("| command | sandboxed p50 ms | host p50 ms | added p50 ms | ratio | sandboxed p95 ms |")
    print("|---|---|---|---|---|---|")
    for label, p50, p95 in rows:
        added = p50["bwrap"] - p50["none"]
        ratio = p50["bwrap"] / p50["none"]
        print(
            f"| {label} | {p50['bwrap']:.1f} | {p50['none']:.1f} | {added:.1f} | "
            f"{ratio:.2f}x | {p95['bwrap']:.1f} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
