"""Core overhead of durable-subagents beside bare Temporal, on one dev server.

Run: ``.venv/bin/python bench/bench_core.py [--spawns 200] [--turns 20] [--repeats 3]``

It starts its own dev server (SQLite file in a temporary directory, the low-latency
dynamic config of ``DevServer``), a subagent worker and a bare worker in this process,
and measures both sides in the same run, interleaved, so their ratio is comparable on
a noisy machine. See ``bench/README.md`` for what each line of the table means.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

from temporalio import activity, workflow

# Its workers run the scripted model and any model of the local fake servers: a worker
# runs only the models its settings allow.
os.environ.setdefault("SUBAGENTS_ALLOW_SCRIPTED", "true")
os.environ.setdefault("SUBAGENTS_MODELS", "*")

with workflow.unsafe.imports_passed_through():
    from temporalio.api.enums.v1 import EventType
    from temporalio.api.history.v1 import HistoryEvent
    from temporalio.client import Client
    from temporalio.worker import (
        ActivityInboundInterceptor,
        ExecuteActivityInput,
        Interceptor,
        Worker,
    )

    from durable_subagents import SubagentClient, TaskStatus, connect_client
    from durable_subagents.config import Settings
    from durable_subagents.storage._local import LocalBlobStore
    from durable_subagents.testing import DevServer, free_port, temporal_binary
    from durable_subagents.worker import create_worker

AGENT = "explore"
WAIT_TIMEOUT = 120.0


@activity.defn(name="bare_noop")
async def bare_noop(step: int) -> int:
    """The bare side's activity: returns at once."""
    return step


@workflow.defn(name="BareWorkflow")
class BareWorkflow:
    """The floor: ``hops`` no-op activities, one after the other."""

    @workflow.run
    async def run(self, hops: int) -> int:
        for step in range(hops):
            await workflow.execute_activity(
                bare_noop, step, start_to_close_timeout=timedelta(minutes=1)
            )
        return hops


class FirstActivityClock(Interceptor):
    """Records the wall-clock time each workflow's first activity starts executing."""

    def __init__(self) -> None:
        self.first: dict[str, float] = {}

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ClockInbound(next, self.first)


class _ClockInbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, first: dict[str, float]) -> None:
        super().__init__(next)
        self._first = first

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        workflow_id = activity.info().workflow_id
        if workflow_id is not None:
            self._first.setdefault(workflow_id, time.time())
        return await super().execute_activity(input)


@dataclass
class RunStats:
    """One end-to-end run: wall time, start to first activity, and its history."""

    seconds: float
    first_activity_ms: float
    history_bytes: int
    events: Counter[str] = field(default_factory=Counter)
    phases: dict[str, float] = field(default_factory=dict)


@dataclass
class Bench:
    """Everything a measure needs: the clients, the queues and the clock."""

    temporal: Client
    subagents: SubagentClient
    idle: SubagentClient
    bare_queue: str
    clock: FirstActivityClock
    turns: int

    @property
    def model(self) -> str:
        script = {
            "turns": [{"tool_calls": [{"name": "read_file", "arguments": {"path": "f.txt"}}]}],
            "repeat": self.turns,
            "final": "done",
        }
        return "scripted:" + json.dumps(script)


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await call()
    return (time.perf_counter() - start) * 1000


async def measure_spawns(bench: Bench, count: int) -> tuple[list[float], list[float]]:
    """Spawn latencies (ms) of ``spawn_task`` and of a bare ``start_workflow``, interleaved."""
    spawn: list[float] = []
    bare: list[float] = []
    queue = bench.idle.task_queue

    def spawn_one() -> Awaitable[str]:
        return bench.idle.spawn_task(AGENT, "benchmark spawn", model="scripted")

    def start_bare() -> Awaitable[object]:
        wf_id = f"bare-spawn-{uuid.uuid4().hex[:12]}"
        return bench.temporal.start_workflow("BareWorkflow", 0, id=wf_id, task_queue=queue)

    for _ in range(count):
        spawn.append(await timed(spawn_one))
        bare.append(await timed(start_bare))
    return spawn, bare


