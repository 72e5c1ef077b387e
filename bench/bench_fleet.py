"""Several worker processes on one task queue: the measured anchor of docs/deployment.md's
"Sizing a fleet" section.

Run: ``.venv/bin/python bench/bench_fleet.py [--workers 1,2,4] [--no-eager 4] [--tasks 300]``

It reuses ``bench_scale.py``'s pieces: its own Temporal dev server (SQLite in a temporary
directory, WAL), the local OpenAI-compatible model server in a process of its own
(``--model-latency`` seconds per request, one ``read_file`` call per turn for ``--turns``
turns, then a final answer), and worker processes built with ``create_worker``. For each
worker count it starts that many worker processes on one fresh task queue, spawns
``--tasks`` subagent tasks at once, waits for all of them and measures:

- throughput (model turns, activity tasks and workflow tasks per second) and the latency
  a turn adds on top of the model call, from the tasks' histories;
- what the fleet asks of Temporal per model turn: history events, workflow tasks,
  activity tasks, and the server's own request counters (frontend RPCs by operation,
  persistence operations) from its Prometheus endpoint;
- what it asks of the blob store per model turn: every ``put*``/``get*`` call of the
  workers' store, counted by a wrapper around ``Settings.blob_store()`` in each worker
  process (sync or coroutine methods alike);
- schedule-to-start of workflow tasks (sticky and shared queue) and activities, which
  shows pollers or partitions starving;
- CPU seconds of every worker, the server, the model server and the driver; the
  workers' peak RSS.

``--no-eager N`` adds runs with N workers and eager activity execution off: every model
turn then goes through the shared task queue and lands on any worker, which is how the
blob store's reads (transcript cache misses) show up.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import logging
import os
import re
import signal
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_core import percentile
from bench_scale import (
    AGENT,
    CPU_COLUMNS,
    MODEL,
    WAL_PRAGMAS,
    Bench,
    BenchServer,
    Child,
    Run,
    WorkerLimits,
    _ms,
    _right_answer,
    bounded,
    cpu_seconds,
    log_kinds,
    machine_cpu_seconds,
    machine_facts,
    model_stats,
    own_cpu_seconds,
    peak_rss_mb,
    print_table,
    tally,
    warm_up,
    watch,
)
from temporalio.api.enums.v1 import EventType, TaskQueueKind
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from durable_subagents import SubagentClient, connect_client
from durable_subagents.config import Settings
from durable_subagents.storage._blobstore import blob_ref
from durable_subagents.storage._local import LocalBlobStore
from durable_subagents.testing import free_port
from durable_subagents.types import TaskResult

# Its workers run the scripted model and any model of the local fake servers: a worker
# runs only the models its settings allow.
os.environ.setdefault("SUBAGENTS_ALLOW_SCRIPTED", "true")
os.environ.setdefault("SUBAGENTS_MODELS", "*")

# ---------------------------------------------------------------------- blob store counting


class CountingStore:
    """A blob store that counts every ``put*`` and ``get*`` call it passes on.

    Generic on purpose: the wrapped store's methods may be plain or coroutine functions
    (or plain functions returning awaitables); each call counts once, as one request to
    the store, with its bytes (the data written, the data read). A ``get*`` that returns
    None (a record that is not there) or raises is counted under its own key too.
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {"calls": dict(self.calls), "bytes": dict(self.bytes)}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or not name.startswith(("put", "get")):
            return attr
        if inspect.iscoroutinefunction(attr):

            async def counted_async(*args: Any, **kwargs: Any) -> Any:
                self._call(name, args, kwargs)
                try:
                    result = await attr(*args, **kwargs)
                except BaseException:
                    self.calls[f"{name} (raised)"] += 1
                    raise
                return self._result(name, result)

            return counted_async

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._call(name, args, kwargs)
            try:
                result = attr(*args, **kwargs)
            except BaseException:
                self.calls[f"{name} (raised)"] += 1
                raise
            if inspect.isawaitable(result):
                return self._awaited(name, result)
            return self._result(name, result)

        return counted

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.calls[name] += 1
        if name in ("get", "put") and self._in_cache(name, args, kwargs):
            self.calls[f"{name} (cache hit)"] += 1
        if name.startswith("put"):
            data = kwargs.get("data", args[-1] if args else b"")
            if isinstance(data, bytes | bytearray | memoryview):
                self.bytes[name] += len(data)

    def _in_cache(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether the store's own memory cache holds the blob (no request leaves it).

        A probe of the stores of this repository (``_cache``: a ``BlobCache`` or a dict
        keyed ``<task>/<ref>``); a store without one counts every call as a request.
        """
        cache = getattr(self._inner, "_cache", None)
        if cache is None or not args:
            return False
        task_id = args[0]
        if name == "get":
            ref = args[1] if len(args) > 1 else kwargs.get("ref")
        else:
            data = kwargs.get("data", args[-1])
            ref = blob_ref(bytes(data)) if isinstance(data, bytes | bytearray) else None
        if not isinstance(ref, str):
            return False
        if isinstance(cache, dict):
            return cache.get(f"{task_id}/{ref}") is not None
        probe = getattr(cache, "get", None)
        return probe is not None and probe(task_id, ref) is not None

    async def _awaited(self, name: str, awaitable: Any) -> Any:
        try:
            result = await awaitable
        except BaseException:
            self.calls[f"{name} (raised)"] += 1
            raise
        return self._result(name, result)

    def _result(self, name: str, result: Any) -> Any:
        if name.startswith("get"):
            if result is None:
                self.calls[f"{name} (none)"] += 1
            elif isinstance(result, bytes | bytearray):
                self.bytes[name] += len(result)
        return result


_COUNTING: CountingStore | None = None


class CountingSettings(Settings):
    """Settings whose blob store is wrapped in one ``CountingStore`` per process."""

    def blob_store(self) -> Any:
        global _COUNTING
        if _COUNTING is None:
            _COUNTING = CountingStore(super().blob_store())
        return _COUNTING


def requests(calls: Counter[str], verb: str) -> int:
    """Calls of the store's ``<verb>*`` methods that left the process (cache hits out)."""
    made = sum(n for k, n in calls.items() if k.startswith(verb) and "(" not in k)
    return made - sum(n for k, n in calls.items() if k.startswith(verb) and "(cache hit)" in k)


# ---------------------------------------------------------------------- worker processes


async def serve_worker(args: argparse.Namespace) -> None:
    """The ``--serve-worker`` process: one subagent worker, until SIGTERM; then it
    writes its blob store counts to the file the spec names."""
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from durable_subagents.worker import create_worker

    spec = json.loads(args.serve_worker)
    limits = WorkerLimits(**spec["limits"])
    settings = CountingSettings(
        address=spec["address"],
        namespace=spec["namespace"],
        task_queue=spec["queue"],
        data_dir=Path(spec["tmp"]) / "data",
        blob_dir=Path(spec["tmp"]) / "blobs",
        workspace=Path(spec["workspace"]),
    )
    client = await connect_client(spec["address"], spec["namespace"])
    worker = create_worker(
        client,
        settings,
        disable_eager_activity_execution=not spec["eager"],
        **limits.options(),
    )
    store = settings.blob_store()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    async with worker:
        print("ready", flush=True)
        await stop.wait()
    write_counts(spec["counts"], store.snapshot())
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def write_counts(path: str, counts: dict[str, dict[str, int]]) -> None:
    Path(path).write_text(json.dumps(counts))


class FleetChild(Child):
    """A subprocess running this script (``Child`` runs ``bench_scale.py``)."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        super().__init__(argv, log, env)
        self.argv[1] = str(Path(__file__).resolve())


# ---------------------------------------------------------------------- server metrics

_SAMPLE = re.compile(r"^(\w+)\{([^}]*)\}\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')
METRICS = (
    "service_requests",
    "persistence_requests",
    "persistence_latency_sum",
    "persistence_latency_count",
)


def scrape(url: str, namespace: str) -> Counter[tuple[str, str, str]]:
    """The server's request counters for one namespace: (metric, service, operation)."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out: Counter[tuple[str, str, str]] = Counter()
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m or m[1] not in METRICS:
            continue
        labels = dict(_LABEL.findall(m[2]))
        if labels.get("namespace") != namespace:
            continue
        key = (m[1], labels.get("service_name", "?"), labels.get("operation", "?"))
        out[key] += float(m[3])
    return out


DRIVER_OPS = {
    "StartWorkflowExecution",
    "GetWorkflowExecutionHistory",
    "CountWorkflowExecutions",
    "ListWorkflowExecutions",
    "DescribeNamespace",
    "DescribeTaskQueue",
    "GetSystemInfo",
    "PollWorkflowExecutionHistory",
}
"""Frontend operations the driver makes (starts and result waits), not the workers.
(``DescribeWorkflowExecution`` is the workers': a model turn or tool call that waited in
the queue asks whether its task was cancelled before it starts.)"""


# ---------------------------------------------------------------------- histories


@dataclass
class Histories:
    """What the tasks' histories say, summed over the tasks read."""

    tasks: int = 0
    events: int = 0
    bytes: int = 0
    workflow_tasks: int = 0
    sticky_workflow_tasks: int = 0
    activities: int = 0
    local_activities: int = 0
    model_turns: int = 0
    moved_turns: int = 0
    """Model turns that ran on another worker than the task's previous model turn."""
    wft_wait: dict[str, list[float]] = field(default_factory=lambda: {"sticky": [], "shared": []})
    activity_wait: list[float] = field(default_factory=list)
    overhead: list[float] = field(default_factory=list)
    """Per model turn, ms: the time since the previous turn's end (or the start) minus the
    model server's latency: workflow tasks, the tool call, dispatch and the activity's
    own work around the HTTP call."""


async def read_histories(
    temporal: Client, ids: list[str], latency_ms: float, concurrency: int = 20
) -> Histories:
    out = Histories()

    async def one(workflow_id: str) -> list[HistoryEvent]:
        return [e async for e in temporal.get_workflow_handle(workflow_id).fetch_history_events()]

    for events in await bounded(len(ids), concurrency, lambda i: one(ids[i])):
        if isinstance(events, BaseException) or not events:
            continue
        out.tasks += 1
        out.events += len(events)
        out.bytes += sum(e.ByteSize() for e in events)
        scheduled: dict[int, float] = {}
        sticky: dict[int, bool] = {}
        names: dict[int, str] = {}
        previous_end = _ms(events[0])
        previous_worker = ""
        started_by: dict[int, str] = {}
        for e in events:
            kind = e.event_type
            if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
                attrs = e.workflow_task_scheduled_event_attributes
                scheduled[e.event_id] = _ms(e)
                sticky[e.event_id] = attrs.task_queue.kind == TaskQueueKind.TASK_QUEUE_KIND_STICKY
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                sid = e.workflow_task_started_event_attributes.scheduled_event_id
                out.workflow_tasks += 1
                out.sticky_workflow_tasks += sticky[sid]
                queue = "sticky" if sticky[sid] else "shared"
                out.wft_wait[queue].append(_ms(e) - scheduled[sid])
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                scheduled[e.event_id] = _ms(e)
                names[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
                out.activities += 1
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                attrs_s = e.activity_task_started_event_attributes
                out.activity_wait.append(_ms(e) - scheduled[attrs_s.scheduled_event_id])
                started_by[attrs_s.scheduled_event_id] = attrs_s.identity
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                sid = e.activity_task_completed_event_attributes.scheduled_event_id
                if names.get(sid) != "model_turn":
                    continue
                out.model_turns += 1
                out.overhead.append(_ms(e) - previous_end - latency_ms)
                previous_end = _ms(e)
                worker = started_by.get(sid, "")
                if previous_worker and worker != previous_worker:
                    out.moved_turns += 1
                previous_worker = worker
            elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
                out.local_activities += 1
    return out


# ---------------------------------------------------------------------- one run


@dataclass
class FleetRun:
    workers: int
    eager: bool
    run: Run
    worker_cpu: list[float] = field(default_factory=list)
    worker_rss: list[float] = field(default_factory=list)
    server_cpu: float = 0.0
    blob: Counter[str] = field(default_factory=Counter)
    blob_bytes: Counter[str] = field(default_factory=Counter)
    driver_blob: Counter[str] = field(default_factory=Counter)
    metrics: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    histories: Histories = field(default_factory=Histories)

    @property
    def label(self) -> str:
        return f"{self.workers}{'' if self.eager else ' no-eager'}"

    @property
    def turns(self) -> int:
        return self.run.model_turns

    def per_turn(self, value: float) -> float:
        return value / self.turns if self.turns else 0.0

    def per_second(self, value: float) -> float:
        return value / self.run.wall if self.run.wall else 0.0

    def frontend(self, *, workers_only: bool) -> Counter[str]:
        ops: Counter[str] = Counter()
        for (metric, service, op), value in self.metrics.items():
            if metric == "service_requests" and service == "frontend":
                if not workers_only or op not in DRIVER_OPS:
                    ops[op] += int(value)
        return ops

    def service(self, name: str) -> int:
        """RPCs the server's ``name`` service (history, matching) answered."""
        return int(
            sum(
                v
                for (metric, service, _op), v in self.metrics.items()
                if metric == "service_requests" and service == name
            )
        )

    def persistence(self) -> Counter[str]:
        ops: Counter[str] = Counter()
        for (metric, service, op), value in self.metrics.items():
            if metric == "persistence_requests" and service in ("history", "matching"):
                ops[f"{service}: {op}"] += int(value)
        return ops

    def matching_adds(self) -> int:
        """Tasks history handed to matching (AddWorkflowTask, AddActivityTask)."""
        return int(
            sum(
                v
                for (metric, service, op), v in self.metrics.items()
                if metric == "service_requests"
                and service == "matching"
                and op in ("AddWorkflowTask", "AddActivityTask")
            )
        )

    def persistence_latency_ms(self, op: str) -> float:
        total = sum(
            v
            for (m, _s, o), v in self.metrics.items()
            if m == "persistence_latency_sum" and o == op
        )
        count = sum(
            v
            for (m, _s, o), v in self.metrics.items()
            if m == "persistence_latency_count" and o == op
        )
        return total / count * 1000 if count else 0.0


async def run_fleet(bench: Bench, workers: int, eager: bool, metrics_url: str) -> FleetRun:
    """Start ``workers`` worker processes on one fresh queue, run the tasks, measure."""
    args = bench.args
    queue = f"fleet-{workers}{'' if eager else 'x'}-{uuid.uuid4().hex[:8]}"
    run = Run(side="subagents", tasks=args.tasks, turns=args.turns, queue=queue)
    fleet = FleetRun(workers=workers, eager=eager, run=run)
    env = {"OPENAI_BASE_URL": bench.model_url + "/v1", "OPENAI_API_KEY": "sk-bench-fleet"}
    log = bench.tmp / f"worker-{queue}.log"
    counts = [bench.tmp / f"counts-{queue}-{i}.json" for i in range(workers)]

    def child(i: int) -> FleetChild:
        spec = {
            "address": bench.server.address,
            "namespace": bench.server.namespace,
            "queue": queue,
            "tmp": str(bench.tmp),
            "workspace": str(bench.workspace),
            "limits": vars(bench.limits),
            "eager": eager,
            "counts": str(counts[i]),
        }
        return FleetChild(["--serve-worker", json.dumps(spec)], log, env)

    procs = [child(i) for i in range(workers)]
    await asyncio.gather(*(p.start() for p in procs))
    rescuers: list[FleetChild] = []

    async def rescue() -> None:
        counts.append(bench.tmp / f"counts-{queue}-{len(counts)}.json")
        fresh = child(len(counts) - 1)
        rescuers.append(fresh)
        await fresh.start()

    store = CountingStore(LocalBlobStore(bench.tmp / "blobs" / bench.server.namespace))
    sub = SubagentClient(bench.temporal, task_queue=queue, blob_store=store)
    ids = [f"{queue}-{i:05d}" for i in range(args.tasks)]
    try:
        await asyncio.sleep(1.0)  # let every worker's pollers reach the server
        before_stats = await model_stats(bench.model_url)
        before_metrics = scrape(metrics_url, bench.server.namespace)
        pids = {"server": bench.server.pid, "model server": bench.model.pid}
        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        wcpu0 = [cpu_seconds(p.pid) for p in procs]
        driver0 = own_cpu_seconds()
        machine0 = machine_cpu_seconds()

        async def start(i: int) -> None:
            await sub.spawn_task(
                AGENT,
                "Read f.txt and say what it holds.",
                model=MODEL,
                max_turns=args.turns + 1,
                task_id=ids[i],
            )

        done = [0]

        async def wait(i: int) -> Any:
            try:
                handle = bench.temporal.get_workflow_handle(ids[i], result_type=TaskResult)
                return await handle.result()
            finally:
                done[0] += 1

        started = time.perf_counter()
        failures = [r for r in await bounded(args.tasks, args.start_concurrency, start) if r]
        run.spawn_seconds = time.perf_counter() - started
        for err in failures[:5]:
            print(f"  start failed: {err!r}", flush=True)
        waits = asyncio.ensure_future(bounded(args.tasks, args.waiters, wait))
        results = await watch(bench, run, procs[0], waits, done, rescue)
        fleet.worker_cpu = [cpu_seconds(p.pid) - c for p, c in zip(procs, wcpu0, strict=True)]
        fleet.worker_rss = [peak_rss_mb(p.pid) for p in procs]
        run.cpu = {name: cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
        run.cpu["worker"] = sum(fleet.worker_cpu)
        run.cpu["driver"] = own_cpu_seconds() - driver0
        run.cpu["others"] = max(machine_cpu_seconds() - machine0 - sum(run.cpu.values()), 0.0)
        after_stats = await model_stats(bench.model_url)
        run.model_requests = after_stats.get("requests", 0) - before_stats.get("requests", 0)
        run.wrong = sum(1 for r in results if not _right_answer(r))
        await asyncio.sleep(2.0)  # the server's metrics reporter flushes every second
        after_metrics = scrape(metrics_url, bench.server.namespace)
        after_metrics.subtract(before_metrics)
        fleet.metrics = +after_metrics
    finally:
        for proc in [*procs, *rescuers]:
            await proc.stop()
        run.log_lines = log_kinds(log)
    for path in counts:
        if path.exists():
            data = json.loads(path.read_text())
            fleet.blob.update(data["calls"])
            fleet.blob_bytes.update(data["bytes"])
    fleet.driver_blob = store.calls
    await tally(bench.temporal, queue, run)
    sample = ids if args.sample <= 0 else ids[:: max(1, len(ids) // args.sample)]
    fleet.histories = await read_histories(bench.temporal, sample, args.model_latency * 1000)
    return fleet


# ---------------------------------------------------------------------- report


def _f(value: float, digits: int = 1) -> str:
    return f"{value:,.{digits}f}"


def _pct(values: list[float], q: float) -> str:
    return _f(percentile(values, q), 0) if values else "-"


def report(fleets: list[FleetRun]) -> None:
    print("throughput (wall: first start -> last close, server clock):")
    rows = []
    for f in fleets:
        r, h = f.run, f.histories
        scale = f.turns / h.model_turns if h.model_turns else 0.0
        rows.append(
            (
                f.label,
                str(r.tasks),
                str(f.turns),
                _f(r.wall),
                _f(r.turns_per_second),
                _f(r.turns_per_second / f.workers),
                _f(f.per_second(h.activities * scale)),
                _f(f.per_second(h.workflow_tasks * scale)),
                f"{_pct(h.overhead, 0.5)} / {_pct(h.overhead, 0.95)}",
                f"{r.completed} / {r.failed} / {r.lost}",
            )
        )
    print_table(
        (
            "workers",
            "tasks",
            "turns",
            "wall s",
            "turns/s",
            "turns/s/worker",
            "activities/s",
            "wf tasks/s",
            "turn overhead p50/p95 ms",
            "done/failed/lost",
        ),
        rows,
    )

    print()
    print("schedule-to-start from history (ms, p50 / p95), CPU seconds and peak RSS:")
    rows = []
    for f in fleets:
        h, r = f.histories, f.run
        cores = sum(r.cpu.values()) / r.wall if r.wall else 0.0
        rows.append(
            (
                f.label,
                f"{_pct(h.wft_wait['sticky'], 0.5)} / {_pct(h.wft_wait['sticky'], 0.95)}",
                f"{_pct(h.wft_wait['shared'], 0.5)} / {_pct(h.wft_wait['shared'], 0.95)}",
                f"{_pct(h.activity_wait, 0.5)} / {_pct(h.activity_wait, 0.95)}",
                " + ".join(_f(c, 0) for c in f.worker_cpu),
                *(_f(r.cpu.get(k, 0.0), 0) for k in CPU_COLUMNS if k != "worker"),
                _f(cores, 2),
                " / ".join(_f(m, 0) for m in f.worker_rss),
            )
        )
    print_table(
        (
            "workers",
            "wft wait sticky",
            "wft wait shared",
            "activity wait",
            "worker CPU s",
            "server",
            "model srv",
            "driver",
            "others",
            "cores busy",
            "worker peak RSS MB",
        ),
        rows,
    )

    print()
    print("per model turn (counts over the run / model turns):")
    names = [f.label for f in fleets]
    lines: list[tuple[str, ...]] = []

    def line(label: str, values: list[float], digits: int = 2) -> None:
        lines.append((label, *(_f(v, digits) for v in values)))

    def hist(f: FleetRun, value: float) -> float:
        return value / f.histories.model_turns if f.histories.model_turns else 0.0

    line("history events", [hist(f, f.histories.events) for f in fleets])
    line("history bytes", [hist(f, f.histories.bytes) for f in fleets], 0)
    line("workflow tasks", [hist(f, f.histories.workflow_tasks) for f in fleets])
    line(
        "  of them on a sticky queue", [hist(f, f.histories.sticky_workflow_tasks) for f in fleets]
    )
    line("activity tasks", [hist(f, f.histories.activities) for f in fleets])
    line(
        "markers (local tool calls, patches)",
        [hist(f, f.histories.local_activities) for f in fleets],
    )
    line("tasks through matching (Add*Task)", [f.per_turn(f.matching_adds()) for f in fleets])
    line(
        "frontend RPCs, workers",
        [f.per_turn(sum(f.frontend(workers_only=True).values())) for f in fleets],
    )
    line(
        "frontend RPCs, driver",
        [
            f.per_turn(
                sum(f.frontend(workers_only=False).values())
                - sum(f.frontend(workers_only=True).values())
            )
            for f in fleets
        ],
    )
    line("history service RPCs", [f.per_turn(f.service("history")) for f in fleets])
    line("matching service RPCs", [f.per_turn(f.service("matching")) for f in fleets])
    line(
        "persistence ops (history+matching)",
        [f.per_turn(sum(f.persistence().values())) for f in fleets],
    )
    line("blob PUTs (workers)", [f.per_turn(requests(f.blob, "put")) for f in fleets])
    line("blob GETs (workers)", [f.per_turn(requests(f.blob, "get")) for f in fleets])
    line(
        "blob KB written",
        [
            f.per_turn(sum(v for k, v in f.blob_bytes.items() if k.startswith("put")) / 1024)
            for f in fleets
        ],
    )
    line(
        "blob calls (driver)",
        [f.per_turn(sum(v for k, v in f.driver_blob.items() if "(" not in k)) for f in fleets],
    )
    line("model requests", [f.per_turn(f.run.model_requests) for f in fleets])
    line("worker CPU ms", [f.per_turn(sum(f.worker_cpu) * 1000) for f in fleets], 1)
    line("server CPU ms", [f.per_turn(f.run.cpu.get("server", 0.0) * 1000) for f in fleets], 1)
    line(
        "% turns on another worker than the last",
        [100 * hist(f, f.histories.moved_turns) for f in fleets],
        1,
    )
    line(
        "UpdateWorkflowExecution mean ms",
        [f.persistence_latency_ms("UpdateWorkflowExecution") for f in fleets],
    )
    print_table(("measure", *names), lines)

    print()
    print("blob store calls by method, per model turn (workers; driver in brackets):")
    methods = sorted({k for f in fleets for k in (*f.blob, *f.driver_blob)})
    print_table(
        ("method", *names),
        [
            (
                m,
                *(
                    f"{f.per_turn(f.blob[m]):.3f} ({f.per_turn(f.driver_blob[m]):.3f})"
                    for f in fleets
                ),
            )
            for m in methods
        ],
    )

    print()
    print("frontend RPCs by operation, per model turn (* = the driver's):")
    ops = Counter[str]()
    for f in fleets:
        ops.update(f.frontend(workers_only=False))
    print_table(
        ("operation", *names),
        [
            (
                ("* " if op in DRIVER_OPS else "") + op,
                *(f"{f.per_turn(f.frontend(workers_only=False)[op]):.3f}" for f in fleets),
            )
            for op, _ in ops.most_common()
        ],
    )

    print()
    print("persistence operations, per model turn (top 12):")
    pops = Counter[str]()
    for f in fleets:
        pops.update(f.persistence())
    print_table(
        ("operation", *names),
        [
            (op, *(f"{f.per_turn(f.persistence()[op]):.3f}" for f in fleets))
            for op, _ in pops.most_common(12)
        ],
    )
    for f in fleets:
        for kind, count in f.run.log_lines.most_common(5):
            print(f"{f.label} worker log: {count} x {kind}")
        if f.run.stall:
            print(f"{f.label}: {f.run.stall}")
        if f.run.wrong:
            print(f"{f.label}: {f.run.wrong} tasks ended without the expected answer")


# ---------------------------------------------------------------------- main


async def main(args: argparse.Namespace) -> int:
    limits = WorkerLimits(
        activities=args.max_activities,
        workflow_tasks=args.max_workflow_tasks,
        cached=args.max_cached,
        workflow_pollers=args.workflow_pollers,
        activity_pollers=args.activity_pollers,
    )
    plan = [(w, True) for w in args.workers] + [(w, False) for w in args.no_eager]
    for fact in machine_facts():
        print(fact)
    runs = ", ".join(f"{w}" if e else f"{w} no-eager" for w, e in plan)
    print(
        f"settings    tasks={args.tasks} turns={args.turns} model_latency={args.model_latency}s "
        f"file={args.file_kb} KB runs={runs}"
    )
    print(f"sqlite      {' '.join(WAL_PRAGMAS)}")
    print(f"worker      {limits.describe()} (each worker)")
    print()
    fleets: list[FleetRun] = []
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp_name:
        tmp = Path(tmp_name)
        workspace = tmp / "ws"
        workspace.mkdir()
        body = b"x\n" if args.file_kb <= 0 else (b"0123456789abcde\n" * (64 * args.file_kb))
        (workspace / "f.txt").write_bytes(body)
        server = BenchServer(
            port=free_port(),
            ui_port=free_port(),
            db=tmp / "temporal.db",
            ui=False,
            pragmas=list(WAL_PRAGMAS),
        )
        serve = ["--serve-model", "--model-latency", str(args.model_latency)]
        model = Child([*serve, "--turns", str(args.turns)], tmp / "model.log")
        await server.start()
        metrics_url = f"http://127.0.0.1:{server._metrics_port}/metrics"
        try:
            port = (await model.start()).split()[-1]
            temporal = await connect_client(server.address, server.namespace)
            bench = Bench(
                server=server,
                temporal=temporal,
                model=model,
                model_url=f"http://127.0.0.1:{port}",
                tmp=tmp,
                workspace=workspace,
                args=args,
                limits=limits,
            )
            await warm_up(temporal)
            for workers, eager in plan:
                fleet = await run_fleet(bench, workers, eager, metrics_url)
                fleets.append(fleet)
                r = fleet.run
                print(
                    f"workers={fleet.label}: {r.wall:.1f}s, {r.turns_per_second:.1f} turns/s, "
                    f"{r.completed}/{r.tasks} completed",
                    flush=True,
                )
        finally:
            await model.stop()
            await server.stop()
    print()
    report(fleets)
    ok = all(f.run.completed == f.run.tasks and not f.run.wrong for f in fleets)
    print()
    print("OK: every task completed" if ok else "FAILED: some tasks did not complete")
    return 0 if ok else 1


def _ints(text: str) -> list[int]:
    return [int(c) for c in text.split(",") if c.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--workers", type=_ints, default=[1, 2, 4], help="worker processes per run (1,2,4)"
    )
    parser.add_argument(
        "--no-eager",
        type=_ints,
        default=[4],
        help="extra runs with this many workers and eager activities off ('' for none)",
    )
    parser.add_argument("--tasks", type=int, default=300, help="concurrent tasks per run")
    parser.add_argument("--turns", type=int, default=5, help="tool-calling turns per task")
    parser.add_argument(
        "--model-latency", type=float, default=0.2, help="seconds the model server waits"
    )
    parser.add_argument(
        "--file-kb",
        type=int,
        default=0,
        help="size of the file each turn reads (0: 2 bytes; over 8 the output goes to the store)",
    )
    parser.add_argument("--max-activities", type=int, default=2000)
    parser.add_argument("--max-workflow-tasks", type=int, default=100)
    parser.add_argument("--max-cached", type=int, default=10000)
    parser.add_argument("--workflow-pollers", type=int, default=10)
    parser.add_argument("--activity-pollers", type=int, default=10)
    parser.add_argument("--start-concurrency", type=int, default=200)
    parser.add_argument("--waiters", type=int, default=500)
    parser.add_argument("--sample", type=int, default=0, help="histories read (0: all)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait per run")
    parser.add_argument("--stall", type=float, default=120.0)
    parser.add_argument("--serve-worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tasks < 1 or args.turns < 1 or not (args.workers or args.no_eager):
        parser.error("--tasks and --turns must be at least 1, and some run must be asked for")
    return args


if __name__ == "__main__":
    parsed = parse_args()
    if parsed.serve_worker:
        asyncio.run(serve_worker(parsed))
    else:
        sys.exit(asyncio.run(main(parsed)))
