"""How long permission rules take to judge a bash command line.

Run: ``.venv/bin/python bench/bench_rules.py [--repeats 200]``

Rules for ``bash`` parse the line (tree-sitter-bash) into its simple commands and
match each; this runs in the workflow for every call, so it must stay cheap. Target:
under 1 ms for a 10 KB command. Prints the median and p95 per line size, with the
raw-string match (what rules did before parsing) beside it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import date

from durable_subagents import policy
from durable_subagents.agents import AgentSpec, PermissionRule

SPEC = AgentSpec(
    name="bench",
    permission_mode="dont_ask",
    permissions=[
        PermissionRule(tool="bash", pattern="*", action="ask"),
        PermissionRule(tool="bash", pattern="git status*", action="allow"),
        PermissionRule(tool="bash", pattern="git log*", action="allow"),
        PermissionRule(tool="bash", pattern="ls *", action="allow"),
        PermissionRule(tool="bash", pattern="*rm -rf*", action="deny"),
    ],
)


def line(size: int) -> str:
    parts = []
    i = 0
    while sum(len(p) + 4 for p in parts) < size:
        parts.append(f"git log -{i} --format='%h %s' -- \"src/mod {i}.py\" | head -3")
        i += 1
    whole = " && ".join(parts)
    return whole[: whole.rfind(" && ", 0, size)] if len(whole) > size else whole


def timed(command: str, repeats: int, parse: bool) -> list[float]:
    out = []
    for i in range(repeats):
        fresh = f"{command} && echo {i}"  # a new line each time: no cache hit
        start = time.perf_counter()
        policy.decide(SPEC, "bash", {"command": fresh}, parse_bash=parse)
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    print(f"# bash rule evaluation ({date.today()})\n")
    print("| line | parsed p50 ms | parsed p95 ms | raw match p50 ms | simple commands |")
    print("|---|---|---|---|---|")
    for size in (100, 1_000, 10_000, 100_000):
        command = line(size)
        timed(command, 5, True)
        parsed = sorted(timed(command, args.repeats, True))
        raw = timed(command, args.repeats, False)
        from durable_subagents._shell import split_commands

        pieces = len(split_commands(command))
        print(
            f"| {size // 1000 if size >= 1000 else size}{' KB' if size >= 1000 else ' B'} | "
            f"{statistics.median(parsed):.3f} | {parsed[int(len(parsed) * 0.95) - 1]:.3f} | "
            f"{statistics.median(raw):.3f} | {pieces} |"
        )


if __name__ == "__main__":
    main()
