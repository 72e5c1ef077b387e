"""A worker's operations endpoint: ``/metrics``, ``/healthz`` and ``/readyz``.

``subagents worker --metrics-port P`` serves, on one port:

* ``/metrics``: Prometheus text from the Temporal runtime's own exporter, which the
  worker binds to a loopback port and this endpoint reads: Temporal's SDK metrics
  (slots, schedule-to-start and poll latencies...) and the product's
  (``durable_subagents.telemetry._metrics``), which are recorded on the same runtime.
* ``/healthz``: 200 while the process serves requests.
* ``/readyz``: 200 when the worker is connected to Temporal, Temporal sees it polling
  its queue, and its blob store answered a write and a read back; else 503 with the
  reason in one line. A draining worker is not ready.

With OpenTelemetry configured (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``), the runtime sends the same metrics over OTLP
instead (a runtime has one metrics exporter), and ``/metrics`` says where they went.

``subagents worker --check`` runs the readiness checks once, for exec probes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    CountWorkflowExecutionsRequest,
    DescribeTaskQueueRequest,
)
from temporalio.client import Client
from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    OpenTelemetryConfig,
    PrometheusConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)
from temporalio.service import RPCError

from durable_subagents.config import Settings
from durable_subagents.errors import SubagentError
from durable_subagents.storage._blobstore import BlobStore, check_blob_store
from durable_subagents.telemetry import _metrics
from durable_subagents.wire._payloads import tool_queue

if TYPE_CHECKING:
    from aiohttp import ClientSession, web

__all__ = ["OpsServer", "Readiness", "TelemetryRuntime", "telemetry_runtime"]

log = logging.getLogger(__name__)

POLLER_SEEN_WITHIN = timedelta(seconds=120)
"""How recently Temporal must have seen the worker poll (a long poll lasts ~60 s)."""
STORE_CHECK_EVERY = 30.0
"""Seconds a passed blob-store probe counts for; a failed one is tried again each time."""
PAUSED_EVERY = 10.0
"""Seconds the paused-tasks gauge is kept before Temporal's visibility is asked again."""
RPC_TIMEOUT = timedelta(seconds=3)


@dataclass(frozen=True)
class TelemetryRuntime:
    """The worker's Temporal runtime and where it sends metrics.

    Attributes:
        runtime: Give it to ``Client.connect(runtime=...)``.
        prometheus: The loopback ``host:port`` of its Prometheus exporter, or None.
        otlp: The OTLP URL it pushes metrics to, or None.
    """

    runtime: Runtime
    prometheus: str | None = None
    otlp: str | None = None


