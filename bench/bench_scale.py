"""Many concurrent subagents on one worker process, beside bare Temporal.

Run: ``.venv/bin/python bench/bench_scale.py [--counts 1000] [--turns 5] [--model-latency 0.2]``

The curve of the README: ``--counts 10,100,1000,10000``.

It starts its own Temporal dev server (``DevServer``: SQLite file in a temporary
directory, the low-latency dynamic config), a local OpenAI-compatible model server in a
process of its own (it answers each request after ``--model-latency`` seconds, from the
request: one ``read_file`` call while the conversation has fewer than ``--turns`` tool
results, then a final text; streamed as SSE), and, for each count and side, a fresh
worker process with the same limits (concurrent activities and workflow tasks, sticky
cache, pollers):

- **subagents**: ``create_worker`` with ``OPENAI_BASE_URL`` pointing at the model
  server; ``SubagentClient.spawn_task("explore", ..., model="openai:...")`` starts N
  tasks at once; each makes ``--turns`` model turns with one ``read_file`` each, then a
  final answer, through the real ``openai`` SDK;
- **bare**: a plain Temporal workflow with the same activity pattern: per turn an
  activity that sleeps ``--model-latency`` seconds (the model call), then a no-op
  activity (the tool call), then a final model activity.

Both sides run on the same server in the same run, one after the other (the order
alternates between counts), so their ratio is comparable on a noisy machine. It waits
for every task (``handle.result()``, or ``check_task(wait=True)`` with ``--wait
check``), counts completed, failed and lost from the server's visibility store, and
prints throughput, the worker's peak RSS and CPU, and where a task's time went. See
``bench/README.md`` for what each column means.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import os
import platform
import re
import resource
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

from aiohttp import web
from bench_core import code_commit, cpu_model, server_version
from peers.scale_bare import (
    BareAgentWorkflow,
    BareScaleWorkflow,
    bare_agent_model,
    bare_agent_read,
    bare_model,
    bare_tool,
    import_openai,
)
from temporalio.api.enums.v1 import EventType, TaskQueueType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import PollerBehaviorSimpleMaximum, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from durable_subagents import SubagentClient, TaskStatus, connect_client
from durable_subagents.agents import resolve_agent
from durable_subagents.config import Settings
from durable_subagents.runtime._event_loop import loop_factory
from durable_subagents.storage._local import LocalBlobStore
from durable_subagents.testing import DevServer, FakeOpenAIServer, FakeReply, free_port
from durable_subagents.types import TaskResult

# Its workers run the scripted model and any model of the local fake servers: a worker
# runs only the models its settings allow.
os.environ.setdefault("SUBAGENTS_ALLOW_SCRIPTED", "true")
os.environ.setdefault("SUBAGENTS_MODELS", "*")

AGENT = "explore"
MODEL = "openai:bench-scale"
FINAL = "done: read f.txt"
"""The final answer every subagent task must end with."""
SIDES = ("subagents", "bare", "sandboxed", "bare-agent", "subagents-asyncio")
"""``subagents`` runs the library's workflows outside Temporal's workflow sandbox
(``subagent_workflow_sandbox=False``), ``sandboxed`` in it (the default of
``create_worker``); ``bare`` is plain Temporal with the same activity pattern and no
work in it (a sleep for the model, a no-op tool); ``bare-agent`` is plain Temporal doing
the same work as a subagent (``BareAgentWorkflow``: the ``openai`` SDK streaming from the
same model server, the file read in the worker's process); ``subagents-asyncio`` is
``subagents`` on asyncio's event loop instead of the one ``SUBAGENTS_EVENT_LOOP`` picks."""
SUBAGENT_SIDES = ("subagents", "sandboxed", "subagents-asyncio")
WAL_PRAGMAS = ("journal_mode=wal", "synchronous=normal")
"""SQLite settings of the dev server: write-ahead log, fsync at checkpoints. With SQLite's
defaults (rollback journal, fsync at every commit) the server's one SQLite connection
is the bottleneck of both sides at a third of the throughput (see bench/README.md)."""


# ---------------------------------------------------------------------- the model server


def tool_results(body: dict[str, Any]) -> int:
    """How many ``role: "tool"`` messages a Chat Completions request carries."""
    return sum(1 for m in body.get("messages", []) if m.get("role") == "tool")


class ScaleModelServer(FakeOpenAIServer):
    """An OpenAI-compatible server that waits, then answers from the request itself.

    Below ``turns`` tool results in the conversation it asks for one ``read_file`` of
    ``f.txt``; then it gives the final text. Any number of tasks (and retries) get their
    own script, with no queue. Only counts are kept (the base class's request records
    are dropped as they come, so memory stays flat over 60,000 requests);
    ``GET /stats`` returns them.
    """

    def __init__(self, *, latency: float, turns: int, port: int = 0) -> None:
        super().__init__(default_text=FINAL)
        self.latency = latency
        self.turns = turns
        self.bind_port = port
        self.counts: Counter[str] = Counter()
        self.in_flight = 0
        self.peak_in_flight = 0

    async def start(self) -> None:
        """Listen with a deep accept backlog (thousands of clients connect at once)."""
        app = web.Application()
        app.router.add_post(self.route, self._handle)
        app.router.add_get("/stats", self._stats)
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.bind_port, backlog=4096)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(
            {**self.counts, "in_flight": self.in_flight, "peak_in_flight": self.peak_in_flight}
        )

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.latency)
            return await super()._handle(request)
        finally:
            self.in_flight -= 1

    def _next_reply(self) -> FakeReply:
        body = self.requests[-1]
        for kept in (self.requests, self.request_headers, self.request_times, self.outcomes):
            kept.clear()
        self.counts["requests"] += 1
        self.counts["streamed" if body.get("stream") else "not streamed"] += 1
        if tool_results(body) < self.turns:
            self.counts["tool turns"] += 1
            return FakeReply(tool_calls=[{"name": "read_file", "arguments": {"path": "f.txt"}}])
        self.counts["final turns"] += 1
        return FakeReply(text=FINAL)


