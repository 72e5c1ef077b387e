"""Commands that run a deployment's parts: dev, worker, mcp and demo, and agents.

dev, worker, mcp and demo run until stopped or done; agents lists the agents a worker
or client would know (the HTTP servers are in ``_servers``). Each imports
what it runs only when called, so that ``subagents --help`` and the task commands start
fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from durable_subagents._error_wording import for_shell
from durable_subagents.cli._common import (
    Address,
    AgentsDir,
    BuildId,
    DeploymentName,
    JsonOut,
    McpConfigFiles,
    Namespace,
    Profile,
    TaskQueue,
    Workspace,
    console,
    err_console,
    error,
    exit_now,
    make_settings,
    mcp_config_option,
    run,
)
from durable_subagents.errors import SubagentError

if TYPE_CHECKING:
    from temporalio.common import WorkerDeploymentVersion

    from durable_subagents.config import Settings


class Role(enum.StrEnum):
    """What ``subagents worker`` serves."""

    ALL = "all"
    TASKS = "tasks"
    TOOLS = "tools"


class Reach(enum.StrEnum):
    """Which tasks ``subagents mcp``'s model reaches by id."""

    ANY = "any"
    OWN = "own"


class Approvals(enum.StrEnum):
    """Who approves the calls subagents pause on, for ``subagents mcp``."""

    MODEL = "model"
    PERSON = "person"


def dev(
    port: Annotated[int, typer.Option(help="gRPC port", min=1, max=65535)] = 7233,
    ui_port: Annotated[int, typer.Option(help="Web UI port", min=1, max=65535)] = 8233,
    db: Annotated[
        Path | None, typer.Option(help="SQLite file [default: per-user data dir]")
    ] = None,
    retention: Annotated[
        str | None,
        typer.Option(help="How long closed tasks and their blobs are kept, e.g. 24h or 7d"),
    ] = None,
    workspace: Workspace = None,
    mcp_config: McpConfigFiles = None,
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
    from durable_subagents.cli._dev import ServerExited, parse_duration, run_dev

    try:
        keep = parse_duration(retention) if retention else None
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--retention") from None
    settings = make_settings(
        task_queue=task_queue,
        deployment_name=deployment_name,
        build_id=build_id,
        mcp_config=mcp_config_option(mcp_config),
    )

    async def main() -> None:
        try:
            await run_dev(
                settings=settings,
                port=port,
                ui_port=ui_port,
                db=db,
                retention=keep,
                workspace=workspace,
                console=console,
                codec_port=codec_port,
            )
        except ServerExited as err:
            # The worker's remaining tasks could only retry a server that is gone.
            error(str(err))
            exit_now(1)

    run(main(), event_loop=settings.event_loop)


def worker(
    address: Address = None,
    namespace: Namespace = None,
    profile: Profile = None,
    task_queue: TaskQueue = None,
    workspace: Workspace = None,
    mcp_config: McpConfigFiles = None,
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
            help="Model turns run at once (SUBAGENTS_MAX_ACTIVITIES; default 100)",
            min=1,
            max=100_000,
        ),
    ] = None,
    max_tool_calls: Annotated[
        int | None,
        typer.Option(
            help="Tool calls run at once, on slots of their own "
            "(SUBAGENTS_MAX_TOOL_CALLS; default 100)",
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
    role: Annotated[
        Role | None,
        typer.Option(
            help="all: tasks and their tool calls; tasks: no tool calls (they wait for a "
            "tools worker); tools: only tool calls, on <task queue>-tools "
            "(SUBAGENTS_WORKER_ROLE; default all)",
        ),
    ] = None,
    deployment_name: DeploymentName = None,
    build_id: BuildId = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            help="Serve /metrics (Prometheus), /healthz and /readyz on this port "
            "(SUBAGENTS_METRICS_PORT; SUBAGENTS_METRICS_HOST, default 127.0.0.1)",
            min=0,
            max=65535,
        ),
    ] = None,
    drain_timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds a stopping worker lets running model turns and tool calls finish "
            "before it hands them to other workers (SUBAGENTS_DRAIN_TIMEOUT; default 25)",
            min=0,
            max=3600,
        ),
    ] = None,
    model_rate_limit: Annotated[
        list[str] | None,
        typer.Option(
            "--model-rate-limit",
            help="PROVIDER=TURNS_PER_SECOND for all workers together, e.g. openai=5; repeat "
            "for several (SUBAGENTS_MODEL_RATE_LIMITS)",
        ),
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Check once that a worker of this host is ready (Temporal sees it poll, "
            "the blob store answers) and exit 0, or 1 with the reason: for exec probes",
        ),
    ] = False,
) -> None:
    """Run a worker against an existing Temporal server."""
    settings = make_settings(
        address,
        namespace,
        task_queue,
        profile=profile,
        workspace=workspace,
        sticky_queue_timeout=sticky_queue_timeout,
        max_activities=max_activities,
        max_tool_calls=max_tool_calls,
        max_cached_tasks=max_cached_tasks,
        worker_role=role.value if role else None,
        deployment_name=deployment_name,
        build_id=build_id,
        metrics_port=metrics_port,
        drain_timeout=drain_timeout,
        model_rate_limits=",".join(model_rate_limit) if model_rate_limit else None,
        mcp_config=mcp_config_option(mcp_config),
    )
    if check:
        from durable_subagents.worker import check_worker

        console.print(run(check_worker(settings)), markup=False, highlight=False, soft_wrap=True)
        return
    ready = asyncio.Event()

    async def main() -> None:
        version = settings.worker_deployment()  # before the worker's slow imports
        from durable_subagents.worker import run_worker

        runner = asyncio.create_task(run_worker(settings, ready=ready))
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait([runner, waiter], return_when=asyncio.FIRST_COMPLETED)
        if ready.is_set():
            queues = {
                "all": f"task queue [bold]{settings.task_queue}[/bold] (tool calls on "
                f"{settings.task_queue}-tools)",
                "tasks": f"task queue [bold]{settings.task_queue}[/bold] (no tool calls: "
                f"a tools worker serves {settings.task_queue}-tools)",
                "tools": f"tool calls only, on [bold]{settings.task_queue}-tools[/bold]",
            }[settings.worker_role]
            ops = ""
            if settings.metrics_port is not None:
                ops = f" · metrics and health on {settings.metrics_host}:{settings.metrics_port}"
            console.print(
                f"worker on [bold]{settings.address}[/bold] namespace {settings.namespace} "
                f"{queues} · workspace {settings.resolved_workspace}{ops} · Ctrl-C to stop",
                soft_wrap=True,  # one line, for logs and for whoever reads it
            )
            if version is not None:
                await _print_version(settings, version)
        await runner

    run(main(), event_loop=settings.event_loop)