@dataclass
class History:
    """A closed run's history: its size, event counts and where its time went."""

    size: int
    counts: Counter[str]
    phases: dict[str, float]


def _ms(event: HistoryEvent) -> float:
    return event.event_time.ToNanoseconds() / 1e6


def phases(events: list[HistoryEvent]) -> dict[str, float]:
    """Milliseconds spent, by the history's timestamps, in each kind of step.

    ``workflow task`` is started -> completed of workflow tasks (the worker running
    workflow code), ``activity`` is started -> completed of activities (the worker
    running activity code); ``server`` is the rest of first -> last event.
    """
    started: dict[int, float] = {}
    out = {"workflow task": 0.0, "activity": 0.0, "first workflow task": -1.0}
    for event in events:
        kind = event.event_type
        if kind in (
            EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED,
        ):
            started[event.event_id] = _ms(event)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            attrs = event.workflow_task_completed_event_attributes
            took = _ms(event) - started[attrs.started_event_id]
            out["workflow task"] += took
            if out["first workflow task"] < 0:
                out["first workflow task"] = took
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = event.activity_task_completed_event_attributes
            out["activity"] += _ms(event) - started[attrs.started_event_id]
    total = _ms(events[-1]) - _ms(events[0]) if events else 0.0
    out["server"] = total - out["workflow task"] - out["activity"]
    out["total"] = total
    return out


async def history(client: Client, workflow_id: str) -> History:
    """Fetch a closed run's history and summarise it."""
    events: list[HistoryEvent] = [
        e async for e in client.get_workflow_handle(workflow_id).fetch_history_events()
    ]
    counts = Counter(EventType.Name(e.event_type).removeprefix("EVENT_TYPE_") for e in events)
    return History(sum(e.ByteSize() for e in events), counts, phases(events))


async def run_subagent(bench: Bench, use_result: bool) -> RunStats:
    """One N-turn scripted task, waited on with ``check_task`` or ``handle.result()``."""
    sub = bench.subagents
    wall0 = time.time()
    start = time.perf_counter()
    task_id = await sub.spawn_task(
        AGENT, "benchmark turns", model=bench.model, max_turns=bench.turns + 1
    )
    if use_result:
        await bench.temporal.get_workflow_handle(task_id).result()
    else:
        info = await sub.check_task(task_id, wait=True, timeout=WAIT_TIMEOUT)
        if info.status != TaskStatus.COMPLETED:
            raise RuntimeError(f"task {task_id} ended {info.status}: {info.error}")
    seconds = time.perf_counter() - start
    hist = await history(bench.temporal, task_id)
    first = (bench.clock.first[task_id] - wall0) * 1000
    return RunStats(seconds, first, hist.size, hist.counts, hist.phases)


async def run_bare(bench: Bench) -> RunStats:
    """The bare workflow with as many activity hops as the subagent run (2N+1)."""
    wf_id = f"bare-turns-{uuid.uuid4().hex[:12]}"
    hops = 2 * bench.turns + 1
    wall0 = time.time()
    start = time.perf_counter()
    handle = await bench.temporal.start_workflow(
        BareWorkflow.run, hops, id=wf_id, task_queue=bench.bare_queue
    )
    await handle.result()
    seconds = time.perf_counter() - start
    hist = await history(bench.temporal, wf_id)
    first = (bench.clock.first[wf_id] - wall0) * 1000
    return RunStats(seconds, first, hist.size, hist.counts, hist.phases)