async def serve_model(args: argparse.Namespace) -> None:
    """The ``--serve-model`` process: run the model server until SIGTERM."""
    server = ScaleModelServer(latency=args.model_latency, turns=args.turns)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    print(f"port {server.port}", flush=True)
    await stop.wait()
    await server.close()


# ---------------------------------------------------------------------- worker processes


@dataclass
class WorkerLimits:
    """The worker settings both sides run with."""

    activities: int
    workflow_tasks: int
    cached: int
    workflow_pollers: int
    activity_pollers: int

    def options(self) -> dict[str, Any]:
        """Keyword arguments for ``temporalio.worker.Worker`` (and ``create_worker``)."""
        return {
            "max_concurrent_activities": self.activities,
            "max_concurrent_workflow_tasks": self.workflow_tasks,
            "max_cached_workflows": self.cached,
            "workflow_task_poller_behavior": PollerBehaviorSimpleMaximum(self.workflow_pollers),
            "activity_task_poller_behavior": PollerBehaviorSimpleMaximum(self.activity_pollers),
        }

    def describe(self) -> str:
        return (
            f"max_concurrent_activities={self.activities} "
            f"max_concurrent_workflow_tasks={self.workflow_tasks} "
            f"max_cached_workflows={self.cached} workflow_pollers={self.workflow_pollers} "
            f"activity_pollers={self.activity_pollers}"
        )


async def serve_worker(args: argparse.Namespace) -> None:
    """The ``--serve-worker`` process: one side's worker, until SIGTERM."""
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    spec = json.loads(args.serve_worker)
    limits = WorkerLimits(**spec["limits"])
    worker: Worker
    if spec["side"] in SUBAGENT_SIDES:
        from durable_subagents.providers import import_sdk
        from durable_subagents.worker import create_worker

        settings = Settings(
            address=spec["address"],
            namespace=spec["namespace"],
            task_queue=spec["queue"],
            data_dir=Path(spec["tmp"]) / "data",
            blob_dir=Path(spec["tmp"]) / "blobs",
            workspace=Path(spec["workspace"]),
            model=MODEL,
        )
        # As `subagents worker` does while it starts: its default model's SDK is loaded
        # before it polls, not in the measured run's first turn.
        import_sdk(settings.model)
        client = await connect_client(spec["address"], spec["namespace"])
        worker = create_worker(
            client,
            settings,
            subagent_workflow_sandbox=spec["side"] == "sandboxed",
            **limits.options(),
        )
    else:
        if spec["side"] == "bare-agent":
            import_openai()  # as an agent module that imports its SDK at the top would
        client = await Client.connect(spec["address"], namespace=spec["namespace"])
        # This module is deterministic at import, like the library the other side passes
        # through: neither side re-imports its workflow's module for every run.
        runner = SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(
                BareScaleWorkflow.__module__, "durable_subagents", "pydantic", "pydantic_core"
            )
        )
        worker = Worker(
            client,
            task_queue=spec["queue"],
            workflows=[BareScaleWorkflow, BareAgentWorkflow],
            activities=[bare_model, bare_tool, bare_agent_model, bare_agent_read],
            workflow_runner=runner,
            graceful_shutdown_timeout=timedelta(seconds=5),
            # as create_worker sets it from Settings (the SDK's default is 10 s)
            sticky_queue_schedule_to_start_timeout=timedelta(
                seconds=Settings.model_fields["sticky_queue_timeout"].default
            ),
            **limits.options(),
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    async with worker:
        if spec["side"] in SUBAGENT_SIDES:
            # As `subagents worker` does once it polls (SUBAGENTS_GC_THRESHOLD).
            from durable_subagents.worker import collect_less

            collect_less(Settings().gc_threshold)
        print("ready", flush=True)
        await stop.wait()
    # Exit at once: interpreter finalization can abort while the Temporal runtime's
    # threads wind down (see durable_subagents.worker.exit_if_tool_calls_stuck).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class Child:
    """A subprocess running this script in one of its serving modes."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.argv = [sys.executable, str(Path(__file__).resolve()), *argv]
        self.log = log
        self.env = {**os.environ, **(env or {})}
        self.proc: asyncio.subprocess.Process | None = None
        self._drain: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    async def start(self, timeout: float = 60.0) -> str:
        """Start it; return the first line it prints (it prints once it is ready)."""
        with self.log.open("ab") as err:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv,
                env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
            )
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        except TimeoutError:
            line = b""
        if not line:
            await self.stop()
            tail = self.log.read_text(errors="replace").splitlines()[-30:]
            raise RuntimeError(f"{self.argv[2]} did not start:\n" + "\n".join(tail))
        self._drain = asyncio.create_task(self._copy_stdout())
        return line.decode().strip()

    async def _copy_stdout(self) -> None:
        """Copy what the child prints after its first line into its log.

        Temporal core writes its warnings to stdout: a pipe nobody reads fills after
        64 KB, and the next warning blocks the core thread that writes it, which stops
        the worker's pollers without a word.
        """
        assert self.proc is not None and self.proc.stdout is not None
        stdout = self.proc.stdout
        with self.log.open("ab") as log:
            while chunk := await stdout.read(65536):
                log.write(chunk)
                log.flush()

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL after 15 s."""
        proc, self.proc = self.proc, None
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 15)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        if self._drain is not None:
            await self._drain


