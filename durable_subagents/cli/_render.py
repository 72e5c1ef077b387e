"""Tasks as people and scripts read them: the ``subagents`` command's and the demo's.

A task's status block (with the calls awaiting approval and how to decide them), its
JSON for scripts, the task table of ``subagents ls``, and tool arguments as indented
JSON. Everything a model wrote goes through ``_terminal.shown`` before it is printed.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.highlighter import JSONHighlighter
from rich.markup import escape
from rich.text import Text

from durable_subagents.types import TaskInfo, TaskStatus, Usage
from durable_subagents.wire._payloads import HELD_TOOL
from durable_subagents.wording._money import usd
from durable_subagents.wording._terminal import json_shown, shown

Arguments = dict[str, dict[str, Any] | None]
"""Full arguments by pending call id; None where they could not be read."""


def info_json(info: TaskInfo, arguments: Arguments | None = None, **extra: Any) -> str:
    """A task as JSON, with the full arguments of its pending calls if read."""
    data = info.model_dump(mode="json")
    if arguments is not None:
        for pending in data["pending_approvals"]:
            pending["arguments"] = arguments.get(pending["call_id"])
    return json_shown(json.dumps({**data, **extra}, indent=2, ensure_ascii=False))


def indented_json(data: Any, indent: int) -> Text:
    """Pretty JSON, highlighted on a terminal, every line indented; strings never cut."""
    text = Text(json_shown(json.dumps(data, indent=2, ensure_ascii=False)))
    JSONHighlighter().highlight(text)
    lines = text.split("\n", allow_blank=True)
    return Text("\n").join(Text(" " * indent) + line for line in lines)


def print_pending(console: Console, info: TaskInfo, arguments: Arguments | None) -> None:
    """The calls a paused task waits on, in full where read, and the commands to decide."""
    console.print(f"  [yellow]waiting for approval[/yellow] (pause {escape(info.pause_id or '')}):")
    below = {t: p for t, p in info.paused_tasks.items() if t != info.id}
    for task_id, pause_id in below.items():
        console.print(f"    in subagent {task_id} (pause {pause_id})", markup=False)
    for p in info.pending_approvals:
        full = arguments.get(p.call_id) if arguments is not None else None
        if full is None:
            console.print(
                f"    {p.call_id}  {shown(p.arguments_preview)}", markup=False, soft_wrap=True
            )
            if arguments is not None:
                console.print(
                    "      (a preview: the full arguments are not readable here; is the "
                    "workers' blob store reachable from this machine?)",
                    style="dim",
                    highlight=False,
                )
            continue
        console.print(f"    {p.call_id}  {shown(p.tool_name)}", markup=False, highlight=False)
        if p.tool_name == HELD_TOOL and isinstance(full.get("changes"), str):
            # A command's held changes: the diff as a person reads it.
            console.print(
                f"      what call {shown(str(full.get('call_id')))} changed under protected "
                "paths (applied only if approved):",
                markup=False,
                highlight=False,
            )
            for line in full["changes"].splitlines():
                console.print(f"      {shown(line)}", markup=False, highlight=False, soft_wrap=True)
            continue
        console.print(indented_json(full, 6), soft_wrap=True)
        if p.resolved_path is not None:
            console.print(
                f"      the path leads to: {shown(p.resolved_path)}", markup=False, soft_wrap=True
            )
    task = shlex.quote(info.id)
    first = shlex.quote(info.pending_approvals[0].call_id)
    # --pause: a decision typed late never reaches a newer pause under the same call ids
    pause = f"--pause {shlex.quote(info.pause_id or '')}"
    console.print("  decide with one of:", highlight=False)
    for command in (
        f"subagents approve {task} {first} {pause}",
        f"subagents approve {task} --all {pause}",
        f"subagents reject {task} {first} {pause} --reason TEXT",
        f"subagents reject {task} --all {pause} --reason TEXT",
    ):
        console.print(f"    {command}", markup=False, highlight=False, soft_wrap=True)


def print_info(
    console: Console, info: TaskInfo, as_json: bool, arguments: Arguments | None = None
) -> None:
    """Print a task; ``arguments`` (full arguments of the pending calls) if read.

    JSON goes to stdout with ``print``, not through ``console``: scripts read it whole.
    """
    if as_json:
        print(info_json(info, arguments))
        return
    color = {"completed": "green", "failed": "red", "cancelled": "yellow"}.get(info.status, "cyan")
    console.print(f"[bold]{escape(shown(info.id))}[/bold]  [{color}]{info.status.value}[/{color}]")
    console.print(
        f"  agent {shown(info.agent)} · turns {info.turns} · model {shown(info.model or '-')}",
        markup=False,
    )
    console.print(
        f"  tokens {usage_text(info.usage)}"
        + (f" · stop {info.stop_reason}" if info.stop_reason else ""),
        highlight=False,
    )
    if info.tree_usage is not None:
        console.print(f"  with its subagents {usage_text(info.tree_usage)}", highlight=False)
    if info.budget_usd is not None:
        console.print(f"  {budget_text(info)}", markup=False, highlight=False, soft_wrap=True)
    if info.compactions:
        times = "once" if info.compactions == 1 else f"{info.compactions} times"
        console.print(
            f"  compacted {times} to fit the model's context window "
            "(get_transcript still holds every message)",
            highlight=False,
        )
    if info.error:
        console.print(f"  [red]error:[/red] {escape(shown(info.error))}")
    if info.retrying:
        console.print(f"  [yellow]retrying:[/yellow] {escape(shown(info.retrying))}")
    if info.waiting:
        console.print(f"  [yellow]waiting:[/yellow] {escape(shown(info.waiting))}")
    if info.pending_approvals and info.status == TaskStatus.PAUSED:
        print_pending(console, info, arguments)
    if info.output is not None:
        console.print()
        console.print(indented_json(info.output, 0), soft_wrap=True)
    elif info.result:
        console.print()
        console.print(shown(info.result), markup=False, highlight=False)


def budget_text(info: TaskInfo) -> str:
    """``budget $3 · spent $1.2: this task $0.4, subagent-explore-9d65 $0.8``."""
    spent = info.spent_usd or 0.0
    parts = [
        f"{'this task' if task_id == info.id else shown(task_id)} {usd(cost)}"
        for task_id, cost in list(info.spend_by_task.items())[:10]
    ]
    more = len(info.spend_by_task) - len(parts)
    tail = f": {', '.join(parts)}" + (f" and {more} more" if more > 0 else "") if parts else ""
    return f"budget {usd(info.budget_usd or 0.0)} · spent {usd(spent)}{tail}"


def usage_text(usage: Usage) -> str:
    """``in 12,400 (cached 11,000 · written 900) / out 310``: the cache parts of the input.

    Usage a server did not report ends in ``(estimated)``; a priced one in its cost
    (`` · $0.0042``).
    """
    cache = ""
    if usage.cache_read_tokens or usage.cache_write_tokens:
        cache = f" (cached {usage.cache_read_tokens:,} · written {usage.cache_write_tokens:,})"
    estimated = " (estimated)" if usage.estimated else ""
    cost = f" · {usd(usage.cost_usd)}" if usage.cost_usd is not None else ""
    return f"in {usage.input_tokens:,}{cache} / out {usage.output_tokens:,}{estimated}{cost}"


def task_table(tasks: Sequence[TaskInfo], width: int, now: datetime | None = None) -> list[str]:
    """Tasks as aligned lines of id, agent, status, turns, cost, age and description.

    The cost is the task's and its finished subagents' (``-``: no model had a price).

    Ids and agent names are what ``check`` and ``spawn`` take: they are never cut or
    wrapped. The description gets the rest of ``width`` and is cut with ``…``.

    Args:
        tasks: The tasks, one line each.
        width: The columns of the terminal (80 in a pipe).
        now: The time ages count to (default: now).
    """
    now = now or datetime.now(UTC)
    rows = [
        (
            (
                shown(t.id),
                shown(t.agent),
                t.status.value,
                str(t.turns),
                usd(t.tree_cost_usd) if t.tree_cost_usd is not None else "-",
                age(t.created_at, now),
            ),
            shown(t.description),
        )
        for t in tasks
    ]
    header = ("id", "agent", "status", "turns", "cost", "age", "description")
    return plain_table(header, rows, width, {3, 4})


def plain_table(
    header: Sequence[str],
    rows: Sequence[tuple[Sequence[str], str]],
    width: int,
    right: Collection[int] = (),
) -> list[str]:
    """Aligned lines a script can split on whitespace: every cell whole but the last.

    The cells before the last (names, ids, states) are never cut or wrapped, whatever
    the width; the last, free text, gets the rest of ``width`` on one line and is cut
    with ``…`` (at least as many columns as its header show, however narrow the
    terminal).

    Args:
        header: The columns' names, the last one the free text's.
        rows: Per line, the cells before the last (without spaces) and the free text.
        width: The columns of the terminal (80 in a pipe).
        right: Indexes of the cells aligned to the right (numbers).
    """
    firsts = [tuple(header[:-1]), *(tuple(cells) for cells, _ in rows)]
    widths = [max(cell_len(cells[i]) for cells in firsts) for i in range(len(header) - 1)]
    room = max(width - sum(widths) - 2 * len(widths), cell_len(header[-1]))
    lines = []
    for cells, last in [(firsts[0], header[-1]), *((tuple(c), t) for c, t in rows)]:
        padded = [
            cell.rjust(w) if i in right else cell + " " * (w - cell_len(cell))
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        ]
        text = Text(" ".join(last.split()))
        text.truncate(room, overflow="ellipsis")
        lines.append("  ".join([*padded, text.plain]).rstrip())
    return lines


def age(created: datetime | None, now: datetime) -> str:
    """How long ago a task was created, in its largest unit: ``45s``, ``12m``, ``3h``, ``2d``."""
    if created is None:
        return "-"
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    seconds = max(0, int((now - created).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