def cpu_model() -> str:
    """The CPU's model name, from ``/proc/cpuinfo``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def server_version() -> str:
    """What the bundled Temporal CLI says its version is."""
    try:
        out = subprocess.run(
            [str(temporal_binary()), "--version"], capture_output=True, text=True, timeout=10
        )
        return out.stdout.strip() or "?"
    except Exception:
        return "?"


def code_commit(changed: str = " + uncommitted changes to durable_subagents") -> str:
    """The checkout's commit, and whether the library has changes on top of it."""
    git = ["git", "-C", str(Path(__file__).resolve().parent.parent)]
    try:
        head = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--", "durable_subagents"],
            capture_output=True,
            text=True,
        )
    except OSError:
        return "?"
    return (head.stdout.strip() or "?") + (changed if dirty.stdout.strip() else "")


def machine_facts() -> list[str]:
    cpu, cli = cpu_model(), server_version()
    return [
        f"date        {datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
        f"machine     {platform.node()} · {platform.system()} {platform.release()} · {cpu}",
        f"nproc       {len(os.sched_getaffinity(0))}",
        f"python      {platform.python_version()}",
        f"temporalio  {version('temporalio')}",
        f"server      {cli}",
        f"subagents   {version('durable-subagents')}",
    ]


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def print_table(rows: list[tuple[str, str, str, str]]) -> None:
    header = ("measure", "subagents", "bare Temporal", "ratio")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    line = "  ".join("-" * w for w in widths)
    fmt = "  ".join(f"{{:{'<' if i == 0 else '>'}{w}}}" for i, w in enumerate(widths)).format
    print(fmt(*header))
    print(line)
    for row in rows:
        print(fmt(*row))


async def main(args: argparse.Namespace) -> None:
    for fact in machine_facts():
        print(fact)
    print(f"settings    spawns={args.spawns} turns={args.turns} repeats={args.repeats}")
    print()
    with tempfile.TemporaryDirectory(prefix="bench-core-") as tmp_name:
        tmp = Path(tmp_name)
        workspace = tmp / "ws"
        workspace.mkdir()
        (workspace / "f.txt").write_text("x\n")
        server = DevServer(port=free_port(), ui_port=free_port(), db=tmp / "temporal.db", ui=False)
        await server.start()
        try:
            await bench_all(server, tmp, workspace, args)
        finally:
            await server.stop()


async def bench_all(
    server: DevServer, tmp: Path, workspace: Path, args: argparse.Namespace
) -> None:
    suffix = uuid.uuid4().hex[:8]
    settings = Settings(
        address=server.address,
        namespace=server.namespace,
        task_queue=f"bench-subagents-{suffix}",
        data_dir=tmp / "data",
        blob_dir=tmp / "blobs",
        workspace=workspace,
    )
    temporal = await connect_client(server.address, server.namespace)
    store = LocalBlobStore(settings.resolved_blob_dir)
    clock = FirstActivityClock()
    bench = Bench(
        temporal=temporal,
        subagents=SubagentClient(temporal, task_queue=settings.task_queue, blob_store=store),
        idle=SubagentClient(temporal, task_queue=f"bench-idle-{suffix}", blob_store=store),
        bare_queue=f"bench-bare-{suffix}",
        clock=clock,
        turns=args.turns,
    )
    sub_worker = create_worker(temporal, settings, interceptors=[clock])
    bare_worker = Worker(
        temporal,
        task_queue=bench.bare_queue,
        workflows=[BareWorkflow],
        activities=[bare_noop],
        interceptors=[clock],
    )
    spawn_p50: tuple[list[float], list[float]] = ([], [])
    spawn_p95: tuple[list[float], list[float]] = ([], [])
    checked: list[RunStats] = []
    resulted: list[RunStats] = []
    bare: list[RunStats] = []
    async with sub_worker, bare_worker:
        await measure_spawns(bench, 10)
        await run_subagent(bench, use_result=True)
        await run_bare(bench)
        for rep in range(args.repeats):
            spawn, bare_start = await measure_spawns(bench, args.spawns)
            for side, values in zip((0, 1), (spawn, bare_start), strict=True):
                spawn_p50[side].append(percentile(values, 0.5))
                spawn_p95[side].append(percentile(values, 0.95))
            checked.append(await run_subagent(bench, use_result=False))
            bare.append(await run_bare(bench))
            resulted.append(await run_subagent(bench, use_result=True))
            ms = [r.seconds * 1000 / args.turns for r in (checked[-1], resulted[-1], bare[-1])]
            print(
                f"repeat {rep + 1}/{args.repeats}: spawn p50 {spawn_p50[0][-1]:.1f} ms "
                f"(bare {spawn_p50[1][-1]:.1f}); per turn {ms[0]:.1f} / {ms[1]:.1f} ms "
                f"(bare {ms[2]:.1f})",
                flush=True,
            )
    print()
    report(args.turns, spawn_p50, spawn_p95, checked, resulted, bare)