def telemetry_runtime(
    settings: Settings, env: Mapping[str, str] | None = None
) -> TelemetryRuntime | None:
    """A runtime that exports metrics, or None when nothing asks for them.

    OTLP when OpenTelemetry is configured (and ``SUBAGENTS_OTEL`` is not 0), else
    Prometheus when the settings give a metrics port.
    """
    env = os.environ if env is None else env
    logging_config = LoggingConfig(
        filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
        forwarding=LogForwardingConfig(logger=logging.getLogger("temporalio.core")),
    )
    otlp = _otlp_metrics(settings, env)
    if otlp is not None:
        url, http, headers, every = otlp
        metrics: OpenTelemetryConfig | PrometheusConfig = OpenTelemetryConfig(
            url=url,
            http=http,
            headers=headers,
            metric_periodicity=every,
            durations_as_seconds=True,
            histogram_bucket_overrides=_metrics.HISTOGRAM_BUCKETS,
        )
        prometheus = None
    elif settings.metrics_port is not None:
        prometheus = f"127.0.0.1:{_free_port()}"
        metrics = PrometheusConfig(
            bind_address=prometheus,
            durations_as_seconds=True,
            histogram_bucket_overrides=_metrics.HISTOGRAM_BUCKETS,
        )
        url = None
    else:
        return None
    runtime = Runtime(telemetry=TelemetryConfig(logging=logging_config, metrics=metrics))
    return TelemetryRuntime(runtime, prometheus=prometheus, otlp=url)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _otlp_metrics(
    settings: Settings, env: Mapping[str, str]
) -> tuple[str, bool, dict[str, str], timedelta] | None:
    """OTLP metrics as the standard ``OTEL_*`` variables configure them, or None."""
    if settings.otel is False:
        return None
    endpoint = env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
    general = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not (endpoint or general or settings.otel):
        return None
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    http = protocol != "grpc"
    if not endpoint:
        base = general or ("http://localhost:4318" if http else "http://localhost:4317")
        endpoint = base.rstrip("/") + "/v1/metrics" if http else base
    raw = env.get("OTEL_EXPORTER_OTLP_METRICS_HEADERS") or env.get("OTEL_EXPORTER_OTLP_HEADERS")
    headers = {}
    for pair in (raw or "").split(","):
        key, sep, value = pair.partition("=")
        if sep and key.strip():
            headers[key.strip()] = value.strip()
    try:
        every = float(env.get("OTEL_METRIC_EXPORT_INTERVAL") or 10_000) / 1000
    except ValueError:
        every = 10.0
    return endpoint, http, headers, timedelta(seconds=max(every, 0.1))


@dataclass
class Readiness:
    """Whether a worker is ready: Temporal answers and sees it poll; the store works.

    Args:
        client: The worker's client.
        store: The worker's blob store.
        queue: The queue whose pollers prove the worker polls.
        workflows: Whether that queue's workflow pollers count (else its activity ones).
        identity: The worker's identity (exact), or ``@host`` for any worker of this
            host (``subagents worker --check``).
    """

    client: Client
    store: BlobStore
    queue: str
    workflows: bool
    identity: str
    draining: bool = False
    _store_ok_at: float = field(default=-1e9, repr=False)

    @classmethod
    def of(cls, client: Client, settings: Settings, identity: str) -> Readiness:
        """The checks for a worker of ``settings`` (its role decides the queue)."""
        tools = settings.worker_role == "tools"
        queue = tool_queue(settings.task_queue) if tools else settings.task_queue
        return cls(client, settings.blob_store(), queue, not tools, identity)

    async def check(self) -> str | None:
        """None when ready, else why not, in one line."""
        if self.draining:
            return "draining: the worker is shutting down and takes no new work"
        kind = TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW
        if not self.workflows:
            kind = TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
        try:
            described = await self.client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=self.client.namespace,
                    task_queue=TaskQueue(
                        name=self.queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL
                    ),
                    task_queue_type=kind,
                ),
                timeout=RPC_TIMEOUT,
            )
        except RPCError as err:
            return f"cannot reach Temporal at {self._address()}: {err.message or err.status.name}"
        except (RuntimeError, TimeoutError) as err:
            return f"cannot reach Temporal at {self._address()}: {err}"
        recent = datetime.now(UTC) - POLLER_SEEN_WITHIN
        host = self.identity.startswith("@")
        ours = [
            p
            for p in described.pollers
            if (p.identity.endswith(self.identity) if host else p.identity == self.identity)
            and p.last_access_time.ToDatetime(tzinfo=UTC) > recent
        ]
        if not ours:
            who = "a worker of this host" if host else "this worker"
            return (
                f"Temporal does not see {who} polling task queue {self.queue!r} "
                f"(namespace {self.client.namespace!r}) in the last "
                f"{POLLER_SEEN_WITHIN.total_seconds():.0f} s"
            )
        if time.monotonic() - self._store_ok_at > STORE_CHECK_EVERY:
            try:
                await asyncio.wait_for(
                    check_blob_store(self.store, f"probe-{socket.gethostname()}"),
                    RPC_TIMEOUT.total_seconds() * 3,
                )
            except SubagentError as err:
                return str(err)
            except TimeoutError:
                return f"the blob store {self.store.url} did not answer within 9 s"
            self._store_ok_at = time.monotonic()
        return None

    def _address(self) -> str:
        return self.client.service_client.config.target_host


class OpsServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on one port (see the module's doc).

    Args:
        readiness: The checks ``/readyz`` runs.
        telemetry: Where the runtime sends metrics (None: no metrics).
        task_queue: The queue whose paused tasks the ``subagents_tasks_paused`` gauge
            counts.
        host: Address to listen on.
        port: Port to listen on (0: a free one, see ``port`` once started).
    """

    def __init__(
        self,
        readiness: Readiness,
        telemetry: TelemetryRuntime | None,
        task_queue: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.readiness = readiness
        self.telemetry = telemetry
        self.task_queue = task_queue
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None
        self._paused_at = -1e9
        self._paused_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Listen. Raises ``SubagentError`` if the port is taken."""
        # aiohttp's server is imported only by a worker that serves these endpoints.
        from aiohttp import web

        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except OSError as err:
            await self._runner.cleanup()
            raise SubagentError(
                f"cannot serve metrics and health on {self.host}:{self.port}: {err.strerror}; "
                "choose another --metrics-port (SUBAGENTS_METRICS_PORT)"
            ) from None
        if self._runner.addresses:
            self.port = int(self._runner.addresses[0][1])
        if self.telemetry is not None and self.telemetry.otlp is not None:
            self._paused_task = asyncio.create_task(self._paused_forever())

    async def stop(self) -> None:
        """Stop listening."""
        if self._paused_task is not None:
            self._paused_task.cancel()
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _healthz(self, _request: web.Request) -> web.Response:
        from aiohttp import web

        return web.Response(text="ok\n")

    async def _readyz(self, _request: web.Request) -> web.Response:
        from aiohttp import web

        why = await self.readiness.check()
        if why is None:
            return web.Response(text="ready\n")
        return web.Response(status=503, text=f"not ready: {why}\n")

    async def _metrics(self, _request: web.Request) -> web.Response:
        from aiohttp import ClientError, ClientSession, ClientTimeout, web

        telemetry = self.telemetry
        if telemetry is None or telemetry.prometheus is None:
            where = f"over OTLP to {telemetry.otlp}" if telemetry and telemetry.otlp else "nowhere"
            return web.Response(status=404, text=f"metrics go {where}\n")
        await self._refresh_paused()
        if self._session is None:
            self._session = ClientSession(timeout=ClientTimeout(total=5))
        try:
            async with self._session.get(f"http://{telemetry.prometheus}/metrics") as response:
                body = await response.read()
        except (ClientError, TimeoutError) as err:
            return web.Response(status=503, text=f"the metrics exporter did not answer: {err}\n")
        return web.Response(body=body, content_type="text/plain", charset="utf-8")

    async def _refresh_paused(self) -> None:
        """Set the paused-tasks gauge from Temporal's visibility, at most every 10 s."""
        if time.monotonic() - self._paused_at < PAUSED_EVERY:
            return
        self._paused_at = time.monotonic()
        client = self.readiness.client
        query = (
            f'TaskQueue = "{self.task_queue}" AND ExecutionStatus = "Running" '
            'AND SubagentStatus = "paused"'
        )
        try:
            counted = await client.workflow_service.count_workflow_executions(
                CountWorkflowExecutionsRequest(namespace=client.namespace, query=query),
                timeout=RPC_TIMEOUT,
            )
        except (RPCError, RuntimeError, TimeoutError) as err:
            log.debug("could not count paused tasks: %s", err)
            return
        meter = client.service_client.config.runtime or Runtime.default()
        _metrics.set_tasks_paused(meter.metric_meter, self.task_queue, counted.count)

    async def _paused_forever(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self._refresh_paused()
            await asyncio.sleep(PAUSED_EVERY)