class BenchServer(DevServer):
    """``DevServer`` with extra ``--sqlite-pragma`` settings."""

    def __init__(self, *, pragmas: list[str], **options: Any) -> None:
        super().__init__(**options)
        self.pragmas = pragmas

    def command(self) -> list[str]:
        return [*super().command(), *(f"--sqlite-pragma={p}" for p in self.pragmas)]


# ---------------------------------------------------------------------- /proc readings

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of a process (0 if it is gone)."""
    if pid is None:
        return 0.0
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (``VmHWM``) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def machine_cpu_seconds() -> float:
    """CPU seconds every process of the machine used since boot (``/proc/stat``)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / _TICK


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# ---------------------------------------------------------------------- one run


@dataclass
class Run:
    """One side at one count: what finished, how fast, and what it cost."""

    side: str
    tasks: int
    turns: int
    queue: str = ""
    round: int = 0
    """Which of the ``--repeat`` rounds of this count the run belongs to (0 first)."""
    wall: float = 0.0
    """Seconds from the first start request to the last task's close (server clock)."""
    spawn_seconds: float = 0.0
    statuses: Counter[str] = field(default_factory=Counter)
    wrong: int = 0
    """Subagent tasks that completed with another answer than ``FINAL``."""
    rss_mb: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds over the run: worker, server, model server, driver, others."""
    model_requests: int = 0
    phases: dict[str, float] = field(default_factory=dict)
    stall: str = ""
    """What happened when no task finished for ``--stall`` seconds (empty: it never did)."""
    log_lines: Counter[str] = field(default_factory=Counter)
    """Warnings and errors in the worker's log, counted by kind."""
    turn_ms: list[float] = field(default_factory=list)
    """Turn latencies of the sampled tasks (see ``sample_phases``), in ms."""
    persistence: Counter[str] = field(default_factory=Counter)
    """The dev server's persistence requests over the run, by operation."""

    @property
    def completed(self) -> int:
        return self.statuses["COMPLETED"]

    @property
    def failed(self) -> int:
        return sum(n for s, n in self.statuses.items() if s not in ("COMPLETED", "RUNNING"))

    @property
    def lost(self) -> int:
        """Started and not closed by the end of the wait, or never seen by the server."""
        return self.tasks - self.completed - self.failed

    @property
    def model_turns(self) -> int:
        return self.tasks * (self.turns + 1)

    @property
    def turns_per_second(self) -> float:
        return self.model_turns / self.wall if self.wall else 0.0

    @property
    def cpu_ms_per_turn(self) -> float:
        """The worker process's CPU (all its threads) per model turn."""
        return self.cpu_ms_per_turn_of("worker")

    def cpu_ms_per_turn_of(self, *whose: str) -> float:
        """The CPU of the named columns of ``CPU_COLUMNS`` (all of them if none) per turn."""
        names = whose or CPU_COLUMNS
        return 1000 * sum(self.cpu.get(k, 0.0) for k in names) / self.model_turns

    def turn_latency(self, q: float) -> float:
        """The ``q`` quantile (0-1) of the sampled turn latencies, in ms (0: none)."""
        if not self.turn_ms:
            return 0.0
        ordered = sorted(self.turn_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Bench:
    """What every run shares: the server, the clients, the model server, the settings."""

    server: DevServer
    temporal: Client
    model: Child
    model_url: str
    tmp: Path
    workspace: Path
    args: argparse.Namespace
    limits: WorkerLimits


async def model_stats(url: str) -> dict[str, int]:
    from aiohttp import ClientSession

    async with ClientSession() as session, session.get(f"{url}/stats") as resp:
        data: dict[str, int] = await resp.json()
        return data


_PERSISTENCE = re.compile(
    r'^(visibility_)?persistence_requests\{[^}]*operation="([^"]+)"[^}]*\} (\S+)$', re.M
)


async def persistence_requests(url: str) -> Counter[str]:
    """The dev server's persistence requests so far, by operation (its ``/metrics``).

    The visibility store's (the task list's records: starts, upserts of memo and search
    attributes, closes, list queries) are named ``vis.<operation>``.
    """
    from aiohttp import ClientSession

    async with ClientSession() as session, session.get(url) as resp:
        text = await resp.text()
    counts: Counter[str] = Counter()
    for visibility, operation, value in _PERSISTENCE.findall(text):
        counts[f"vis.{operation}" if visibility else operation] += int(float(value))
    return counts


async def bounded(
    count: int, limit: int, call: Callable[[int], Awaitable[Any]]
) -> list[BaseException | Any]:
    """``call(i)`` for every i below ``count``, at most ``limit`` at a time."""
    gate = asyncio.Semaphore(limit)

    async def one(i: int) -> Any:
        async with gate:
            return await call(i)

    return await asyncio.gather(*(one(i) for i in range(count)), return_exceptions=True)


async def run_side(bench: Bench, side: str, tasks: int, round_: int = 0) -> Run:
    """Start a fresh worker for ``side``, run ``tasks`` tasks at once, measure, stop it."""
    args = bench.args
    queue = f"scale-{side}-{tasks}-{uuid.uuid4().hex[:8]}"
    run = Run(side=side, tasks=tasks, turns=args.turns, queue=queue, round=round_)
    spec = {
        "side": side,
        "address": bench.server.address,
        "namespace": bench.server.namespace,
        "queue": queue,
        "tmp": str(bench.tmp),
        "workspace": str(bench.workspace),
        "limits": vars(bench.limits),
    }
    env = {"OPENAI_BASE_URL": bench.model_url + "/v1", "OPENAI_API_KEY": "sk-bench-scale"}
    log = bench.tmp / f"worker-{queue}.log"  # one per run: its warnings are counted
    worker = Child(["--serve-worker", json.dumps(spec)], log, env)
    await worker.start()
    rescuers: list[Child] = []

    async def rescue() -> None:
        fresh = Child(["--serve-worker", json.dumps(spec)], log, env)
        rescuers.append(fresh)
        await fresh.start()

    store = LocalBlobStore(bench.tmp / "blobs" / bench.server.namespace)
    agents = {}
    if args.subagent_tools == "activity":
        explore = resolve_agent(AGENT)
        agents[AGENT] = explore.model_copy(update={"local_read_tools": False})
    sub = SubagentClient(bench.temporal, task_queue=queue, blob_store=store, agents=agents)
    ids = [f"{queue}-{i:05d}" for i in range(tasks)]
    try:
        before_stats = await model_stats(bench.model_url)
        persistence0 = await persistence_requests(bench.server.metrics_url)
        pids = {"worker": worker.pid, "server": bench.server.pid, "model server": bench.model.pid}
        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        driver0 = own_cpu_seconds()
        machine0 = machine_cpu_seconds()

        async def start(i: int) -> None:
            if side in SUBAGENT_SIDES:
                await sub.spawn_task(
                    AGENT,
                    "Read f.txt and say what it holds.",
                    model=MODEL,
                    max_turns=args.turns + 1,
                    task_id=ids[i],
                )
            elif side == "bare-agent":
                await bench.temporal.start_workflow(
                    BareAgentWorkflow.run,
                    args=[
                        "Read f.txt and say what it holds.",
                        str(bench.workspace),
                        args.turns + 1,
                        args.subagent_tools == "turn",  # a local activity, its nearest
                    ],
                    id=ids[i],
                    task_queue=queue,
                )
            else:
                await bench.temporal.start_workflow(
                    BareScaleWorkflow.run,
                    args=[args.turns, args.model_latency, args.bare_tool == "local"],
                    id=ids[i],
                    task_queue=queue,
                )

        done = [0]

        async def wait(i: int) -> Any:
            try:
                if side in SUBAGENT_SIDES and args.wait == "check":
                    return await sub.check_task(ids[i], wait=True, timeout=args.timeout)
                if side in SUBAGENT_SIDES:
                    handle = bench.temporal.get_workflow_handle(ids[i], result_type=TaskResult)
                    return await handle.result()
                return await bench.temporal.get_workflow_handle(ids[i]).result()
            finally:
                done[0] += 1

        started = time.perf_counter()
        failures = [r for r in await bounded(tasks, args.start_concurrency, start) if r]
        run.spawn_seconds = time.perf_counter() - started
        for err in failures[:5]:
            print(f"  start failed: {err!r}", flush=True)
        waits = asyncio.ensure_future(bounded(tasks, args.waiters, wait))
        results = await watch(bench, run, worker, waits, done, rescue)
        run.cpu = {name: cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
        run.cpu["driver"] = own_cpu_seconds() - driver0
        run.cpu["others"] = max(machine_cpu_seconds() - machine0 - sum(run.cpu.values()), 0.0)
        run.rss_mb = peak_rss_mb(worker.pid)
        run.persistence = await persistence_requests(bench.server.metrics_url) - persistence0
        after_stats = await model_stats(bench.model_url)
        run.model_requests = after_stats.get("requests", 0) - before_stats.get("requests", 0)
        if side in SUBAGENT_SIDES:
            run.wrong = sum(1 for r in results if not _right_answer(r))
        elif side == "bare-agent":
            run.wrong = sum(1 for r in results if r != FINAL)
    finally:
        for child in [worker, *rescuers]:
            await child.stop()
        run.log_lines = log_kinds(log)
    await tally(bench.temporal, queue, run)
    run.phases, run.turn_ms = await sample_phases(bench.temporal, ids, args.sample)
    return run


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LEVEL = re.compile(r"\b(WARN|WARNING|ERROR)\b\s*(.*)")
_IDS = re.compile(r"[0-9a-f]{8}-[0-9a-f-]{27,}(:\d+)*|\b\d+\b")


def log_kinds(log: Path) -> Counter[str]:
    """Warning and error lines of a worker log, counted by message (ids and numbers out)."""
    kinds: Counter[str] = Counter()
    if not log.exists():
        return kinds
    for line in log.read_text(errors="replace").splitlines():
        match = _LEVEL.search(_ANSI.sub("", line))
        if match:
            kinds[_IDS.sub("N", f"{match[1]} {match[2]}")[:140]] += 1
    return kinds


async def watch(
    bench: Bench,
    run: Run,
    worker: Child,
    waits: asyncio.Future[Any],
    done: list[int],
    rescue: Callable[[], Awaitable[None]],
) -> list[Any]:
    """Wait for ``waits``; stop early if the worker dies or nothing finishes for a while.

    At the first stall (no task finished for ``--stall`` seconds) it prints what the
    server says about the task queue (pollers and backlog) and starts a second, fresh
    worker: if the tasks then finish, the first worker had stopped taking tasks. At a
    second stall, or if the worker process exits, it gives up (the rest count as lost).
    """
    args = bench.args
    deadline = time.monotonic() + args.timeout
    last, last_change = -1, time.monotonic()
    while not waits.done():
        await asyncio.wait([waits], timeout=5)
        if waits.done():
            break
        now = time.monotonic()
        # the waits go in order, so a slow early task hides later ones: ask the server too
        progress = done[0] + await closed(bench.temporal, run.queue)
        if progress != last:
            last, last_change = progress, now
        why = ""
        if worker.proc is None or worker.proc.returncode is not None:
            why = "the worker process exited"
        elif now - last_change > args.stall:
            why = f"no task finished for {args.stall:g} s"
        elif now > deadline:
            why = f"--timeout {args.timeout:g} s reached"
        if why:
            print(f"  {run.tasks} {run.side}: {why}; {done[0]} of {run.tasks} finished", flush=True)
            for line in await queue_report(bench.temporal, run.queue):
                print(f"  {line}", flush=True)
            if why.startswith("no task") and not run.stall:
                run.stall = f"stalled at {done[0]}/{run.tasks}; a second worker was started"
                print(f"  starting a second worker on {run.queue}", flush=True)
                await rescue()
                last_change = time.monotonic()
                continue
            run.stall = f"{run.stall}; gave up: {why}" if run.stall else f"gave up: {why}"
            waits.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waits
            return []
    return list(waits.result())


async def closed(temporal: Client, queue: str) -> int:
    """How many workflows on ``queue`` have closed (visibility; 0 if it does not answer)."""
    try:
        count = await temporal.count_workflows(
            f'TaskQueue = "{queue}" AND ExecutionStatus != "Running"'
        )
    except Exception:
        return 0
    return count.count


async def queue_report(temporal: Client, queue: str) -> list[str]:
    """Pollers and backlog of both kinds of task on ``queue``, as the server sees them."""
    lines = []
    for kind in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
        try:
            desc = await temporal.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=temporal.namespace,
                    task_queue=TaskQueue(name=queue),
                    task_queue_type=kind,
                    report_stats=True,
                )
            )
        except Exception as err:
            lines.append(f"{TaskQueueType.Name(kind)}: {err!r}")
            continue
        now = datetime.now(UTC)
        polled = ", ".join(
            f"{(now - p.last_access_time.ToDatetime(UTC)).total_seconds():.0f} s ago"
            for p in desc.pollers
        )
        lines.append(
            f"{TaskQueueType.Name(kind)}: pollers last seen [{polled}], backlog "
            f"{desc.stats.approximate_backlog_count} "
            f"(oldest {desc.stats.approximate_backlog_age.ToSeconds()} s)"
        )
    return lines


