"""What a command's private overlay costs: this checkout against another, call by call.

Run: ``.venv/bin/python bench/bench_overlay.py [--baseline REV] [--rounds 5]``

Times ``bash`` calls through the tool (``bash.run``: the sandbox's start, the command,
and, here, the landing of what it wrote) for three commands: one that writes nothing,
one that writes 100 small files, one that writes a 500 MB file. The same calls run
against ``--baseline`` (a git revision, checked out into a temporary worktree; by
default the last one before commands wrote to an overlay, where they wrote to the
workspace directly), in alternating rounds in fresh processes, so both sides meet the
same machine. The target: a call that writes nothing costs at most 5 ms more.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "3731121^"
"""The commit before the overlay."""

COMMANDS = {
    "writes nothing": ("true", 40),
    "100 small files": ("mkdir -p out && for i in $(seq 100); do echo $i > out/f$i; done", 15),
    "one 500 MB file": ("head -c 500M /dev/zero > big.bin", 3),
}
"""Each command, and how many calls one round times."""

MEASURE = """
import asyncio, json, os, sys, time
from pathlib import Path
from durable_subagents.testing import workspace_for_tools
from durable_subagents.tools import ToolContext, bash

async def main():
    commands = json.loads(sys.argv[1])
    root = Path(sys.argv[2])
    out = {}
    for label, (command, calls) in commands.items():
        times = []
        for i in range(calls + 1):
            ws = root / f"ws-{len(out)}-{i}"
            ws.mkdir()
            workspace_for_tools(ws)
            ctx = ToolContext(workspace=ws, task_id="bench", sandbox="auto")
            start = time.perf_counter()
            result = await bash.run(ctx, {"command": command})
            elapsed = (time.perf_counter() - start) * 1000
            assert "exit code" not in result, result
            if i:  # the first call warms up (and probes bubblewrap)
                times.append(elapsed)
            os.system(f"rm -rf {ws}")
        out[label] = times
    print(json.dumps(out))

asyncio.run(main())
"""


def measure(source: Path, tmp: Path) -> dict[str, list[float]]:
    """One round of every command, in a fresh interpreter importing ``source``."""
    work = Path(tempfile.mkdtemp(dir=tmp))
    os.chmod(work, 0o711)
    env = {
        **os.environ,
        "PYTHONPATH": str(source),
        "SUBAGENTS_DATA_DIR": str(work / "data"),
    }
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, json.dumps(COMMANDS), str(work)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp,
    )
    shutil.rmtree(work, ignore_errors=True)
    return json.loads(done.stdout.splitlines()[-1])


def baseline_tree(revision: str, tmp: Path) -> Path:
    tree = tmp / "baseline"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), revision],
        check=True,
    )
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", default=BASELINE, help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per side")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-overlay-"))
    os.chmod(tmp, 0o711)
    sides = {"overlay (this checkout)": ROOT}
    try:
        sides[f"direct ({args.baseline})"] = baseline_tree(args.baseline, tmp)
        times: dict[str, dict[str, list[float]]] = {s: {c: [] for c in COMMANDS} for s in sides}
        for _ in range(args.rounds):
            for side, source in sides.items():
                for label, values in measure(source, tmp).items():
                    times[side][label] += values
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp / "baseline")],
            check=False,
        )
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"bench_overlay, {date.today()}, {platform.machine()}, {os.cpu_count()} cores")
    print(f"{args.rounds} alternating rounds per side; ms per call, median (p90)\n")
    names = list(sides)
    print(f"| command | {' | '.join(names)} | difference |")
    print(f"|---|{'---|' * len(names)}---|")
    for label in COMMANDS:
        medians = [statistics.median(times[s][label]) for s in names]
        cells = []
        for side, median in zip(names, medians, strict=True):
            values = sorted(times[side][label])
            p90 = values[int(len(values) * 0.9) - 1]
            cells.append(f"{median:.1f} ({p90:.1f})")
        diff = medians[0] - medians[1]
        print(
            f"| {label} | {' | '.join(cells)} | {diff:+.1f} ms ({medians[0] / medians[1]:.2f}x) |"
        )


if __name__ == "__main__":
    main()
