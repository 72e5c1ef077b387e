"""``subagents demo``: three tasks on the bundled dev server, no API key needed.

What it runs (``_demo_run``) is imported only when it is called.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from durable_subagents.cli._common import (
    console,
    error,
    make_settings,
    run,
)
from durable_subagents.errors import SubagentError

__all__ = ["demo"]


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
    from durable_subagents.cli._demo_run import check_model, run_demo
    from durable_subagents.worker import worker_endpoints, worker_models

    settings = make_settings(model=model)
    try:
        endpoints = worker_endpoints(settings)
        check_model(settings.model, "--model" if model else "SUBAGENTS_MODEL", endpoints)
        # and one SUBAGENTS_MODELS allows (the demo's worker runs the scripted model too)
        worker_models(settings.model_copy(update={"allow_scripted": True}), endpoints)
    except SubagentError as err:
        error(str(err))
        raise typer.Exit(1) from None
    run(
        run_demo(settings=settings, port=port, ui_port=ui_port, db=db, console=console),
        event_loop=settings.event_loop,
    )