async def warm_up(temporal: Client) -> None:
    """One spawn and one start on a queue no worker polls, then terminated.

    The first ``spawn_task`` of a process loads what validation needs (about a second);
    that should not count in the first run.
    """
    queue = f"scale-warm-up-{uuid.uuid4().hex[:8]}"
    task_id = await SubagentClient(temporal, task_queue=queue).spawn_task(
        AGENT, "warm up", model=MODEL
    )
    bare = await temporal.start_workflow(
        BareScaleWorkflow.run, args=[1, 0.0], id=f"{queue}-bare", task_queue=queue
    )
    for handle in (temporal.get_workflow_handle(task_id), bare):
        await handle.terminate("warm-up only")


def _right_answer(result: Any) -> bool:
    """A ``TaskResult`` (``handle.result()``) or ``TaskInfo`` (``check_task``) with ``FINAL``."""
    status = getattr(result, "status", None)
    return status == TaskStatus.COMPLETED and getattr(result, "result", None) == FINAL


async def tally(temporal: Client, queue: str, run: Run) -> None:
    """Statuses and first start -> last close of the run's workflows, from visibility."""
    first: datetime | None = None
    last: datetime | None = None
    for _ in range(50):  # visibility catches up with the last closes within moments
        run.statuses.clear()
        first = last = None
        async for wf in temporal.list_workflows(f'TaskQueue = "{queue}"'):
            status = wf.status or WorkflowExecutionStatus.RUNNING
            run.statuses[status.name] += 1
            first = min(first or wf.start_time, wf.start_time)
            if wf.close_time is not None:
                last = max(last or wf.close_time, wf.close_time)
        settled = sum(run.statuses.values()) >= run.tasks and not run.statuses["RUNNING"]
        if settled or "gave up" in run.stall:
            break
        await asyncio.sleep(0.2)
    if first is not None and last is not None:
        run.wall = (last - first).total_seconds()


