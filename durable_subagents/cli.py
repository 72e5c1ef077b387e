"""The ``subagents`` command."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from durable_subagents._audience import for_shell
from durable_subagents._render import info_json, print_info, task_table
from durable_subagents._terminal import json_shown, shown
from durable_subagents.agents import (
    ALL_TOOLS,
    BUILTIN_AGENTS,
    AgentFiles,
    find_project_root,
    scan_agents,
)
from durable_subagents.client import SubagentClient
from durable_subagents.config import DEFAULT_TASK_QUEUE, Settings
from durable_subagents.errors import SubagentError
from durable_subagents.types import TaskInfo, TaskStatus

if TYPE_CHECKING:
    from temporalio.common import WorkerDeploymentVersion

app = typer.Typer(
    help="Durable LLM subagents on Temporal: spawn, check, cancel and list tasks.",
    no_args_is_help=True,
    add_completion=False,
    # help texts are plain: "[env TEMPORAL_ADDRESS; ...]" must not be read as Rich markup
    rich_markup_mode=None,
)
console = Console()
err_console = Console(stderr=True)
T = TypeVar("T")

Address = Annotated[
    str | None,
    typer.Option("--address", help="Temporal host:port [env TEMPORAL_ADDRESS; localhost:7233]"),
]
Namespace = Annotated[
    str | None, typer.Option("--namespace", help="Temporal namespace [env TEMPORAL_NAMESPACE]")
]
TaskQueue = Annotated[
    str | None,
    typer.Option(
        "--task-queue", help=f"Task queue [env SUBAGENTS_TASK_QUEUE; {DEFAULT_TASK_QUEUE}]"
    ),
]
JsonOut = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
AgentsDir = Annotated[
    Path | None,
    typer.Option(
        "--agents-dir",
        help="Project with .claude/agents or .opencode/agent files [default: the current one]",
    ),
]
Workspace = Annotated[
    Path | None,
    typer.Option("--workspace", help="Root the file tools are jailed to [default: current dir]"),
]
DeploymentName = Annotated[
    str | None,
    typer.Option(
        "--deployment-name",
        help="Temporal Worker Deployment of a versioned worker, with --build-id "
        "[env SUBAGENTS_DEPLOYMENT_NAME; unversioned]",
    ),
]
BuildId = Annotated[
    str | None,
    typer.Option(
        "--build-id",
        help="This code's build ID in the deployment; each task run stays on the build it "
        "started on [env SUBAGENTS_BUILD_ID]",
    ),
]


def _settings(
    address: str | None = None,
    namespace: str | None = None,
    task_queue: str | None = None,
    **extra: Any,
) -> Settings:
    settings = Settings()
    update = {"address": address, "namespace": namespace, "task_queue": task_queue, **extra}
    return settings.model_copy(update={k: v for k, v in update.items() if v is not None})


async def _stop_on_sigterm(coro: Awaitable[T]) -> T:
    """Await ``coro``; SIGTERM cancels it like Ctrl-C, so its cleanup runs.

    Without this, SIGTERM killed the process at once and the dev server it had
    started (in its own session, out of reach of the terminal's signals) kept running.
    """
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    assert task is not None
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await coro
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGTERM)


def _exit_if_tool_calls_stuck(code: int) -> None:
    """End the process at once if a worker it ran left tool calls stuck in threads.

    See ``worker.exit_if_tool_calls_stuck``. Only a command that ran a worker can
    have such threads; the others must not pay for importing the worker.
    """
    worker = sys.modules.get("durable_subagents.worker")
    if worker is not None:
        worker.exit_if_tool_calls_stuck(code)


def _run(coro: Awaitable[T]) -> T:
    """Run a coroutine; typed errors become a red message and exit code 1."""
    try:
        result = asyncio.run(_stop_on_sigterm(coro))
    except SubagentError as err:
        # soft_wrap: commands in the message must stay on one line to be copied
        err_console.print(
            f"[red]error:[/red] {escape(for_shell(str(err)))}", soft_wrap=True, highlight=False
        )
        _exit_if_tool_calls_stuck(1)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        _exit_if_tool_calls_stuck(130)
        raise typer.Exit(130) from None
    except asyncio.CancelledError:  # SIGTERM
        _exit_if_tool_calls_stuck(128 + signal.SIGTERM)
        raise typer.Exit(128 + signal.SIGTERM) from None
    _exit_if_tool_calls_stuck(0)
    return result


def _exit_if_unsuccessful(status: TaskStatus | None) -> None:
    """``--wait`` ends with exit code 1 when the task failed, timed out or was cancelled."""
    if status in (TaskStatus.FAILED, TaskStatus.TIMED_OUT, TaskStatus.CANCELLED):
        raise typer.Exit(1)


async def _client(settings: Settings) -> SubagentClient:
    # Only spawning resolves agents: a broken agent file must not block check or cancel.
    return await SubagentClient.connect(settings=settings, agents={})


def _show(
    settings: Settings,
    action: Callable[[SubagentClient], Awaitable[TaskInfo]],
    as_json: bool,
) -> None:
    """Connect, run one call on a task, print the task it returns."""

    async def main() -> None:
        print_info(console, await action(await _client(settings)), as_json)

    _run(main())


@app.command()
def dev(
    port: Annotated[int, typer.Option(help="gRPC port")] = 7233,
    ui_port: Annotated[int, typer.Option(help="Web UI port")] = 8233,
    db: Annotated[
        Path | None, typer.Option(help="SQLite file [default: per-user data dir]")
    ] = None,
    retention: Annotated[
        str | None,
        typer.Option(help="How long closed tasks and their blobs are kept, e.g. 24h or 7d"),
    ] = None,
    workspace: Workspace = None,
    task_queue: TaskQueue = None,
    deployment_name: DeploymentName = None,
    build_id: BuildId = None,
    codec_port: Annotated[
        int | None,
        typer.Option(
            help="Port of the codec server that decrypts payloads for the Web UI, when "
            "SUBAGENTS_PAYLOAD_KEY is set [default: a free one]",
            min=1,
            max=65535,
        ),
    ] = None,
) -> None:
    """Run the embedded Temporal dev server and a worker (Ctrl-C stops both).

    With SUBAGENTS_PAYLOAD_KEY set, a codec server runs too, and the Web UI decrypts
    tasks through it.
    """
    from durable_subagents.dev import parse_duration, run_dev

    try:
        keep = parse_duration(retention) if retention else None
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--retention") from None
    settings = _settings(task_queue=task_queue, deployment_name=deployment_name, build_id=build_id)
    _run(
        run_dev(
            settings=settings,
            port=port,
            ui_port=ui_port,
            db=db,
            retention=keep,
            workspace=workspace,
            console=console,
            codec_port=codec_port,
        )
    )


@app.command()
def worker(
    address: Address = None,
    namespace: Namespace = None,
    task_queue: TaskQueue = None,
    workspace: Workspace = None,
    sticky_queue_timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds before a crashed worker's tasks move to another worker "
            "(SUBAGENTS_STICKY_QUEUE_TIMEOUT; default 3)",
            min=0.1,
            max=60,
        ),
    ] = None,
    max_activities: Annotated[
        int | None,
        typer.Option(
            help="Model turns and tool calls run at once (SUBAGENTS_MAX_ACTIVITIES; default 100)",
            min=1,
            max=100_000,
        ),
    ] = None,
    max_cached_tasks: Annotated[
        int | None,
        typer.Option(
            help="Running tasks kept in memory; others are replayed at their next step "
            "(SUBAGENTS_MAX_CACHED_TASKS; default 1000)",
            min=1,
            max=1_000_000,
        ),
    ] = None,
    deployment_name: DeploymentName = None,
    build_id: BuildId = None,
) -> None:
    """Run a worker against an existing Temporal server."""
    settings = _settings(
        address,
        namespace,
        task_queue,
        workspace=workspace,
        sticky_queue_timeout=sticky_queue_timeout,
        max_activities=max_activities,
        max_cached_tasks=max_cached_tasks,
        deployment_name=deployment_name,
        build_id=build_id,
    )
    ready = asyncio.Event()

    async def main() -> None:
        version = settings.worker_deployment()  # before the worker's slow imports
        from durable_subagents.worker import run_worker

        runner = asyncio.create_task(run_worker(settings, ready=ready))
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait([runner, waiter], return_when=asyncio.FIRST_COMPLETED)
        if ready.is_set():
            console.print(
                f"worker on [bold]{settings.address}[/bold] namespace {settings.namespace} "
                f"task queue [bold]{settings.task_queue}[/bold] · workspace "
                f"{settings.resolved_workspace} · Ctrl-C to stop"
            )
            if version is not None:
                await _print_version(settings, version)
        await runner

    _run(main())


async def _print_version(settings: Settings, version: WorkerDeploymentVersion) -> None:
    """Say whether the worker's version is current, and how to make it so if not."""
    from temporalio.service import RPCError

    from durable_subagents._connect import connect_client
    from durable_subagents.worker._deployment import current_build_id, set_current_command

    where = f"deployment {version.deployment_name} build ID {version.build_id}"
    client = await connect_client(
        settings.address, settings.namespace, keys=settings.payload_keys()
    )
    try:
        current = await current_build_id(
            client, version.deployment_name, registered=version.build_id
        )
    except RPCError as err:
        console.print(f"{where} (its routing is unknown: {err.message})", markup=False)
        return
    if current == version.build_id:
        console.print(f"{where}: current (new tasks start here)", markup=False, highlight=False)
        return
    elsewhere = f"build {current}" if current else "unversioned workers"
    console.print(
        f"{where}: not current, new tasks go to {elsewhere} (this worker runs the task "
        f"runs pinned to {version.build_id}). To make it current:\n  "
        + set_current_command(version, settings.address, settings.namespace),
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _fail(message: str) -> NoReturn:
    """Print an error for the user and exit with code 1."""
    err_console.print(
        f"[red]error:[/red] {escape(for_shell(message))}", soft_wrap=True, highlight=False
    )
    raise typer.Exit(1)


@app.command("codec-server")
def codec_server(
    port: Annotated[int, typer.Option(help="Port to listen on", min=0, max=65535)] = 8081,
    host: Annotated[
        str,
        typer.Option(
            help="Address to listen on; other than 127.0.0.1, set a token too "
            "(whoever reaches it reads every task)"
        ),
    ] = "127.0.0.1",
    token: Annotated[
        str | None,
        typer.Option(
            envvar="SUBAGENTS_CODEC_TOKEN",
            show_envvar=False,
            help="Require Authorization: Bearer TOKEN on /encode and /decode "
            "[env SUBAGENTS_CODEC_TOKEN, which keeps it out of the process list]",
        ),
    ] = None,
    origin: Annotated[
        list[str] | None,
        typer.Option(
            "--origin",
            help="Browser origin (scheme://host:port) of a Web UI allowed to call it; "
            "repeat for several [default: http://127.0.0.1:8233 and http://localhost:8233]",
        ),
    ] = None,
    namespace: Annotated[
        list[str] | None,
        typer.Option(
            "--namespace",
            help="Only answer requests for this namespace (their X-Namespace header); "
            "repeat for several [default: any]",
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log each request (never its payloads)")
    ] = False,
) -> None:
    """Decrypt tasks for the Temporal Web UI and temporal CLI (needs the payload key).

    Serves Temporal's remote codec protocol (POST /encode, /decode) with the
    deployment's payload keys, so `temporal workflow show --codec-endpoint` and the Web
    UI show tasks decrypted. Ctrl-C stops it.
    """
    from durable_subagents._codec_server import DEFAULT_ORIGINS, CodecServer, serve

    try:
        keys = _settings().payload_keys()
    except SubagentError as err:
        _fail(str(err))
    if keys is None:
        _fail(
            "no payload key: set SUBAGENTS_PAYLOAD_KEY to the key the deployment's workers "
            "and clients use (SUBAGENTS_PAYLOAD_OLD_KEYS too, for data written before a "
            "rotation); for a new deployment, make one with `subagents keygen`"
        )
    if verbose:
        logging.basicConfig(format="%(asctime)s %(message)s")
        logging.getLogger("durable_subagents._codec_server").setLevel(logging.DEBUG)

    def ready(server: CodecServer) -> None:
        endpoint = server.endpoint
        auth = ' --codec-auth "Bearer $SUBAGENTS_CODEC_TOKEN"' if token else ""
        held = ", ".join(keys.ids)
        origins = ", ".join(sorted(server.origins)) or "none"
        lines = [
            f"codec server on {endpoint} · key(s) {held} · "
            + ("bearer token required" if token else "no token"),
            "Decrypted task histories with the temporal CLI:",
            f"  temporal workflow show --workflow-id ID --codec-endpoint {endpoint}{auth}",
            f"  (or export TEMPORAL_CODEC_ENDPOINT={endpoint}"
            + (' TEMPORAL_CODEC_AUTH="Bearer $SUBAGENTS_CODEC_TOKEN")' if token else ")"),
            f"In the Web UI (allowed origins: {origins}): enter {endpoint} in its Codec "
            f"Server setting, or start the server with --ui-codec-endpoint {endpoint}",
            "Ctrl-C to stop.",
        ]
        if host not in ("127.0.0.1", "localhost", "::1") and not token:
            lines.insert(
                1,
                f"warning: listening on {host} without a token: anyone who reaches this "
                "port can decrypt every task; set SUBAGENTS_CODEC_TOKEN",
            )
        for line in lines:
            console.print(line, markup=False, highlight=False, soft_wrap=True)

    try:
        serve(
            keys,
            host=host,
            port=port,
            token=token,
            origins=origin or DEFAULT_ORIGINS,
            namespaces=namespace or None,
            on_ready=ready,
        )
    except SubagentError as err:
        _fail(str(err))
    console.print("Stopped.")


@app.command()
def keygen() -> None:
    """Print a new payload key as SUBAGENTS_PAYLOAD_KEY=... (`subagents keygen >> .env`).

    Give the same key to every worker and client of the deployment. To rotate, make a
    new one current and keep the old one in SUBAGENTS_PAYLOAD_OLD_KEYS.
    """
    import base64

    from durable_subagents._codec import key_id, new_key

    key = new_key()
    print(f"# payload key id {key_id(base64.b64decode(key))} (subagents keygen)")
    print(f"SUBAGENTS_PAYLOAD_KEY={key}")
    err_console.print(
        "Set it on every worker and client (and the codec server); keep it secret. When "
        "rotating, move the previous key to SUBAGENTS_PAYLOAD_OLD_KEYS.",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


@app.command()
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
    workspace: Annotated[
        str | None, typer.Option(help="Directory inside the worker's root")
    ] = None,
    task_id: Annotated[str | None, typer.Option(help="Your own id (idempotent spawn)")] = None,
    wait: Annotated[bool, typer.Option(help="Wait for the result")] = False,
    agents_dir: AgentsDir = None,
    address: Address = None,
    namespace: Namespace = None,
    task_queue: TaskQueue = None,
    as_json: JsonOut = False,
) -> None:
    """Spawn a subagent task and print its id."""
    text = sys.stdin.read() if prompt == "-" else prompt

    async def main() -> TaskStatus | None:
        settings = _settings(address, namespace, task_queue)
        client = await SubagentClient.connect(settings=settings, agents_dir=agents_dir)
        tid = await client.spawn_task(
            agent,
            text,
            description,
            parent_id=parent,
            model=model,
            max_turns=max_turns,
            tools=tool,
            disallowed_tools=disallow,
            permission_mode=permission_mode,
            permissions=_rules(ask, "ask") + _rules(deny, "deny"),
            approval_timeout=approval_timeout,
            time_limit=time_limit,
            token_budget=token_budget,
            workspace=workspace,
            task_id=task_id,
        )
        if wait:
            info = await client.check_task(tid, wait=True, timeout=3600)
            print_info(console, info, as_json, await client.pending_arguments(info))
            return info.status
        if as_json:
            print(json.dumps({"id": tid}))
        else:
            console.print(tid)
        return None

    _exit_if_unsuccessful(_run(main()))


def _rules(specs: list[str] | None, action: str) -> list[dict[str, str]]:
    """``TOOL`` or ``TOOL:GLOB`` options as permission rules."""
    rules = []
    for spec in specs or []:
        tool_name, _, pattern = spec.partition(":")
        rules.append({"tool": tool_name or "*", "pattern": pattern or "*", "action": action})
    return rules


@app.command()
def check(
    task_id: str,
    wait: Annotated[bool, typer.Option(help="Wait until done or paused")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait at most")] = 300.0,
    after_pause: Annotated[
        str | None, typer.Option(help="With --wait: do not stop at this (decided) pause")
    ] = None,
    address: Address = None,
    namespace: Namespace = None,
    task_queue: TaskQueue = None,
    as_json: JsonOut = False,
) -> None:
    """Show a task's status and result, and the full arguments of calls awaiting approval."""

    async def main() -> TaskStatus:
        client = await _client(_settings(address, namespace, task_queue))
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

    status = _run(main())
    if wait:
        _exit_if_unsuccessful(status)


@app.command()
def cancel(
    task_id: str,
    wait: Annotated[bool, typer.Option(help="Wait until the cancel completed")] = True,
    timeout: Annotated[float, typer.Option(help="Seconds to wait at most")] = 30.0,
    address: Address = None,
    namespace: Namespace = None,
    task_queue: TaskQueue = None,
    as_json: JsonOut = False,
) -> None:
    """Cancel a task: stops its model call and kills its tool processes."""
    _show(
        _settings(address, namespace, task_queue),
        lambda c: c.cancel_task(task_id, wait=wait, timeout=timeout),
        as_json,
    )


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
            param_hint="CALL_IDS",
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
) -> None:
    async def main() -> None:
        client = await _client(settings)
        if approved:
            info = await client.approve(task_id, call_ids)
        else:
            info = await client.reject(task_id, call_ids, reason)
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
        console.print(f"  next: {command}", markup=False, highlight=False, soft_wrap=True)

    _run(main())


@app.command()
def approve(
    task_id: str,
    call_ids: CallIds = None,
    all_calls: AllCalls = False,
    address: Address = None,
    namespace: Namespace = None,
    task_queue: TaskQueue = None,
    as_json: JsonOut = False,
) -> None:
    """Approve tool calls of a paused task: name their call ids, or pass --all."""
    chosen = _chosen(call_ids, all_calls, "approve")
    settings = _settings(address, namespace, task_queue)
    _decide(settings, task_id, chosen, approved=True, reason=None, as_json=as_json)


@app.command()
def reject(
    task_id: str,
    call_ids: CallIds = None,
    all_calls: AllCalls = False,
    reason: Annotated[str | None, typer.Option(help="Why; the model gets it as the result")] = None,
    address: Address = None,
    namespace: Namespace = None,
    task_queue: TaskQueue = None,
    as_json: JsonOut = False,
) -> None:
    """Reject tool calls of a paused task (they do not run): name call ids, or pass --all."""
    chosen = _chosen(call_ids, all_calls, "reject")
    settings = _settings(address, namespace, task_queue)
    _decide(settings, task_id, chosen, approved=False, reason=reason, as_json=as_json)


@app.command()
def send(
    task_id: str,
    text: Annotated[str, typer.Argument(help="The input; '-' reads it from stdin")],
    address: Address = None,
    namespace: Namespace = None,
    task_queue: TaskQueue = None,
    as_json: JsonOut = False,
) -> None:
    """Steer a running or paused task, or continue a completed one with a follow-up.

    A running or paused task reads the text at its next turn. A completed task starts
    a new run of the same conversation under the same id. Cancelled, failed and
    timed-out tasks cannot be continued.
    """
    body = sys.stdin.read() if text == "-" else text

    async def main() -> None:
        client = await _client(_settings(address, namespace, task_queue))
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
            f"\nsent: {what}. Wait for the answer: subagents check {shlex.quote(info.id)} --wait",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )

    _run(main())


@app.command("ls")
def list_command(
    parent: Annotated[str | None, typer.Option(help="Only children of this parent id")] = None,
    status: Annotated[str | None, typer.Option(help="Only tasks in this status")] = None,
    address: Address = None,
    namespace: Namespace = None,
    task_queue: TaskQueue = None,
    as_json: JsonOut = False,
) -> None:
    """List tasks (latest run of each), newest first."""

    async def main() -> None:
        client = await _client(_settings(address, namespace, task_queue))
        try:
            tasks = await client.list_tasks(parent_id=parent, status=status)
        except ValueError as err:
            raise typer.BadParameter(str(err), param_hint="--status") from None
        if as_json:
            rows = [t.model_dump(mode="json") for t in tasks]
            print(json_shown(json.dumps(rows, indent=2, ensure_ascii=False)))
            return
        console.print(task_table(tasks))

    _run(main())


@app.command()
def watch(
    task_id: str,
    address: Address = None,
    namespace: Namespace = None,
    task_queue: TaskQueue = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON event per line for scripts.")
    ] = False,
) -> None:
    """Follow a task until it closes: the model's live text, turns, tool calls, status."""

    async def main() -> None:
        client = await _client(_settings(address, namespace, task_queue))
        in_text = False
        async for event in client.watch(task_id):
            if as_json:
                print(json_shown(event.model_dump_json(exclude_none=True)), flush=True)
                continue
            when = event.time.strftime("%H:%M:%S") if event.time else ""
            if event.kind == "text" and event.text is not None:
                restarted = event.summary == "restarted"
                if not in_text or restarted:
                    if in_text:
                        console.line()
                    head = "[restarted] " if restarted else ""
                    console.print(f"{when} {'text':<13} {head}", end="", markup=False)
                    in_text = True
                body = shown(event.text).replace("\n", "\n" + " " * _TEXT_INDENT)
                console.print(body, end="", markup=False, highlight=False, soft_wrap=True)
                console.file.flush()
                continue
            if in_text:
                console.line()
                in_text = False
            detail = event.summary or (event.status.value if event.status else "")
            if event.error:
                detail = f"{detail} ({event.error})" if detail else event.error
            console.print(f"{when} {event.kind:<13} {shown(detail)}", markup=False, highlight=False)
            console.file.flush()

    _run(main())


_TEXT_INDENT = len("00:00:00 ") + 14
"""Where a streamed text's further lines start in ``watch``: under its first line."""


@app.command()
def agents(agents_dir: AgentsDir = None, as_json: JsonOut = False) -> None:
    """List the built-in agents and the project's own (from agent files)."""
    try:
        root = agents_dir or find_project_root()
        found = scan_agents(root) if root is not None else AgentFiles()
    except SubagentError as err:
        err_console.print(
            f"[red]error:[/red] {escape(for_shell(str(err)))}", soft_wrap=True, highlight=False
        )
        raise typer.Exit(1) from None
    for warning in found.warnings:
        err_console.print(f"[yellow]warning:[/yellow] {escape(warning)}", soft_wrap=True)
    specs = {**BUILTIN_AGENTS, **found.agents}
    sources = {n: _source(found.sources[n]) if n in found.sources else "built-in" for n in specs}
    if as_json:
        rows = [{**a.model_dump(), "source": sources[n]} for n, a in specs.items()]
        print(json.dumps(rows, indent=2))
        return
    table = Table("name", "tools", "mode", "max turns", "source", "description")
    for n, a in specs.items():
        every = a.tools is None and not a.disallowed_tools
        tools = "all" if every else ", ".join(a.allowed_tools(ALL_TOOLS))
        table.add_row(n, tools, a.permission_mode, str(a.max_turns), sources[n], a.description)
    console.print(table)


def _source(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(Path.cwd()))
    return str(path)


@app.command()
def mcp(
    parent_id: Annotated[
        str | None,
        typer.Option(
            "--parent-id",
            help="Parent id of the tasks spawned; list_subagents shows only these "
            "[default: mcp-<random>, new per server]",
        ),
    ] = None,
    agents_dir: AgentsDir = None,
    address: Address = None,
    namespace: Namespace = None,
    task_queue: TaskQueue = None,
) -> None:
    """Serve the subagent tools over MCP on stdio (for Claude Code and other MCP clients)."""
    from durable_subagents.client._mcp import default_parent_id, run_mcp

    settings = _settings(address, namespace, task_queue)
    parent = parent_id or default_parent_id()
    # stdout carries the protocol: anything for people goes to stderr
    err_console.print(
        f"subagents MCP server on stdio · Temporal {settings.address} (connected on first "
        f"call) · task queue {settings.task_queue} · parent id {parent}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    _run(run_mcp(settings, parent, agents_dir=agents_dir))


@app.command()
def demo(
    port: Annotated[int, typer.Option(help="gRPC port of the embedded server")] = 7233,
    ui_port: Annotated[int, typer.Option(help="Web UI port")] = 8233,
    db: Annotated[
        Path | None, typer.Option(help="SQLite file [default: per-user data dir]")
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="provider:model [env SUBAGENTS_MODEL; offline script]")
    ] = None,
) -> None:
    """Run subagents over a sample project: an approval, a follow-up, their results."""
    from durable_subagents.demo import run_demo

    settings = _settings(model=model)
    _run(run_demo(settings=settings, port=port, ui_port=ui_port, db=db, console=console))


def _core_logs_to_stderr() -> None:
    """Send Temporal core's log lines through Python logging (stderr), not stdout.

    Core writes warnings (e.g. a payload over 2 KB) to stdout by default, which would
    corrupt ``--json`` output.
    """
    from temporalio.runtime import (
        LogForwardingConfig,
        LoggingConfig,
        Runtime,
        TelemetryConfig,
        TelemetryFilter,
    )

    logging_config = LoggingConfig(
        filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
        forwarding=LogForwardingConfig(logger=logging.getLogger("temporalio.core")),
    )
    Runtime.set_default(
        Runtime(telemetry=TelemetryConfig(logging=logging_config)), error_if_already_set=False
    )


def main() -> None:
    """Entry point of the ``subagents`` command."""
    _core_logs_to_stderr()
    try:
        app()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    # Skip interpreter finalization: temporalio's Rust threads can still run then and
    # abort or crash the process after its work is done (temporalio/sdk-python#300),
    # which turned ~5% of successful commands into exit 134 or 139.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code or 0)
