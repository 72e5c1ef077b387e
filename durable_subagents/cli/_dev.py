"""``subagents dev``: a dev server, a worker and the Web UI, in one command.

What it runs (``_dev_run``) is imported only when it is called.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from durable_subagents.cli._common import (
    BuildId,
    DeploymentName,
    McpConfigFiles,
    TaskQueue,
    Workspace,
    console,
    error,
    exit_now,
    make_settings,
    mcp_config_option,
    run,
)

__all__ = ["dev"]


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
    from durable_subagents.cli._dev_run import ServerExited, parse_duration, run_dev

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