def _ms(event: HistoryEvent) -> float:
    return event.event_time.ToNanoseconds() / 1e6


BENCH_DYNAMIC_CONFIG = {"system.forceSearchAttributesCacheRefreshOnRead": "false"}
"""The dev server reads the search attributes from its database on every use, so that
new ones show at once; a production server caches them. Cached here as there: the
reads were 2-4 persistence requests per turn (``GetCurrentClusterMetadata``), more on
the sides that use search attributes. ``--dynamic-config`` overrides it."""
CPU_COLUMNS = ("worker", "server", "model server", "driver", "others")
"""Whose CPU time the table shows; ``others``: every other process of the machine (other
benchmarks or tests running at the same time), from ``/proc/stat``."""
PERSISTENCE_COLUMNS = 6
"""Persistence operations shown, the most frequent over all runs first."""

PHASES = (
    "task latency (s)",
    "workflow task wait",
    "workflow task run",
    "model activity wait",
    "model activity run",
    "tool activity wait",
    "tool activity run",
)


async def sample_phases(
    temporal: Client, ids: list[str], sample: int
) -> tuple[dict[str, float], list[float]]:
    """Mean milliseconds per step over ``sample`` tasks spread over the run; turn latencies.

    ``wait`` is scheduled -> started (time in the task queue: too few pollers or slots,
    or a busy worker), ``run`` is started -> completed (the worker's own time, which
    grows when its CPU is saturated). A turn's latency runs from its model activity's
    scheduling to the next one's (the last turn's: to the workflow's completion): the
    model call, the workflow tasks and the tool call between, and every wait.
    """
    if sample <= 0:
        return {}, []
    turn_ms: list[float] = []
    step = max(1, len(ids) // sample)
    totals: dict[str, list[float]] = {
        name: [] for name in (*PHASES, "local activities", "history events", "history KiB")
    }
    for workflow_id in ids[::step][:sample]:
        events = [e async for e in temporal.get_workflow_handle(workflow_id).fetch_history_events()]
        scheduled: dict[int, float] = {}
        started: dict[int, float] = {}
        kinds: dict[int, str] = {}
        for event in events:
            kind = event.event_type
            if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
                scheduled[event.event_id] = _ms(event)
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                attrs_wt = event.workflow_task_started_event_attributes
                started[event.event_id] = _ms(event)
                wait = _ms(event) - scheduled[attrs_wt.scheduled_event_id]
                totals["workflow task wait"].append(wait)
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                attrs_wc = event.workflow_task_completed_event_attributes
                totals["workflow task run"].append(_ms(event) - started[attrs_wc.started_event_id])
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs_as = event.activity_task_scheduled_event_attributes
                scheduled[event.event_id] = _ms(event)
                name = attrs_as.activity_type.name
                kinds[event.event_id] = (
                    "model" if name in ("model_turn", "bare_model", "bare_agent_model") else "tool"
                )
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                attrs_at = event.activity_task_started_event_attributes
                started[event.event_id] = _ms(event)
                kind_name = kinds[attrs_at.scheduled_event_id]
                wait = _ms(event) - scheduled[attrs_at.scheduled_event_id]
                totals[f"{kind_name} activity wait"].append(wait)
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                attrs_ac = event.activity_task_completed_event_attributes
                kind_name = kinds[attrs_ac.scheduled_event_id]
                took = _ms(event) - started[attrs_ac.started_event_id]
                totals[f"{kind_name} activity run"].append(took)
        marks = [_ms(e) for e in events if kinds.get(e.event_id) == "model"]
        marks += [
            _ms(e)
            for e in events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
        ]
        turn_ms.extend(b - a for a, b in itertools.pairwise(marks))
        markers = sum(1 for e in events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED)
        totals["local activities"].append(markers)
        totals["history events"].append(len(events))
        totals["history KiB"].append(sum(e.ByteSize() for e in events) / 1024)
        if events:
            totals["task latency (s)"].append((_ms(events[-1]) - _ms(events[0])) / 1000)
    return {name: statistics.mean(v) for name, v in totals.items() if v}, turn_ms


# ---------------------------------------------------------------------- report


def side_order(sides: list[str], count_index: int, round_: int) -> list[str]:
    """The order of the sides in one round: rotated each round, so that over
    ``len(sides)`` rounds every side runs once in every position (first after the
    previous count's runs, last before the next round), and reversed every other count.
    """
    ordered = list(sides) if count_index % 2 == 0 else list(reversed(sides))
    shift = round_ % len(ordered)
    return ordered[shift:] + ordered[:shift]


def machine_facts() -> list[str]:
    cpu, cli, commit = cpu_model(), server_version(), code_commit(" + uncommitted changes")
    return [
        f"date        {datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
        f"commit      {commit}",
        f"machine     {platform.system()} {platform.release()} · {cpu}",
        f"nproc       {len(os.sched_getaffinity(0))}",
        f"python      {platform.python_version()}",
        f"temporalio  {version('temporalio')}",
        f"openai      {version('openai')}",
        f"server      {cli}",
        f"subagents   {version('durable-subagents')}",
    ]


def print_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:{'<' if i < 2 else '>'}{w}}}" for i, w in enumerate(widths)).format
    print(fmt(*header))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(fmt(*row))


