"""The ``subagents`` command: its Typer app, and ``main``, the console script's entry.

Each command lives in the module named for it: ``_dev``, ``_worker``, ``_codec``
(codec-server and keygen), ``_serve`` (the inbox), ``_tasks`` (spawn, check, cancel,
approve, reject, send, ls, watch), ``_agents`` (agents and tools), ``_mcp`` and
``_demo``; what a long-running one runs is in its ``_run`` or server module, imported
only when it is called. What they share is in ``_common``, and the task rendering,
which the demo uses too, in ``_render``. They are registered here, in the order
``subagents --help`` lists them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Annotated

import typer

from durable_subagents.cli import (
    _agents,
    _budget,
    _codec,
    _common,
    _demo,
    _dev,
    _help,
    _mcp,
    _serve,
    _tasks,
    _worker,
)

__all__ = ["app", "main"]

app = typer.Typer(
    help="Durable LLM subagents on Temporal: spawn, check, cancel and list tasks.",
    no_args_is_help=True,
    add_completion=False,
    # help texts are plain: "[env TEMPORAL_ADDRESS; ...]" must not be read as Rich markup
    rich_markup_mode=None,
)

# typer lists commands in the order they are registered
for _name, _command in (
    ("dev", _dev.dev),
    ("worker", _worker.worker),
    ("codec-server", _codec.codec_server),
    ("serve", _serve.serve),
    ("keygen", _codec.keygen),
    ("spawn", _tasks.spawn),
    ("check", _tasks.check),
    ("cancel", _tasks.cancel),
    ("approve", _tasks.approve),
    ("reject", _tasks.reject),
    ("budget", _budget.budget),
    ("send", _tasks.send),
    ("ls", _tasks.list_command),
    ("watch", _tasks.watch),
    ("agents", _agents.agents),
    ("tools", _agents.tools),
    ("mcp", _mcp.mcp),
    ("demo", _demo.demo),
):
    _help.register(app, _name, _command)

_RUN_WORKERS = {"dev", "worker", "demo"}
"""Commands that run a worker: their connection retries are the log of a lost server."""

_from_main = False
"""Whether the console script runs the app (``main``), which owns the process's Temporal
runtime; an app invoked in another program's process leaves that program's alone."""


def _print_version(value: bool) -> None:
    if value:
        from durable_subagents import __version__

        print(f"subagents (durable-subagents) {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    ctx: typer.Context,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="On errors, show the detail (the transport's error, the traceback) and "
            "Temporal's connection retries",
        ),
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print the installed version and exit.",
        ),
    ] = False,
) -> None:
    """Durable LLM subagents on Temporal: spawn, check, cancel and list tasks."""
    _common.VERBOSE = verbose
    if _from_main:
        # Here rather than in ``main``: Temporal's runtime is imported by the commands
        # that run, never by ``--help`` or ``--version``.
        _core_logs_to_stderr()
    if not verbose and ctx.invoked_subcommand not in _RUN_WORKERS:
        # A client command reports a lost server in one line of its own.
        from durable_subagents.connection._connect import no_connection_retries

        logging.getLogger("temporalio.core").addFilter(no_connection_retries)


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
    global _from_main
    _from_main = True
    try:
        app(prog_name="subagents")  # also under `python -m durable_subagents`
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
