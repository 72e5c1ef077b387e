"""``subagents worker``: a worker for a deployment's task queue."""

from __future__ import annotations

import asyncio
import enum
from typing import TYPE_CHECKING, Annotated

import typer

from durable_subagents.cli._common import (
    Address,
    BuildId,
    DeploymentName,
    McpConfigFiles,
    Namespace,
    Profile,
    TaskQueue,
    Workspace,
    console,
    make_settings,
    mcp_config_option,
    run,
)

if TYPE_CHECKING:
    from temporalio.common import WorkerDeploymentVersion

    from durable_subagents.config import Settings

__all__ = ["Role", "worker"]


class Role(enum.StrEnum):
    """What ``subagents worker`` serves."""

    ALL = "all"
    TASKS = "tasks"
    TOOLS = "tools"


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

    from durable_subagents.connection._connect import connect_temporal
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