async def _print_version(settings: Settings, version: WorkerDeploymentVersion) -> None:
    """Say whether the worker's version is current, and how to make it so if not."""
    from temporalio.service import RPCError

    from durable_subagents._connect import connect_temporal
    from durable_subagents.worker._deployment import current_build_id, set_current_command

    where = f"deployment {version.deployment_name} build ID {version.build_id}"
    client = await connect_temporal(settings)
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


def agents(agents_dir: AgentsDir = None, as_json: JsonOut = False) -> None:
    """List the built-in agents and the project's own (from agent files)."""
    from durable_subagents._terminal import shown
    from durable_subagents.agents import ALL_TOOLS, BUILTIN_AGENTS, find_project_root, scan_agents
    from durable_subagents.agents._tool_names import is_mcp
    from durable_subagents.cli._render import plain_table

    try:
        found = scan_agents(agents_dir or find_project_root())
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
    listed: list[tuple[tuple[str, ...], str]] = []
    for n, a in specs.items():
        every = a.tools is None and not a.disallowed_tools
        mcp = [t for t in a.tools or () if is_mcp(t) and t not in a.disallowed_tools]
        tools = "all" if every else ",".join([*a.allowed_tools(ALL_TOOLS), *mcp]) or "none"
        cells = (shown(n), tools, a.permission_mode, str(a.max_turns), shown(sources[n]))
        listed.append((cells, shown(a.description)))
    header = ("name", "tools", "mode", "turns", "source", "description")
    for line in plain_table(header, listed, console.width, right={3}):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _source(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(Path.cwd()))
    return str(path)


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
    profile: Profile = None,
    task_queue: TaskQueue = None,
    approvals: Annotated[
        Approvals,
        typer.Option(
            help="Who approves the calls subagents pause on: 'model' (approve_tool_calls) "
            "or 'person' (subagents approve; the model may only reject or cancel)",
        ),
    ] = Approvals.MODEL,
    reach: Annotated[
        Reach,
        typer.Option(
            help="Which tasks the model reaches by id: 'any' task of the namespace, or "
            "only its 'own' (spawned with this --parent-id; give a fixed one so later "
            "sessions reach earlier tasks)",
        ),
    ] = Reach.ANY,
) -> None:
    """Serve the subagent tools over MCP on stdio (for Claude Code and other MCP clients)."""
    from durable_subagents._connect import check_address
    from durable_subagents.client._mcp import default_parent_id, run_mcp

    settings = make_settings(address, namespace, task_queue, profile=profile)
    parent = parent_id or default_parent_id()
    # stdout carries the protocol: anything for people goes to stderr
    err_console.print(
        f"subagents MCP server on stdio · Temporal {settings.address} (connected on first "
        f"call) · task queue {settings.task_queue} · parent id {parent} · approvals by "
        f"the {approvals.value}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    try:
        check_address(settings.address)
    except SubagentError as err:  # the tools are listed still; each call answers this
        error(f"{err}; every tool call answers this until it is fixed")
    run(
        run_mcp(
            settings, parent, agents_dir=agents_dir, approvals=approvals.value, reach=reach.value
        )
    )


def demo(
    port: Annotated[
        int, typer.Option(help="gRPC port of the embedded server", min=1, max=65535)
    ] = 7233,
    ui_port: Annotated[int, typer.Option(help="Web UI port", min=1, max=65535)] = 8233,
    db: Annotated[
        Path | None, typer.Option(help="SQLite file [default: per-user data dir]")
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="provider:model [env SUBAGENTS_MODEL; offline script]")
    ] = None,
) -> None:
    """Run subagents over a sample project: an approval, a follow-up, their results."""
    from durable_subagents.cli._demo import check_model, run_demo
    from durable_subagents.worker import worker_models

    settings = make_settings(model=model)
    try:
        check_model(settings.model, "--model" if model else "SUBAGENTS_MODEL")
        # and one SUBAGENTS_MODELS allows (the demo's worker runs the scripted model too)
        worker_models(settings.model_copy(update={"allow_scripted": True}))
    except SubagentError as err:
        error(str(err))
        raise typer.Exit(1) from None
    run(
        run_demo(settings=settings, port=port, ui_port=ui_port, db=db, console=console),
        event_loop=settings.event_loop,
    )
