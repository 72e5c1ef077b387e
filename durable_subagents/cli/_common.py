"""What the commands share: the consoles, the common options, settings from them.

``run`` runs a command's coroutine: a ``SubagentError`` becomes a red message and exit
code 1, and so does a Temporal server that stops answering (one line, no traceback;
``-v`` adds the detail); Ctrl-C exits with code 130, SIGTERM 143 (after the
coroutine's cleanup ran).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import sys
import traceback
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from durable_subagents.connection._task_queue import DEFAULT_TASK_QUEUE
from durable_subagents.errors import InvalidRequest, SubagentError, TemporalUnavailable
from durable_subagents.runtime._event_loop import EventLoopChoice, loop_factory
from durable_subagents.wording._error_wording import for_shell

if TYPE_CHECKING:
    from pydantic import ValidationError

    from durable_subagents.config import Settings

console = Console()
err_console = Console(stderr=True)
T = TypeVar("T")

VERBOSE = False
"""``subagents -v``: errors show their detail, and Temporal's connection retries show."""

_address: str | None = None
"""The Temporal address of the command's settings (a lost connection names it)."""

_given: list[str] = []
"""The connection options given on the command line (``--address X``...): a hint that
repeats a command repeats them, or the repeat would go to another server."""

Address = Annotated[
    str | None,
    typer.Option("--address", help="Temporal host:port [env TEMPORAL_ADDRESS; localhost:7233]"),
]
Namespace = Annotated[
    str | None, typer.Option("--namespace", help="Temporal namespace [env TEMPORAL_NAMESPACE]")
]
Profile = Annotated[
    str | None,
    typer.Option(
        "--profile",
        help="Profile of Temporal's configuration file (address, namespace, API key, TLS) "
        "[env TEMPORAL_PROFILE; default]",
    ),
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
        envvar="SUBAGENTS_AGENTS_DIR",
        show_envvar=False,
        help="Project with .claude/agents or .opencode/agent files [env SUBAGENTS_AGENTS_DIR; "
        "the project root: the first directory up with .git, else the current one]",
    ),
]
Workspace = Annotated[
    Path | None,
    typer.Option("--workspace", help="Root the file tools are jailed to [default: current dir]"),
]
McpConfigFiles = Annotated[
    list[Path] | None,
    typer.Option(
        "--mcp-config",
        metavar="FILE",
        help="MCP servers to offer tools from (Claude Code's .mcp.json format), read after "
        "the workspace's .mcp.json; repeat for several, a later one winning "
        "(SUBAGENTS_MCP_CONFIG)",
    ),
]


def mcp_config_option(files: list[Path] | None) -> str | None:
    """``--mcp-config`` as the setting's value (None: the environment's stands)."""
    return os.pathsep.join(str(f) for f in files) if files else None


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