def _phase_cell(run: Run, phase: str) -> str:
    if phase in run.phases:
        return f"{run.phases[phase]:.{1 if phase.endswith('(s)') else 0}f}"
    if phase.startswith("tool") and run.phases.get("local activities"):
        return "local"  # the tool calls ran as local activities, inside workflow tasks
    if phase.startswith("tool") and run.side in SUBAGENT_SIDES:
        return "in turn"  # the reads ran inside the model turns that asked for them
    return "-"


def side_label(run: Run, repeated: bool) -> str:
    return f"{run.side} #{run.round + 1}" if repeated else run.side


def vs_bare(runs: list[Run], run: Run) -> float:
    """``run``'s throughput over bare's in the same round of the same count (0: no bare)."""
    for base in runs:
        if (base.side, base.tasks, base.round) == ("bare", run.tasks, run.round) and base.wall:
            return run.turns_per_second / base.turns_per_second
    return 0.0


def summary_rows(runs: list[Run]) -> list[tuple[str, ...]]:
    """One row per count and side: the medians of its rounds."""
    rows: list[tuple[str, ...]] = []
    groups: dict[tuple[int, str], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.tasks, r.side), []).append(r)
    for (tasks, side), group in groups.items():
        ratios = [x for x in (vs_bare(runs, r) for r in group) if x]
        rows.append(
            (
                str(tasks),
                side,
                str(len(group)),
                f"{statistics.median(r.turns_per_second for r in group):.0f}",
                f"{statistics.median(ratios):.2f}x" if ratios else "-",
                f"{min(ratios):.2f}-{max(ratios):.2f}x" if ratios else "-",
                f"{statistics.median(r.cpu_ms_per_turn for r in group):.1f}",
                f"{statistics.median(r.cpu_ms_per_turn_of('server') for r in group):.1f}",
                f"{statistics.median(r.cpu_ms_per_turn_of() for r in group):.1f}",
                f"{max(r.rss_mb for r in group):.0f}",
            )
        )
    return rows