def report(
    turns: int,
    spawn_p50: tuple[list[float], list[float]],
    spawn_p95: tuple[list[float], list[float]],
    checked: list[RunStats],
    resulted: list[RunStats],
    bare: list[RunStats],
) -> None:
    med = statistics.median

    def per_turn(runs: list[RunStats]) -> float:
        return med(r.seconds for r in runs) * 1000 / turns

    def row(name: str, a: float, b: float, digits: int = 1) -> tuple[str, str, str, str]:
        return (name, f"{a:.{digits}f}", f"{b:.{digits}f}", ratio(a, b))

    bare_turn = per_turn(bare)
    last_sub, last_bare = resulted[-1], bare[-1]
    rows = [
        row("spawn latency p50 (ms)", med(spawn_p50[0]), med(spawn_p50[1])),
        row("spawn latency p95 (ms)", med(spawn_p95[0]), med(spawn_p95[1])),
        row("ms per turn, check_task(wait=True)", per_turn(checked), bare_turn),
        row("ms per turn, handle.result()", per_turn(resulted), bare_turn),
        row(
            "start -> first model request (ms)",
            med(r.first_activity_ms for r in checked + resulted),
            med(r.first_activity_ms for r in bare),
        ),
        row(
            "first workflow task (ms)",
            med(r.phases["first workflow task"] for r in checked + resulted),
            med(r.phases["first workflow task"] for r in bare),
        ),
        row(
            f"history after {turns} turns (KB)",
            last_sub.history_bytes / 1000,
            last_bare.history_bytes / 1000,
        ),
        row(
            "history events",
            sum(last_sub.events.values()),
            sum(last_bare.events.values()),
            digits=0,
        ),
        row(
            "workflow tasks",
            last_sub.events["WORKFLOW_TASK_COMPLETED"],
            last_bare.events["WORKFLOW_TASK_COMPLETED"],
            digits=0,
        ),
    ]
    print_table(rows)
    print()
    print("where the time of one run goes, per turn (ms, median; from history timestamps):")
    phase_rows = [
        row(
            f"  {name}",
            med(r.phases[name] for r in resulted) / turns,
            med(r.phases[name] for r in bare) / turns,
        )
        for name in ("workflow task", "activity", "server")
    ]
    print_table(phase_rows)
    print()
    print(f"history events by type ({turns}-turn subagent run vs {2 * turns + 1}-hop bare run):")
    kinds = sorted(set(last_sub.events) | set(last_bare.events))
    width = max(len(k) for k in kinds)
    for kind in kinds:
        print(f"  {kind:<{width}}  {last_sub.events[kind]:>4}  {last_bare.events[kind]:>4}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--spawns", type=int, default=200, help="spawns per repeat (each side)")
    parser.add_argument("--turns", type=int, default=20, help="turns of the scripted task")
    parser.add_argument("--repeats", type=int, default=3, help="repeats; the median is shown")
    args = parser.parse_args(argv)
    if args.spawns < 1 or args.turns < 1 or args.repeats < 1:
        parser.error("--spawns, --turns and --repeats must be at least 1")
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