def make_settings(
    address: str | None = None,
    namespace: str | None = None,
    task_queue: str | None = None,
    **extra: Any,
) -> Settings:
    """Settings from the environment, with the options given (not None) on top.

    The options are given to the constructor, not copied in afterwards: ``--profile``
    decides the address and namespace that ``--address`` and ``--namespace`` leave open.
    """
    # The settings (pydantic-settings, Temporal's config) are imported by the commands
    # that read them, not by `subagents --help`.
    from pydantic import ValidationError

    from durable_subagents.config import Settings

    global _address
    given = {"address": address, "namespace": namespace, "task_queue": task_queue, **extra}
    _given[:] = [
        part
        for flag, value in (
            ("--address", address),
            ("--namespace", namespace),
            ("--profile", extra.get("profile")),
        )
        if value is not None
        for part in (flag, value)
    ]
    try:
        settings = Settings(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as err:
        raise typer.BadParameter(_first_error(err)) from None
    _address = settings.address
    return settings


def again(command: str) -> str:
    """``command`` (to be typed again) with the connection options this one was given."""
    return " ".join([command, *(shlex.quote(part) for part in _given)])


def _first_error(err: ValidationError) -> str:
    """A settings error as one line: the field's message, without pydantic's frame.

    A value read from the environment is named as it was set (``SUBAGENTS_X=value``),
    a secret's value left out.
    """
    from durable_subagents.config import SECRET_ENV_NAME

    first = err.errors()[0]
    message = str(first.get("ctx", {}).get("error") or first["msg"])
    loc = first.get("loc") or ()
    name = str(loc[0]) if loc else ""
    if not name.isupper():  # an option's value: typer names the option
        return message
    if SECRET_ENV_NAME.search(name) or not isinstance(first.get("input"), str):
        return f"{name}: {message}"
    return f"{name}={first['input']}: {message}"


def usage_check(check: Callable[[], T], param_hint: str | None = None) -> T:
    """Check a value of the command line before anything connects.

    A value wrong in itself (``--max-turns -1``, ``--metadata`` that is not a JSON
    object) is a usage error: exit code 2, whatever the server would say.

    Args:
        check: Checks the value (and returns what it makes of it); raises
            ``InvalidRequest`` for a value that cannot be.
        param_hint: The option to name, when the message does not.
    """
    try:
        return check()
    except InvalidRequest as err:
        raise typer.BadParameter(for_shell(str(err)), param_hint=param_hint) from None


def error(message: str) -> None:
    """Print an error for people: one line, commands in it left unwrapped to be copied."""
    err_console.print(
        f"[red]error:[/red] {escape(for_shell(message))}", soft_wrap=True, highlight=False
    )


def fail(message: str) -> NoReturn:
    """Print an error for the user and exit with code 1."""
    error(message)
    raise typer.Exit(1)


def _detail(detail: str | None) -> None:
    """With ``-v``, the transport's own error text under the message."""
    if VERBOSE and detail:
        err_console.print(f"  detail: {detail}", markup=False, highlight=False, soft_wrap=True)


def _lost(err: Exception, after: str | None) -> str:
    """The one line that says the server stopped answering mid-command."""
    from temporalio.service import RPCError, RPCStatusCode

    from durable_subagents.connection._connect import plain_connection_error

    where = f"Temporal at {_address}" if _address else "Temporal"
    if isinstance(err, RPCError) and err.status != RPCStatusCode.UNAVAILABLE:
        return f"{where} refused the call: {err.message} ({err.status.name})"
    words = plain_connection_error(str(err))
    text = f"lost the connection to {where}: {words}"
    return text + (f"; {after}" if after else "; is the server running? (`subagents dev`)")


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


def exit_now(code: int) -> NoReturn:
    """End the process at once, with what it printed flushed.

    For a command whose remaining tasks can only wind down by retrying a server that
    is gone: ``asyncio.run`` would wait for them. Tool processes die with the process
    (their sandbox dies with its parent).
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _exit_if_tool_calls_stuck(code: int) -> None:
    """End the process at once if a worker it ran left tool calls stuck in threads.

    See ``worker.exit_if_tool_calls_stuck``. Only a command that ran a worker can
    have such threads; the others must not pay for importing the worker.
    """
    worker = sys.modules.get("durable_subagents.worker")
    if worker is not None:
        worker.exit_if_tool_calls_stuck(code)


def run(
    coro: Coroutine[Any, Any, T],
    *,
    lost: str | Callable[[], str] | None = None,
    event_loop: EventLoopChoice = "asyncio",
) -> T:
    """Run a coroutine; typed errors become a red message and exit code 1.

    Args:
        coro: The command's work.
        lost: What to tell the user when the server stops answering meanwhile (what
            goes on without this command, and how to pick it up again), or a function
            that says it then (a command whose resumption depends on its progress).
        event_loop: The loop it runs on (``Settings.event_loop`` for a command that
            runs a worker).
    """
    from temporalio.service import RPCError

    try:
        factory = loop_factory(event_loop)
    except SubagentError as err:
        coro.close()
        error(str(err))
        raise typer.Exit(1) from None
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            result = runner.run(_stop_on_sigterm(coro))
    except SubagentError as err:
        detail = err.detail if isinstance(err, TemporalUnavailable) else None
        if detail and not VERBOSE:
            error(f"{err} (`subagents -v ...` shows the transport's error)")
        else:
            error(str(err))
            _detail(detail)
        _exit_if_tool_calls_stuck(1)
        raise typer.Exit(1) from None
    except RPCError as err:
        error(_lost(err, lost() if callable(lost) else lost))
        if VERBOSE:
            _detail("".join(traceback.format_exception(err)).rstrip())
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
