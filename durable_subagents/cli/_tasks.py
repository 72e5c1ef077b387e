"""Commands on tasks: spawn, check, cancel, approve, reject, send, ls and watch."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from durable_subagents.cli._common import (
    Address,
    AgentsDir,
    JsonOut,
    Namespace,
    Profile,
    TaskQueue,
    again,
    console,
    make_settings,
    run,
    usage_check,
)
from durable_subagents.cli._spawn_flags import read_metadata, read_schema, rule_flags
from durable_subagents.errors import SubagentError
from durable_subagents.wording._terminal import json_shown, shown

if TYPE_CHECKING:
    from durable_subagents.client import SubagentClient
    from durable_subagents.config import Settings
    from durable_subagents.types import TaskStatus

# The client, the settings and the task types are imported by the commands that use
# them: `subagents --help` imports this module and needs none of them.


def _exit_if_unsuccessful(status: TaskStatus | None) -> None:
    """``--wait`` ends with exit code 1 when the task failed, timed out or was cancelled."""
    from durable_subagents.types import TaskStatus

    if status in (TaskStatus.FAILED, TaskStatus.TIMED_OUT, TaskStatus.CANCELLED):
        raise typer.Exit(1)


async def _client(settings: Settings) -> SubagentClient:
    from durable_subagents.client import SubagentClient

    # Only spawning resolves agents: a broken agent file must not block check or cancel.
    return await SubagentClient.connect(settings=settings, agents={})


def spawn(
    agent: Annotated[str, typer.Argument(help="Agent name (see `subagents agents`)")],
    prompt: Annotated[str, typer.Argument(help="The task; '-' reads it from stdin")],
    description: Annotated[str, typer.Option(help="Short label for the task")] = "",
    model: Annotated[str | None, typer.Option(help="provider:model")] = None,
    max_turns: Annotated[int | None, typer.Option(help="Turn limit")] = None,
    parent: Annotated[str | None, typer.Option(help="Parent task id")] = None,
    tool: Annotated[list[str] | None, typer.Option(help="Only these tools (repeat)")] = None,
    disallow: Annotated[list[str] | None, typer.Option(help="Take this tool away (repeat)")] = None,
    permission_mode: Annotated[
        str | None, typer.Option(help="plan | default | accept_edits | dont_ask (narrow only)")
    ] = None,
    ask: Annotated[
        list[str] | None,
        typer.Option(help="Pause for approval on TOOL or TOOL:GLOB, e.g. 'bash:rm *' (repeat)"),
    ] = None,
    deny: Annotated[
        list[str] | None, typer.Option(help="Refuse TOOL or TOOL:GLOB (repeat)")
    ] = None,
    approval_timeout: Annotated[
        float | None, typer.Option(help="Seconds a pause waits before rejecting")
    ] = None,
    time_limit: Annotated[float | None, typer.Option(help="Seconds before timed_out")] = None,
    token_budget: Annotated[
        int | None, typer.Option(help="Tokens the task and its subagents may use in all")
    ] = None,
    budget_usd: Annotated[
        float | None, typer.Option(help="USD the task and its subagents may spend in all")
    ] = None,
    budget_warn_at: Annotated[
        float | None, typer.Option(help="Notify at this share of --budget-usd (e.g. 0.8)")
    ] = None,
    max_depth: Annotated[
        int | None,
        typer.Option(help="Levels of subagents below the task (0-10; default 3)"),
    ] = None,
    max_tasks: Annotated[
        int | None, typer.Option(help="Tasks the whole tree may hold (default 50)")
    ] = None,
    reasoning_effort: Annotated[
        str | None, typer.Option(help="low | medium | high (at most the agent's)")
    ] = None,
    output_schema: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="A JSON Schema (an object's) the answer must match; --json shows it as 'output'",
        ),
    ] = None,
    workspace: Annotated[
        str | None, typer.Option(help="Directory inside the worker's root")
    ] = None,
    no_network: Annotated[
        bool, typer.Option("--no-network", help="Take the network away from the task's tools")
    ] = False,
    metadata: Annotated[
        str | None,
        typer.Option(metavar="JSON", help="A small JSON object kept with the task"),
    ] = None,
    task_id: Annotated[str | None, typer.Option(help="Your own id (idempotent spawn)")] = None,
    notify_url: Annotated[
        str | None,
        typer.Option(metavar="URL", help="POST the task's events here (if workers allow it)"),
    ] = None,
    wait: Annotated[bool, typer.Option(help="Wait for the result")] = False,
    agents_dir: AgentsDir = None,
    address: Address = None,
    namespace: Namespace = None,
    profile: Profile = None,
    task_queue: TaskQueue = None,
    as_json: JsonOut = False,
) -> None:
    """Spawn a subagent task and print its id."""
    from durable_subagents.spawn import SpawnKwargs, SpawnOptions

    text = sys.stdin.read() if prompt == "-" else prompt
    # Each option's value is checked here, before anything connects: one wrong in
    # itself is a usage error (exit 2); what the agent or the server refuses exits 1.
    options: SpawnKwargs = {
        "model": model,
        "max_turns": max_turns,
        "tools": tool,
        "disallowed_tools": disallow,
        "permission_mode": permission_mode,
        "permissions": rule_flags(ask, "ask") + rule_flags(deny, "deny"),
        "approval_timeout": approval_timeout,
        "time_limit": time_limit,
        "token_budget": token_budget,
        "budget_usd": budget_usd,
        "budget_warn_at": budget_warn_at,
        "max_depth": max_depth,
        "max_tasks": max_tasks,
        "reasoning_effort": reasoning_effort,
        "output_schema": (
            usage_check(lambda: read_schema(output_schema), "--output-schema")
            if output_schema is not None
            else None
        ),
        "workspace": workspace,
        "network": False if no_network else None,
        "metadata": usage_check(lambda: read_metadata(metadata)) if metadata is not None else None,
        "task_id": task_id,
        "notify_url": notify_url,
    }
    usage_check(lambda: SpawnOptions(**options))
    if model is not None:
        from durable_subagents.providers._names import parse_model

        usage_check(lambda: parse_model(model), "--model")

    settings = make_settings(address, namespace, task_queue, profile=profile)

    async def main() -> TaskStatus | None:
        from durable_subagents.cli._render import print_info
        from durable_subagents.client import SubagentClient

        client = await SubagentClient.connect(settings=settings, agents_dir=agents_dir)
        tid = await client.spawn_task(agent, text, description, parent_id=parent, **options)
        if wait:
            info = await client.check_task(tid, wait=True, timeout=3600)
            print_info(console, info, as_json, await client.pending_arguments(info))
            return info.status
        if as_json:
            print(json.dumps({"id": tid}))
        else:
            console.print(tid)
        return None

    _exit_if_unsuccessful(run(main()))


def check(
    task_id: str,
    wait: Annotated[bool, typer.Option(help="Wait until done or paused")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait at most")] = 300.0,
    after_pause: Annotated[
        str | None, typer.Option(help="With --wait: do not stop at this (decided) pause")
    ] = None,
    address: Address = None,
    namespace: Namespace = None,
    profile: Profile = None,
    task_queue: TaskQueue = None,
    as_json: JsonOut = False,
) -> None:
    """Show a task's status and result, and the full arguments of calls awaiting approval."""
    _check_timeout(timeout)

    settings = make_settings(address, namespace, task_queue, profile=profile)

    async def main() -> TaskStatus:
        from durable_subagents.cli._render import print_info

        client = await _client(settings)
        info = await client.check_task(task_id, wait=wait, timeout=timeout, after_pause=after_pause)
        if info.result_truncated:  # over 64 KiB: the whole answer is in the blob store
            try:
                info.result = await client.get_result(task_id)
                info.result_truncated = False
            except SubagentError as err:  # the store is not reachable from here
                if not as_json:
                    info.result = f"{info.result}\n[cannot read the whole answer: {err}]"
        print_info(console, info, as_json, await client.pending_arguments(info))
        return info.status

    repeat = f"subagents check {shlex.quote(task_id)} --wait"
    status = run(main(), lost=_goes_on(repeat) if wait else None)
    if wait:
        _exit_if_unsuccessful(status)


