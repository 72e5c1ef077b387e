"""``subagents dev``: the embedded default deployment, a dev server plus one worker.

It starts Temporal's dev server (``DevServer``, or uses the one already on the port),
a worker, and with a payload key a codec server the Web UI decrypts through, then runs
until Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from temporalio.client import Client
from temporalio.common import WorkerDeploymentVersion

from durable_subagents.cli._codec_server import CodecServer, web_ui_origins
from durable_subagents.config import Settings
from durable_subagents.devserver._dev_server import (
    DevServer,
    server_answers,
    set_retention,
)
from durable_subagents.errors import InvalidRequest, SubagentError
from durable_subagents.storage._sealing import KeyRing
from durable_subagents.wire import _search_attributes

# Re-exported: part of this module's public API (DevServer registers them on start).
from durable_subagents.wire._search_attributes import (
    ensure_search_attributes as ensure_search_attributes,
)
from durable_subagents.wire._search_attributes import (
    missing_search_attributes as missing_search_attributes,
)

if TYPE_CHECKING:
    from rich.console import Console
    from temporalio.worker import Worker

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str) -> timedelta:
    """Parse a short duration such as ``90s``, ``30m``, ``24h``, ``7d`` or ``2w``.

    Args:
        text: A number followed by one unit letter (s, m, h, d or w).

    Returns:
        The duration.

    Raises:
        InvalidRequest: If the text is not such a duration or is not positive.
    """
    match = _DURATION.match(text)
    if not match:
        raise InvalidRequest(
            f"invalid duration {text!r}; use a number and a unit: 90s, 30m, 24h, 7d or 2w"
        )
    value = timedelta(**{_UNITS[match.group(2)]: float(match.group(1))})
    if value <= timedelta(0):
        raise InvalidRequest(f"invalid duration {text!r}; it must be greater than zero")
    return value


async def run_dev(
    *,
    settings: Settings,
    port: int,
    ui_port: int,
    db: Path | None,
    retention: timedelta | None,
    workspace: Path | None,
    console: Console,
    codec_port: int | None = None,
) -> None:
    """Run ``subagents dev``: a dev server (or the one already on ``port``) and a worker.

    Returns once cancelled (Ctrl-C), after the worker has shut down and the server this
    call started has stopped; a server that was already running is left running.

    With a payload key set, a codec server runs too (on 127.0.0.1, answering only the
    Web UI's origin), and the server this call starts gets it as the Web UI's codec
    endpoint, so the UI shows tasks decrypted out of the box.

    Args:
        settings: Base settings; the address becomes ``127.0.0.1:<port>``.
        port: gRPC frontend port.
        ui_port: Web UI port (used only when this call starts the server).
        db: SQLite file; defaults to ``<settings.data_dir>/temporal.db``.
        retention: How long closed tasks, and the blobs they reference, are kept;
            ``None`` keeps the server's current setting.
        workspace: Root the worker's file tools are jailed to.
        console: Where the connection details are printed.
        codec_port: The codec server's port; ``None`` picks a free one.

    Raises:
        SubagentError: If the server or the codec server cannot be started.
    """
    from durable_subagents.connection._connect import connect_client
    from durable_subagents.telemetry._telemetry import setup_tracing
    from durable_subagents.worker import (
        collect_less,
        create_worker,
        sweep_forever,
        warn_secrets_in_workspace,
        worker_models,
    )

    version = settings.worker_deployment()  # a half-given version fails before starting
    keys = settings.payload_keys()  # so does a malformed key
    address = f"127.0.0.1:{port}"
    namespace = settings.namespace
    workspace = workspace or settings.workspace
    # The dev server's worker runs the offline scripted model too, beside its default.
    settings = settings.model_copy(
        update={"address": address, "workspace": workspace, "allow_scripted": True}
    )
    worker_models(settings)  # a model the worker cannot run fails before anything starts
    await asyncio.to_thread(warn_secrets_in_workspace, settings)
    server: DevServer | None = None
    codec: CodecServer | None = None
    record = settings.data_dir / DEV_RECORD
    ui_base: str | None = None
    db_text = "(the existing server's own)"
    codec_text = ""
    if keys is None and codec_port is not None:
        console.print(
            f"[yellow]--codec-port {codec_port} is not used: no SUBAGENTS_PAYLOAD_KEY is set, "
            "so payloads are plain and need no codec server.[/]"
        )
    try:
        if await server_answers(address, namespace):
            console.print(f"[yellow]A Temporal server already answers on {address}; using it.[/]")
            admin = await Client.connect(address, namespace=namespace)
            await ensure_search_attributes(admin, namespace)
            if retention is not None:
                await set_retention(admin, namespace, retention)
            running = read_dev_record(record, port)
            if running is not None:
                ui_base, db_text = f"http://127.0.0.1:{running['ui_port']}", str(running["db"])
                if running["ui_port"] != ui_port:
                    console.print(
                        f"[yellow]--ui-port {ui_port} is not used: the server already running "
                        f"serves its Web UI on port {running['ui_port']}.[/]"
                    )
            if keys is not None:
                ui_ports = [running["ui_port"]] if running else [ui_port, port + 1000]
                codec = _start_codec(keys, codec_port, ui_ports)
                codec_text = _reused_server_codec_text(codec, running)
        else:
            if keys is not None:
                codec = _start_codec(keys, codec_port, [ui_port])
                codec_text = (
                    f"  Codec server: {codec.endpoint} (the Web UI decrypts tasks through it; so "
                    f"does temporal workflow show --codec-endpoint {codec.endpoint} -w ID)\n"
                )
            db = db or settings.data_dir / "temporal.db"
            server = DevServer(
                port=port,
                ui_port=ui_port,
                db=db,
                namespace=namespace,
                retention=retention,
                codec_endpoint=codec.endpoint if codec else None,
            )
            with console.status("Starting the Temporal dev server..."):
                await server.start()
            ui_base, db_text = server.ui_url, str(server.db)
            write_dev_record(
                record,
                port=port,
                ui_port=ui_port,
                db=server.db,
                codec_endpoint=codec.endpoint if codec else None,
            )
        ui_url = ui_base or (
            "the running server's own (it was not started by subagents dev; "
            "`temporal server start-dev` serves it on the gRPC port + 1000 by default)"
        )
        try:
            client = await connect_client(
                address, namespace, tracing=setup_tracing(settings), keys=keys
            )
            worker = create_worker(client, settings)
            sweeper = asyncio.create_task(sweep_forever(client, settings.blob_store()))
            paused = _search_attributes.tasks_query(status="paused")
            paused_url = (
                _search_attributes.web_ui_tasks_url(ui_base, namespace, paused)
                if ui_base
                else f"the Web UI's workflow list, query {paused}"
            )
            async with _serving(worker, server) as runner:
                collect_less(settings.gc_threshold)
                versioning = await _versioning_text(
                    client,
                    version,
                    address=address,
                    namespace=namespace,
                    queue=worker.task_queue,
                    owns_server=server is not None,
                )
                console.print(
                    f"[bold green]subagents dev[/] is ready\n  gRPC address: {address}\n"
                    f"  Web UI:       {ui_url}\n{escape(codec_text)}"
                    f"  Paused tasks: {paused_url}\n  Database:     {db_text}\n"
                    f"  Namespace:    {namespace}\n  Task queue:   {worker.task_queue}\n"
                    f"  Workspace:    {escape(str(settings.resolved_workspace))} (the root the "
                    "file tools and commands are jailed to: what a general task may edit)",
                    soft_wrap=True,  # addresses and commands stay whole, to be copied
                )
                # one command per line, unwrapped, ready to copy
                console.print(versioning, markup=False, highlight=False, soft_wrap=True)
                console.print("Ctrl-C to stop.")
                with contextlib.suppress(asyncio.CancelledError):
                    code = await _until_stopped(runner, server)
                    if code is not None:
                        assert server is not None
                        raise ServerExited(
                            f"the Temporal dev server on {address} exited "
                            f"({server.exit_text(code)}), so subagents dev stopped its worker. "
                            f"The tasks are kept in {server.db}: run subagents dev again to "
                            f"go on with them (server log: {server.log_path})"
                        )
            sweeper.cancel()
        finally:
            if server is not None:
                with contextlib.suppress(OSError):
                    record.unlink()
                await server.stop()
    finally:
        if codec is not None:
            await asyncio.to_thread(codec.stop)
    console.print("Stopped.")


class ServerExited(SubagentError):
    """The dev server that ``subagents dev`` started exited while it ran."""


_LOST_SERVER_GRACE = 1.0
"""Seconds a worker whose server is gone gets to shut down: with no server to tell,
its graceful shutdown only retries (about 20 s)."""


@contextlib.asynccontextmanager
async def _serving(worker: Worker, server: DevServer | None) -> AsyncIterator[asyncio.Task[None]]:
    """Run ``worker`` for the block; the task running it.

    As ``async with worker``, with one difference: when the dev server this process
    started is gone, the worker's shutdown is cut short.
    """
    runner = asyncio.create_task(worker.run())
    try:
        yield runner
    finally:
        stopping = asyncio.ensure_future(worker.shutdown())
        gone = server is not None and server.returncode is not None
        if gone:
            # Every line core logs from now on says it cannot reach the server.
            logging.getLogger("temporalio.core").addFilter(lambda _: False)
        done, _ = await asyncio.wait({runner}, timeout=_LOST_SERVER_GRACE if gone else None)
        if not done:
            runner.cancel()
            stopping.cancel()
        elif not runner.cancelled() and runner.exception() is not None:
            raise runner.exception()  # type: ignore[misc]


async def _until_stopped(runner: asyncio.Task[None], server: DevServer | None) -> int | None:
    """Wait until the worker stops on its own (its error is raised) or the server exits.

    Returns:
        The exit code of the dev server this process started, if it exited; a
        cancellation (Ctrl-C, SIGTERM) propagates.
    """
    exited = asyncio.ensure_future(server.exited()) if server is not None else None
    try:
        await asyncio.wait({runner, *([exited] if exited else [])}, return_when="FIRST_COMPLETED")
    finally:
        if exited is not None and not exited.done():
            exited.cancel()
    if exited is not None and exited.done() and not exited.cancelled():
        return exited.result()
    runner.result()  # the worker stopped: its fatal error
    raise SubagentError("the worker stopped")


def _start_codec(keys: KeyRing, port: int | None, ui_ports: list[int]) -> CodecServer:
    """A codec server for the Web UI on ``ui_ports`` of this machine, started.

    No token: it listens on 127.0.0.1 only and answers no browser page but the dev
    Web UI's, and the UI sends a token only to an https endpoint anyway.
    """
    origins = [origin for ui_port in ui_ports for origin in web_ui_origins(ui_port)]
    codec = CodecServer(keys, host="127.0.0.1", port=port or 0, origins=origins)
    codec.start()
    return codec


def _reused_server_codec_text(codec: CodecServer, running: dict[str, Any] | None) -> str:
    """The banner's codec lines when the server was already running.

    A running server's Web UI keeps the codec endpoint it was started with, so it may
    use another codec server (a first ``subagents dev``'s) or none.
    """
    text = (
        f"  Codec server: {codec.endpoint} (temporal workflow show --codec-endpoint "
        f"{codec.endpoint} -w ID)\n"
    )
    theirs = running.get("codec_endpoint") if running else None
    if theirs:
        return text + (
            f"                the Web UI decrypts through {theirs}, the codec server of the "
            "subagents dev that started the Temporal server\n"
        )
    return text + (
        "                the Temporal server already running was not started with it, so "
        "its Web UI shows payloads encrypted: enter this endpoint in the Web UI's Codec "
        "Server setting (kept by that browser), or stop that server and run subagents dev "
        "again\n"
    )


async def _versioning_text(
    client: Client,
    version: WorkerDeploymentVersion | None,
    *,
    address: str,
    namespace: str,
    queue: str,
    owns_server: bool,
) -> str:
    """The dev worker's version and how to upgrade from it.

    A deployment with no current version sends new tasks to unversioned workers only,
    so the dev worker's version is made current then; another current version is left
    as it is, with the command that would change it.
    """
    from durable_subagents.worker._deployment import (
        current_build_id,
        make_current,
        set_current_command,
        upgrade_steps,
    )

    if version is None:
        return (
            "  Versioning:   off (--deployment-name and --build-id run a versioned worker "
            "for upgrades that leave running tasks on their code)"
        )
    current = await current_build_id(client, version.deployment_name, registered=version.build_id)
    if current is None:
        await make_current(client, version)
        state = "current (made current: the deployment had no current version)"
    elif current == version.build_id:
        state = "current"
    else:
        state = (
            f"not current: new tasks go to build {current}; to make this one current:\n"
            f"    {set_current_command(version, address, namespace)}"
        )
    lines = [
        f"  Deployment:   {version.deployment_name}, build ID {version.build_id}, {state}",
        "Upgrade to new code without disturbing running tasks:",
    ]
    for number, (what, command) in enumerate(
        upgrade_steps(version, address, namespace, queue), start=1
    ):
        lines.append(f"  {number}. {what}")
        if command:
            lines.append(f"     {command}")
    if owns_server:
        lines[-1] += " (This process runs one; stopping it also stops the dev server.)"
    return "\n".join(lines)


DEV_RECORD = "dev-server.json"
"""In the data directory: the server ``subagents dev`` runs, for a second one to find."""


def write_dev_record(
    path: Path, *, port: int, ui_port: int, db: Path, codec_endpoint: str | None = None
) -> None:
    """Note the server this process started, for another ``subagents dev`` to find.

    A second ``subagents dev`` (or the demo) on the same port then says where the Web UI
    of the running server is, rather than the port it was asked for, and which codec
    server that UI decrypts through.
    """
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"port": port, "ui_port": ui_port, "db": str(db), "pid": os.getpid()}
        if codec_endpoint:
            data["codec_endpoint"] = codec_endpoint
        path.write_text(json.dumps(data))


def read_dev_record(path: Path, port: int) -> dict[str, Any] | None:
    """The running server's record if it is the one on ``port`` and its owner lives."""
    try:
        data = json.loads(path.read_text())
        owner, recorded, ui_port = int(data["pid"]), int(data["port"]), int(data["ui_port"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if recorded != port or not _alive(owner):
        return None
    found = {"port": recorded, "ui_port": ui_port, "db": str(data.get("db", ""))}
    if isinstance(data.get("codec_endpoint"), str):
        found["codec_endpoint"] = data["codec_endpoint"]
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