def report(runs: list[Run]) -> None:
    repeated = any(r.round for r in runs)
    rows: list[tuple[str, ...]] = []
    for r in runs:
        ratio = vs_bare(runs, r)
        rows.append(
            (
                str(r.tasks),
                side_label(r, repeated),
                f"{r.wall:.1f}",
                f"{r.turns_per_second:.0f}",
                f"{ratio:.2f}x" if ratio else "-",
                f"{r.cpu_ms_per_turn:.1f}",
                f"{r.cpu_ms_per_turn_of():.1f}",
                f"{r.turn_latency(0.5):.0f} / {r.turn_latency(0.99):.0f}",
                f"{r.rss_mb:.0f}",
                f"{r.completed} / {r.failed} / {r.lost}",
            )
        )
    print_table(
        (
            *("tasks", "side", "wall s", "turns/s", "vs bare", "worker CPU ms/turn"),
            "all CPU ms/turn",
            *("turn ms p50 / p99", "worker peak RSS MiB", "done/failed/lost"),
        ),
        rows,
    )
    if repeated:
        print()
        print("medians over the rounds (vs bare: the median of each round's ratio, its range):")
        print_table(
            (
                *("tasks", "side", "rounds", "turns/s", "vs bare", "range"),
                *("worker CPU ms/turn", "server CPU ms/turn", "all CPU ms/turn", "peak RSS MiB"),
            ),
            summary_rows(runs),
        )
    print()
    print("CPU seconds over each run (2 cores = 2.0 s per wall second), model requests:")
    cpu_rows = [
        (
            str(r.tasks),
            side_label(r, repeated),
            *(f"{r.cpu.get(k, 0.0):.1f}" for k in CPU_COLUMNS),
            f"{sum(r.cpu.values()) / r.wall:.2f}" if r.wall else "-",
            f"{r.spawn_seconds:.1f}",
            str(r.model_requests) if r.side != "bare" else "-",
        )
        for r in runs
    ]
    print_table(
        (
            "tasks",
            "side",
            "worker",
            "server",
            "model srv",
            "driver",
            "others",
            "cores busy",
            "start s",
            "model reqs",
        ),
        cpu_rows,
    )
    if any(r.phases for r in runs):
        print()
        print("where a task's time went (mean ms per step over the sampled tasks):")
        phase_rows = [
            (
                str(r.tasks),
                side_label(r, repeated),
                *(_phase_cell(r, p) for p in PHASES),
                f"{r.phases.get('history events', 0):.0f}",
                f"{r.phases.get('history KiB', 0):.1f}",
            )
            for r in runs
        ]
        print_table(
            (
                *("tasks", "side", "task s", "wft wait", "wft run"),
                *("model wait", "model run", "tool wait", "tool run", "events", "history KiB"),
            ),
            phase_rows,
        )
    if any(r.persistence for r in runs):
        print()
        print("the dev server's persistence requests per turn (its /metrics), by operation:")
        ranked = Counter[str]()
        for r in runs:
            ranked.update(r.persistence)
        operations = [op for op, _ in ranked.most_common(PERSISTENCE_COLUMNS)]
        print_table(
            ("tasks", "side", "all", *operations),
            [
                (
                    str(r.tasks),
                    side_label(r, repeated),
                    f"{sum(r.persistence.values()) / r.model_turns:.2f}",
                    *(f"{r.persistence[op] / r.model_turns:.2f}" for op in operations),
                )
                for r in runs
            ],
        )
    for r in runs:
        for kind, count in r.log_lines.most_common(5):
            print(f"{r.tasks} {side_label(r, repeated)} worker log: {count} x {kind}")
        if r.stall:
            print(f"{r.tasks} {r.side}: {r.stall}")
        if r.wrong:
            print(f"{r.tasks} {r.side}: {r.wrong} tasks ended without the expected answer")


# ---------------------------------------------------------------------- main