def _check_timeout(timeout: float) -> None:
    """``--timeout`` is a finite number of seconds >= 0 (a usage error otherwise)."""
    from durable_subagents.client._waiting import check_timeout

    usage_check(lambda: check_timeout(timeout), "--timeout")


def _goes_on(command: str) -> str:
    """What a waiting command says when Temporal stops answering under it."""
    return (
        "the task goes on (it runs on the workers, and Temporal keeps it); run "
        f"`{again(command)}` again once the server answers"
    )


def cancel(
    task_id: str,
    wait: Annotated[bool, typer.Option(help="Wait until the cancel completed")] = True,
    timeout: Annotated[float, typer.Option(help="Seconds to wait at most")] = 30.0,
    address: Address = None,
    namespace: Namespace = None,
    profile: Profile = None,
    task_queue: TaskQueue = None,
    as_json: JsonOut = False,
) -> None:
    """Cancel a task: stops its model call and kills its tool processes."""
    _check_timeout(timeout)
    settings = make_settings(address, namespace, task_queue, profile=profile)

    async def main() -> None:
        from durable_subagents.cli._render import info_json, print_info
        from durable_subagents.types import TaskStatus

        client = await _client(settings)
        before = await client.check_task(task_id)
        info = await client.cancel_task(task_id, wait=wait, timeout=timeout)
        # ended before the cancel, or on its own while it was on its way
        already = before.status.terminal or (
            info.status.terminal and info.status != TaskStatus.CANCELLED
        )
        if as_json:
            print(info_json(info, already_finished=already))
            return
        print_info(console, info, as_json=False)
        if already:
            console.print(
                f"task {shown(info.id)} had already finished ({info.status.value}): nothing was "
                "cancelled",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )

    run(main())


