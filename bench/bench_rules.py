"""How long permission rules take to judge a bash command line.

Run: ``.venv/bin/python bench/bench_rules.py [--repeats 200]``

Rules for ``bash`` judge every simple command of the line; this runs in the workflow
for every call (and again on every replay), so it must stay cheap. Target: under
1 ms for a 10 KB command. Three shapes of line:

- ``chain``: ``git log ... | head -3 && ...``, about 30 bytes per command, the worst
  case for the splitter (324 commands in 10 KB);
- ``message``: one ``git commit -m '...'`` with a long quoted message;
- ``script``: a heredoc with ``$VAR``s, which only the parser (tree-sitter-bash) reads.

Columns: the whole decision (``policy.decide``), the same line through the parser
alone (what every line took before plain lines were split without it), and the
raw-string glob match (what rules did before lines were split at all). Each row is
measured in one run, so compare within a row: the machine is noisy.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import date

from durable_subagents import policy
from durable_subagents.agents import AgentSpec, PermissionRule
from durable_subagents.policy import _rules, _shell

SPEC = AgentSpec(
    name="bench",
    permission_mode="dont_ask",
    permissions=[
        PermissionRule(tool="bash", pattern="*", action="ask"),
        PermissionRule(tool="bash", pattern="git status*", action="allow"),
        PermissionRule(tool="bash", pattern="git log*", action="allow"),
        PermissionRule(tool="bash", pattern="git commit*", action="allow"),
        PermissionRule(tool="bash", pattern="ls *", action="allow"),
        PermissionRule(tool="bash", pattern="*rm -rf*", action="deny"),
    ],
)


def chain(size: int) -> str:
    parts = []
    i = 0
    while sum(len(p) + 4 for p in parts) < size:
        parts.append(f"git log -{i} --format='%h %s' -- \"src/mod {i}.py\" | head -3")
        i += 1
    whole = " && ".join(parts)
    return whole[: whole.rfind(" && ", 0, size)] if len(whole) > size else whole


def message(size: int) -> str:
    words = (
        "Fix the retry loop so that a worker crash during a model turn resumes it. "
        * (size // 70 + 1)
    )[: size - 40]
    return f"git add -A && git commit -m '{words}'"


def script(size: int) -> str:
    body = "\n".join(f'echo "step {i}: $STEP_{i}" >> "$LOG"' for i in range(size // 32 + 1))[:size]
    return f"cat > run.sh <<'EOF'\n{body}\nEOF\nbash run.sh"


SHAPES: dict[str, Callable[[int], str]] = {"chain": chain, "message": message, "script": script}


def timed(command: str, repeats: int, judge: Callable[[str], object]) -> list[float]:
    out = []
    for i in range(repeats):
        fresh = f"{command} && echo {i}"  # a new line each time: no cache hit
        start = time.perf_counter()
        judge(fresh)
        out.append((time.perf_counter() - start) * 1000)
    return sorted(out)


def decide(line: str) -> object:
    return policy.decide(SPEC, "bash", {"command": line})


def raw(line: str) -> object:
    """The whole line matched against each rule's glob, unparsed."""
    return _rules._evaluate(SPEC.permissions, "bash", line, "allow")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    print(f"# bash rule evaluation ({date.today()})\n")
    print(
        "| shape | line | commands | fast path | decide p50 ms | decide p95 ms "
        "| parser alone p50 ms | raw match p50 ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for shape, make in SHAPES.items():
        for size in (100, 1_000, 10_000, 100_000):
            command = make(size)
            timed(command, 5, decide)
            decided = timed(command, args.repeats, decide)
            parsed = timed(command, max(args.repeats // 4, 5), _shell._parse)
            matched = timed(command, args.repeats, raw)
            label = f"{size // 1000} KB" if size >= 1000 else f"{size} B"
            fast = "yes" if _shell._split_plain(command) is not None else "no"
            print(
                f"| {shape} | {label} | {len(_shell.command_words(command))} | {fast} | "
                f"{statistics.median(decided):.3f} | {decided[int(len(decided) * 0.95) - 1]:.3f} | "
                f"{statistics.median(parsed):.3f} | {statistics.median(matched):.3f} |"
            )


if __name__ == "__main__":
    main()