async def main(args: argparse.Namespace) -> int:
    limits = WorkerLimits(
        activities=args.max_activities,
        workflow_tasks=args.max_workflow_tasks,
        cached=args.max_cached,
        workflow_pollers=args.workflow_pollers,
        activity_pollers=args.activity_pollers,
    )
    for fact in machine_facts():
        print(fact)
    print(
        f"settings    counts={','.join(map(str, args.counts))} turns={args.turns} "
        f"model_latency={args.model_latency}s sides={','.join(args.sides)} wait={args.wait} "
        f"repeat={','.join(map(str, args.repeat))}"
    )
    print(f"            tool calls: subagents {args.subagent_tools}, bare {args.bare_tool}")
    print(f"sqlite      {' '.join(args.sqlite_pragma) or 'SQLite defaults'}")
    dynamic = {**BENCH_DYNAMIC_CONFIG, **dict(kv.split("=", 1) for kv in args.dynamic_config)}
    print(f"dynconfig   {' '.join(f'{k}={v}' for k, v in dynamic.items())}")
    print(f"worker      {limits.describe()}")
    loop = "uvloop" if loop_factory(Settings().event_loop) else "asyncio"
    print(f"event loop  subagents {loop} (SUBAGENTS_EVENT_LOOP), the other sides asyncio")
    print()
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp_name:
        tmp = Path(tmp_name)
        # A root worker runs reads as an unprivileged user, who must reach the file.
        os.chmod(tmp_name, 0o755)
        workspace = tmp / "ws"
        workspace.mkdir()
        (workspace / "f.txt").write_text("x\n")
        server = BenchServer(
            port=free_port(),
            ui_port=free_port(),
            db=tmp / "temporal.db",
            ui=False,
            dynamic_config=dynamic,
            pragmas=args.sqlite_pragma,
        )
        serve = ["--serve-model", "--model-latency", str(args.model_latency)]
        model = Child([*serve, "--turns", str(args.turns)], tmp / "model.log")
        await server.start()
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
            for index, count in enumerate(args.counts):
                for round_ in range(args.repeat[index]):
                    for side in side_order(args.sides, index, round_):
                        run = await run_side(bench, side, count, round_)
                        runs.append(run)
                        warnings = sum(run.log_lines.values())
                        label = f" #{round_ + 1}" if max(args.repeat) > 1 else ""
                        print(
                            f"{count} {side}{label}: {run.wall:.1f}s, "
                            f"{run.turns_per_second:.0f} turns/s, "
                            f"{run.completed}/{count} completed, worker peak RSS "
                            f"{run.rss_mb:.0f} MiB, worker CPU {run.cpu_ms_per_turn:.1f} ms/turn, "
                            f"turn p50/p99 {run.turn_latency(0.5):.0f}/"
                            f"{run.turn_latency(0.99):.0f} ms, {warnings} worker warnings",
                            flush=True,
                        )
        finally:
            await model.stop()
            await server.stop()
    print()
    report(runs)
    ok = all(r.completed == r.tasks and not r.wrong for r in runs)
    print()
    print("OK: every task completed" if ok else "FAILED: some tasks did not complete")
    return 0 if ok else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--counts",
        type=lambda s: [int(c) for c in s.split(",")],
        default=[1000],
        help="concurrent tasks per run, comma-separated (e.g. 10,100,1000,10000)",
    )
    parser.add_argument("--turns", type=int, default=5, help="tool-calling turns per task")
    parser.add_argument(
        "--repeat",
        type=lambda s: [int(c) for c in s.split(",")],
        default=[1],
        help="rounds of every side per count, in rotated order (the summary shows medians): "
        "one number for every count, or one per count (e.g. 3,3,1)",
    )
    parser.add_argument(
        "--model-latency", type=float, default=0.2, help="seconds the model server waits"
    )
    parser.add_argument(
        "--sides",
        type=lambda s: s.split(","),
        default=list(SIDES[:2]),
        help="subagents,bare (default); sandboxed: the library's workflows in the sandbox; "
        "bare-agent: a tool loop on plain Temporal; subagents-asyncio: subagents on "
        "asyncio's event loop",
    )
    parser.add_argument(
        "--wait",
        choices=("result", "check"),
        default="result",
        help="wait with handle.result(), or check_task(wait=True) on the subagent side",
    )
    parser.add_argument("--max-activities", type=int, default=2000)
    parser.add_argument("--max-workflow-tasks", type=int, default=100)
    parser.add_argument("--max-cached", type=int, default=10000, help="sticky cache size")
    parser.add_argument("--workflow-pollers", type=int, default=10)
    parser.add_argument("--activity-pollers", type=int, default=10)
    parser.add_argument(
        "--start-concurrency", type=int, default=200, help="start requests in flight at once"
    )
    parser.add_argument(
        "--waiters",
        type=int,
        default=500,
        help="waits in flight at once (each is a long poll; the server allows 1200 per namespace)",
    )
    parser.add_argument(
        "--sample", type=int, default=200, help="histories read per run (phases, turn latency)"
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait per run")
    parser.add_argument(
        "--stall", type=float, default=120.0, help="give up after this long without a finish"
    )
    parser.add_argument(
        "--dynamic-config",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="extra dynamic config of the dev server (repeatable)",
    )
    parser.add_argument(
        "--sqlite-pragma",
        action="append",
        default=None,
        metavar="PRAGMA=VALUE",
        help="SQLite pragma of the dev server (repeatable; default: " + " ".join(WAL_PRAGMAS) + ")",
    )
    parser.add_argument(
        "--stock-sqlite",
        action="store_true",
        help="run the dev server with SQLite's own defaults (rollback journal, full sync)",
    )
    parser.add_argument(
        "--subagent-tools",
        choices=("turn", "activity"),
        default="turn",
        help="read_file within the model turn that asked for it (the agents' default; "
        "bare-agent's then runs as a local activity) or as an activity",
    )
    parser.add_argument(
        "--bare-tool",
        choices=("activity", "local"),
        default="activity",
        help="the bare side's tool call: an activity, or a local activity",
    )
    parser.add_argument("--serve-model", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sqlite_pragma is None:
        args.sqlite_pragma = [] if args.stock_sqlite else list(WAL_PRAGMAS)
    if any(c < 1 for c in [*args.counts, *args.repeat]) or args.turns < 1:
        parser.error("--counts, --turns and --repeat must be at least 1")
    if len(args.repeat) == 1:
        args.repeat = args.repeat * len(args.counts)
    if len(args.repeat) != len(args.counts):
        parser.error("--repeat takes one number, or one per count of --counts")
    if args.model_latency < 0:
        parser.error("--model-latency must be at least 0")
    if not set(args.sides) <= set(SIDES):
        parser.error(f"--sides takes {','.join(SIDES)}")
    return args


if __name__ == "__main__":
    parsed = parse_args()
    if parsed.serve_model:
        asyncio.run(serve_model(parsed))
    elif parsed.serve_worker:
        # The subagent worker runs on the loop `subagents worker` picks (uvloop where it
        # is installed); the bare workers on asyncio's, as a plain worker script does.
        side = json.loads(parsed.serve_worker)["side"]
        asyncio_side = side not in SUBAGENT_SIDES or side == "subagents-asyncio"
        factory = None if asyncio_side else loop_factory(Settings().event_loop)
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(serve_worker(parsed))
    else:
        sys.exit(asyncio.run(main(parsed)))