CallIds = Annotated[
    list[str] | None,
    typer.Argument(help="Call ids of the current pause (`subagents check ID` lists them)"),
]
AllCalls = Annotated[bool, typer.Option("--all", help="Every pending call of the current pause")]


def _chosen(call_ids: list[str] | None, all_calls: bool, verb: str) -> list[str] | None:
    """The calls to decide (None: all of them); a decision must name them or say --all."""
    if call_ids and all_calls:
        raise typer.BadParameter(
            f"name call ids or pass --all, not both ({verb} the calls named, or all of them)",
            param_hint="--all",
        )
    if not call_ids and not all_calls:
        raise typer.BadParameter(
            f"none named; name the call ids to {verb}, or pass --all to {verb} every pending "
            "call (a decision must be explicit; `subagents check ID` lists the calls)",
            param_hint="CALL_ID",
        )
    return call_ids or None


def _decide(
    settings: Settings,
    task_id: str,
    call_ids: list[str] | None,
    *,
    approved: bool,
    reason: str | None,
    as_json: bool,
    pause_id: str | None = None,
) -> None:
    async def main() -> None:
        from durable_subagents.cli._render import info_json

        client = await _client(settings)
        if approved:
            info = await client.approve(task_id, call_ids, pause_id=pause_id)
        else:
            info = await client.reject(task_id, call_ids, reason, pause_id=pause_id)
        # info is the state the decision was made on: the pause and its pending calls
        decided = call_ids or [p.call_id for p in info.pending_approvals]
        rest = [p for p in info.pending_approvals if p.call_id not in decided]
        if as_json:
            decision = {"approved": approved, "call_ids": decided, "reason": reason}
            print(info_json(info, decision=decision))
            return
        verb = "approved" if approved else "rejected"
        console.print(
            f"{verb} {', '.join(decided)} of {info.id} (pause {info.pause_id})"
            + (f"; reason for the model: {reason}" if reason else ""),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        quoted = shlex.quote(info.id)
        if rest:
            console.print("  still waiting for a decision:", highlight=False)
            for p in rest:
                console.print(
                    f"    {p.call_id}  {shown(p.arguments_preview)}", markup=False, soft_wrap=True
                )
            command = f"subagents check {quoted}"
        else:
            command = f"subagents check {quoted} --wait"
        console.print(f"  next: {again(command)}", markup=False, highlight=False, soft_wrap=True)

    run(main())


PauseId = Annotated[
    str | None,
    typer.Option(
        "--pause",
        help="Decide only if the task is still on this pause (the one check showed); "
        "a newer pause is left undecided",
    ),
]


def approve(
    task_id: str,
    call_ids: CallIds = None,
    all_calls: AllCalls = False,
    pause: PauseId = None,
    address: Address = None,
    namespace: Namespace = None,
    profile: Profile = None,
    task_queue: TaskQueue = None,
    as_json: JsonOut = False,
) -> None:
    """Approve tool calls of a paused task: name their call ids, or pass --all."""
    chosen = _chosen(call_ids, all_calls, "approve")
    settings = make_settings(address, namespace, task_queue, profile=profile)
    _decide(settings, task_id, chosen, approved=True, reason=None, as_json=as_json, pause_id=pause)


def reject(
    task_id: str,
    call_ids: CallIds = None,
    all_calls: AllCalls = False,
    reason: Annotated[str | None, typer.Option(help="Why; the model gets it as the result")] = None,
    pause: PauseId = None,
    address: Address = None,
    namespace: Namespace = None,
    profile: Profile = None,
    task_queue: TaskQueue = None,
    as_json: JsonOut = False,
) -> None:
    """Reject tool calls of a paused task (they do not run): name call ids, or pass --all."""
    from durable_subagents.client._decisions import check_reason

    chosen = _chosen(call_ids, all_calls, "reject")
    usage_check(lambda: check_reason(reason), "--reason")
    settings = make_settings(address, namespace, task_queue, profile=profile)
    _decide(
        settings, task_id, chosen, approved=False, reason=reason, as_json=as_json, pause_id=pause
    )


def send(
    task_id: str,
    text: Annotated[str, typer.Argument(help="The input; '-' reads it from stdin")],
    address: Address = None,
    namespace: Namespace = None,
    profile: Profile = None,
    task_queue: TaskQueue = None,
    as_json: JsonOut = False,
) -> None:
    """Steer a running or paused task, or continue a completed one with a follow-up.

    A running or paused task reads the text at its next turn. A completed task starts
    a new run of the same conversation under the same id. Cancelled, failed and
    timed-out tasks cannot be continued.
    """
    body = sys.stdin.read() if text == "-" else text

    settings = make_settings(address, namespace, task_queue, profile=profile)

    async def main() -> None:
        from durable_subagents.cli._render import info_json, print_info
        from durable_subagents.types import TaskStatus

        client = await _client(settings)
        before = await client.check_task(task_id)
        info = await client.send_input(task_id, body)
        # A task that closed just now is continued too: it is then in a new run.
        follow_up = before.status.terminal or (
            info.run_id != before.run_id and info.status == TaskStatus.PENDING
        )
        if as_json:
            print(info_json(info, follow_up=follow_up))
            return
        print_info(console, info, as_json=False, arguments=await client.pending_arguments(info))
        if follow_up:
            what = "started a follow-up run with this input"
        elif info.status == TaskStatus.PAUSED:
            what = "the task reads this input once the calls above are decided"
        else:
            what = "the task reads this input at its next turn"
        console.print(
            f"\nsent: {what}. Wait for the answer: "
            + again(f"subagents check {shlex.quote(info.id)} --wait"),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )

    run(main())


def list_command(
    parent: Annotated[str | None, typer.Option(help="Only children of this parent id")] = None,
    status: Annotated[str | None, typer.Option(help="Only tasks in this status")] = None,
    limit: Annotated[
        int | None, typer.Option(help="Only the newest N tasks [default: all]", min=1)
    ] = None,
    address: Address = None,
    namespace: Namespace = None,
    profile: Profile = None,
    task_queue: TaskQueue = None,
    as_json: JsonOut = False,
) -> None:
    """List tasks (latest run of each), newest first, with their age."""
    from durable_subagents.types import TaskStatus

    known = [s.value for s in TaskStatus]
    if status is not None and status not in known:
        raise typer.BadParameter(
            f"unknown status {status!r}; use one of {', '.join(known)}", param_hint="--status"
        )

    settings = make_settings(address, namespace, task_queue, profile=profile)

    async def main() -> None:
        from durable_subagents.cli._render import task_table

        client = await _client(settings)
        tasks = await client.list_tasks(parent_id=parent, status=status, limit=limit)
        if as_json:
            rows = [t.model_dump(mode="json") for t in tasks]
            print(json_shown(json.dumps(rows, indent=2, ensure_ascii=False)))
            return
        for line in task_table(tasks, console.width):
            console.print(line, markup=False, highlight=False, soft_wrap=True)

    run(main())


def watch(
    task_id: str,
    address: Address = None,
    namespace: Namespace = None,
    profile: Profile = None,
    task_queue: TaskQueue = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print one JSON event per line (with its offset) for scripts."),
    ] = False,
    after: Annotated[
        int | None,
        typer.Option(
            "--after",
            min=0,
            help="Only the events after this offset (resume where a watch stopped).",
        ),
    ] = None,
    tree: Annotated[
        bool,
        typer.Option("--tree", help="Also every task below it, indented by depth."),
    ] = False,
) -> None:
    """Follow a task until it closes: the model's live thinking and text, turns, calls, status."""
    settings = make_settings(address, namespace, task_queue, profile=profile)

    async def main() -> None:
        from durable_subagents.cli._render import usage_text

        client = await _client(settings)
        # (task, "text" or "thinking") while one is being printed
        streaming: tuple[str, str] | None = None
        try:
            async for event in client.watch(task_id, tree=tree, after=after):
                if event.offset is not None:
                    seen[0] = event.offset
                if as_json:
                    print(json_shown(event.model_dump_json(exclude_none=True)), flush=True)
                    continue
                when = event.time.strftime("%H:%M:%S") if event.time else ""
                lead = "  " * event.depth + (f"[{event.task_id}] " if event.depth else "")
                if event.kind in ("text", "thinking") and event.text is not None:
                    restarted = event.summary == "restarted"
                    if streaming != (event.task_id, event.kind) or restarted:
                        if streaming is not None:
                            console.line()
                        head = "[restarted] " if restarted else ""
                        console.print(f"{when} {lead}{event.kind:<13} {head}", end="", markup=False)
                        streaming = (event.task_id, event.kind)
                    # the thinking dimmed: the model's reasoning, not its answer
                    style = "dim" if event.kind == "thinking" else None
                    indent = " " * (_TEXT_INDENT + len(lead))
                    text = event.text or (f"[{event.summary}]" if event.summary else "")
                    body = shown(text).replace("\n", "\n" + indent)
                    console.print(
                        body, end="", markup=False, highlight=False, soft_wrap=True, style=style
                    )
                    console.file.flush()
                    continue
                if streaming is not None:
                    console.line()
                    streaming = None
                parts = [event.status.value if event.status else None, event.summary]
                detail = " · ".join(p for p in parts if p)
                if event.usage is not None and event.kind == "turn":
                    detail = f"{detail} · tokens {usage_text(event.usage)}"
                if event.result and event.kind == "tool_finished":
                    detail = f"{detail} → {event.result}"
                if event.error:
                    detail = f"{detail} ({event.error})" if detail else event.error
                console.print(
                    f"{when} {lead}{event.kind:<13} {shown(detail)}",
                    markup=False,
                    highlight=False,
                )
                console.file.flush()
        finally:
            if streaming is not None:  # end the line, so whatever is printed next starts its own
                console.line()

    seen: list[int | None] = [after]

    def resume() -> str:
        """How to go on where this watch stopped."""
        command = f"subagents watch {shlex.quote(task_id)}" + (" --tree" if tree else "")
        if seen[0] is not None:
            command += f" --after {seen[0]}"
        return _goes_on(command + (" --json" if as_json else ""))

    run(main(), lost=resume)


_TEXT_INDENT = len("00:00:00 ") + 14
"""Where a streamed text's further lines start in ``watch``: under its first line."""
