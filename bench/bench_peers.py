"""Per-turn cost of durable Temporal agent frameworks, side by side, over real HTTP.

Run: ``.venv/bin/python bench/bench_peers.py [--turns 20] [--repeats 3] [--long]
[--default-server]`` (the peers need the ``bench`` extra: ``pip install -e '.[dev,bench]'``;
a side whose package is missing is skipped and labelled not run).

It starts its own dev server (SQLite file in a temporary directory, ``DevServer``'s
low-latency dynamic config unless ``--default-server``), a local Chat Completions server
(aiohttp, in this process: it answers at once and decides its reply from the request)
and four workers in this process: bare Temporal (no-op activities, the floor), the
OpenAI Agents SDK with Temporal's ``OpenAIAgentsPlugin``, Pydantic AI with
``TemporalDurability``, and durable-subagents. Each runs the same agent: ``--turns``
turns of one ``read_file`` of a small file, then a final answer. The sides run in the
same process, interleaved, so their ratios are comparable on a noisy machine. The other
sides' workflows are in ``bench/peers/`` (one module each, as the workflow sandbox
re-imports a workflow's module per run). ``--long`` adds 200 turns of 50 KB tool
results. See ``bench/README.md`` for what each line means.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import itertools
import json
import logging
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import ModuleType
from typing import Any

from aiohttp import web
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)
from temporalio.worker import (
    Worker,
)

from durable_subagents import SubagentClient, connect_client
from durable_subagents.agents import BUILTIN_AGENTS
from durable_subagents.config import Settings
from durable_subagents.testing import DevServer, free_port, temporal_binary
from durable_subagents.worker import create_worker

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_core import FirstActivityClock, code_commit, cpu_model, server_version

# Its workers run the scripted model and any model of the local fake servers: a worker
# runs only the models its settings allow.
os.environ.setdefault("SUBAGENTS_ALLOW_SCRIPTED", "true")
os.environ.setdefault("SUBAGENTS_MODELS", "*")

TOOL = "read_file"
FINAL = "done"
SMALL_FILE = "f.txt"
BIG_FILE = "big.txt"
BENCH_EXTRA = "pip install -e '.[bench]'"
SUBAGENTS, AGENTS_SDK, PYDANTIC_AI, BARE = "subagents", "openai-agents", "pydantic-ai", "bare"
SUBAGENTS_ACT = "subagents-tool-activities"
LABELS = {
    SUBAGENTS: "durable-subagents",
    SUBAGENTS_ACT: "subagents (tool activities)",
    AGENTS_SDK: "OpenAI Agents SDK",
    PYDANTIC_AI: "Pydantic AI",
    BARE: "bare Temporal",
}
MODEL_ACTIVITIES = {"model_turn", "invoke_model_activity", "bare_model_turn"}
"""Activity types that are model calls (Pydantic AI's end in ``__model_request``)."""


def is_model_activity(name: str) -> bool:
    return name in MODEL_ACTIVITIES or "__model_request" in name


# --- the local model server ----------------------------------------------------------

_TOOL_ROLE = re.compile(rb'"role"\s*:\s*"tool"')
_STREAM = re.compile(rb'"stream"\s*:\s*true')
_USAGE = re.compile(rb'"include_usage"\s*:\s*true')
_MODEL = re.compile(rb'"model"\s*:\s*"([^"\\]*)"')
_OFFERS_TOOL = re.compile(rb'"name"\s*:\s*"' + TOOL.encode() + rb'"')


@dataclass
class Logged:
    """One model request: arrival (``time.time()``), body bytes, tool results in it."""

    at: float
    size: int
    tool_results: int
    streamed: bool


class ChatServer:
    """``POST /v1/chat/completions`` that answers at once, from the request alone.

    It counts the ``role: "tool"`` messages: fewer than ``turns``, it asks for one
    ``read_file`` of ``path``; otherwise it answers ``done``. Streamed (SSE) when the
    request says ``"stream": true``. The four facts it needs are read from the raw
    body with regular expressions, so a 10 MB conversation costs it ~3 ms, not the
    ~60 ms of ``json.loads`` that would land on the workers' event loop.
    """

    def __init__(self) -> None:
        self.turns = 0
        self.path = SMALL_FILE
        self.log: list[Logged] = []
        self.errors: list[str] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> None:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        at = time.time()
        raw = await request.read()
        done = len(_TOOL_ROLE.findall(raw))
        streamed = _STREAM.search(raw) is not None
        self.log.append(Logged(at, len(raw), done, streamed))
        model_match = _MODEL.search(raw)
        base: dict[str, Any] = {
            "id": f"chatcmpl-{len(self.log)}",
            "created": int(at),
            "model": model_match.group(1).decode() if model_match else "bench",
        }
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if done < self.turns:
            if not _OFFERS_TOOL.search(raw):
                message = f"the request offers no tool named {TOOL}"
                self.errors.append(message)
                error = {"message": message, "type": "invalid_request_error"}
                return web.json_response({"error": error}, status=400)
            call = {
                "id": f"call_{done + 1}",
                "type": "function",
                "function": {"name": TOOL, "arguments": json.dumps({"path": self.path})},
            }
            reply: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        else:
            reply, finish = {"role": "assistant", "content": FINAL}, "stop"
        if not streamed:
            choice = {"index": 0, "message": reply, "finish_reason": finish}
            return web.json_response(
                {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
            )
        chunk = {**base, "object": "chat.completion.chunk"}
        if "tool_calls" in reply:
            reply["tool_calls"] = [{"index": 0, **c} for c in reply["tool_calls"]]
        frames = [
            {**chunk, "choices": [{"index": 0, "delta": reply, "finish_reason": None}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        ]
        if _USAGE.search(raw):
            frames.append({**chunk, "choices": [], "usage": usage})
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        body = b"".join(f"data: {json.dumps(f)}\n\n".encode() for f in frames)
        await response.write(body + b"data: [DONE]\n\n")
        await response.write_eof()
        return response


# --- the sides -----------------------------------------------------------------------


Starter = Callable[[str, int], Awaitable[WorkflowHandle[Any, Any]]]


@dataclass
class Side:
    """One framework: how to start its agent, and its worker (None when not run)."""

    key: str
    start: Starter | None = None
    worker: Worker | None = None
    skipped: str = ""

    @property
    def label(self) -> str:
        return LABELS[self.key]

    @property
    def ran(self) -> bool:
        return self.start is not None


def prompt(turns: int) -> str:
    return f"Read {SMALL_FILE} with {TOOL}, {turns} times, then answer {FINAL}."


def load_peer(name: str) -> ModuleType | str:
    """The side's module, or why it cannot run."""
    try:
        return importlib.import_module(f"peers.{name}")
    except ImportError as err:
        return f"not run: {err}; install the bench extra: {BENCH_EXTRA}"


async def build_sides(
    server: DevServer,
    model: ChatServer,
    tmp: Path,
    workspace: Path,
    clock: FirstActivityClock,
    tool_activities: bool = False,
) -> dict[str, Side]:
    """Clients, workers and starters of the four sides (a peer that cannot load: skipped)."""
    suffix = uuid.uuid4().hex[:8]
    address, namespace = server.address, server.namespace
    sides: dict[str, Side] = {}

    bare = importlib.import_module("peers.bare")
    bare_client = await Client.connect(address, namespace=namespace)
    bare_queue = f"peers-bare-{suffix}"

    async def start_bare(wf_id: str, turns: int) -> WorkflowHandle[Any, Any]:
        return await bare_client.start_workflow(
            bare.BareWorkflow.run, turns, id=wf_id, task_queue=bare_queue
        )

    sides[BARE] = Side(
        BARE,
        start_bare,
        Worker(
            bare_client,
            task_queue=bare_queue,
            workflows=[bare.BareWorkflow],
            activities=[bare.bare_model_turn, bare.bare_tool_call],
            interceptors=[clock],
        ),
    )

    agents_sdk = load_peer("openai_agents_peer")
    if isinstance(agents_sdk, str):
        sides[AGENTS_SDK] = Side(AGENTS_SDK, skipped=agents_sdk)
    else:
        sdk_client = await Client.connect(
            address, namespace=namespace, plugins=[agents_sdk.plugin(model.base_url)]
        )
        sdk_queue = f"peers-agents-sdk-{suffix}"

        async def start_sdk(wf_id: str, turns: int) -> WorkflowHandle[Any, Any]:
            return await sdk_client.start_workflow(
                "PeersAgentsSdkWorkflow",
                args=[prompt(turns), turns + 1],
                id=wf_id,
                task_queue=sdk_queue,
            )

        worker = Worker(
            sdk_client,
            task_queue=sdk_queue,
            workflows=agents_sdk.WORKFLOWS,
            activities=agents_sdk.ACTIVITIES,
        )
        sides[AGENTS_SDK] = Side(AGENTS_SDK, start_sdk, worker)

    pydantic_ai = load_peer("pydantic_ai_peer")
    if isinstance(pydantic_ai, str):
        sides[PYDANTIC_AI] = Side(PYDANTIC_AI, skipped=pydantic_ai)
    else:
        pyd_client = await Client.connect(
            address, namespace=namespace, plugins=[pydantic_ai.client_plugin()]
        )
        pyd_queue = f"peers-pydantic-ai-{suffix}"

        async def start_pyd(wf_id: str, turns: int) -> WorkflowHandle[Any, Any]:
            return await pyd_client.start_workflow(
                "PeersPydanticAIWorkflow",
                args=[prompt(turns), turns + 1],
                id=wf_id,
                task_queue=pyd_queue,
            )

        worker = Worker(
            pyd_client,
            task_queue=pyd_queue,
            workflows=pydantic_ai.WORKFLOWS,
            plugins=[pydantic_ai.worker_plugin()],
        )
        sides[PYDANTIC_AI] = Side(PYDANTIC_AI, start_pyd, worker)

    settings = Settings(
        address=address,
        namespace=namespace,
        task_queue=f"peers-subagents-{suffix}",
        data_dir=tmp / "data",
        blob_dir=tmp / "blobs",
        workspace=workspace,
    )
    temporal = await connect_client(address, namespace)
    subagents = SubagentClient(
        temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
    )

    async def start_subagent(wf_id: str, turns: int) -> WorkflowHandle[Any, Any]:
        task_id = await subagents.spawn_task(
            "explore",
            prompt(turns),
            model="openai:bench",
            max_turns=turns + 1,
            tools=[TOOL],
            task_id=wf_id,
        )
        return temporal.get_workflow_handle(task_id)

    sides[SUBAGENTS] = Side(SUBAGENTS, start_subagent, create_worker(temporal, settings))
    order = [SUBAGENTS, AGENTS_SDK, PYDANTIC_AI, BARE]
    if tool_activities:
        order.insert(1, SUBAGENTS_ACT)
        sides[SUBAGENTS_ACT] = subagents_tool_activities(temporal, settings)
    return {key: sides[key] for key in order}


def subagents_tool_activities(temporal: Client, settings: Settings) -> Side:
    """durable-subagents with its read tools as activities, on the same worker.

    Needs the agent setting ``local_read_tools`` (read tools as local activities, one
    workflow task per turn); without it the side is not run.
    """
    explore = BUILTIN_AGENTS["explore"]
    if "local_read_tools" not in type(explore).model_fields:
        return Side(SUBAGENTS_ACT, skipped="not run: this version has no local_read_tools")
    name = "explore-tool-activities"
    spec = explore.model_copy(update={"name": name, "local_read_tools": False})
    client = SubagentClient(
        temporal,
        task_queue=settings.task_queue,
        blob_store=settings.blob_store(),
        agents={name: spec},
    )

    async def start(wf_id: str, turns: int) -> WorkflowHandle[Any, Any]:
        task_id = await client.spawn_task(
            name,
            prompt(turns),
            model="openai:bench",
            max_turns=turns + 1,
            tools=[TOOL],
            task_id=wf_id,
        )
        return temporal.get_workflow_handle(task_id)

    return Side(SUBAGENTS_ACT, start)


# --- one run and its history ---------------------------------------------------------


@dataclass
class History:
    """A run's history: size, events, and where its time went (history timestamps)."""

    size: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    phases: dict[str, float] = field(default_factory=dict)
    model_inputs: list[int] = field(default_factory=list)
    """Input bytes of each model activity, in order."""
    largest_payload: int = 0
    """The largest activity input or result (bytes)."""
    failures: list[str] = field(default_factory=list)
    """Workflow-task and activity failures, and how the run ended if not completed."""
    turn_phases: list[dict[str, float]] = field(default_factory=list)
    """The phases' milliseconds charged to each turn (see ``summarise``)."""
    marks: dict[str, float] = field(default_factory=dict)
    """When the run started, its first workflow task started and completed, and its
    first model activity started (epoch ms, server clock)."""

    @property
    def events(self) -> int:
        return sum(self.counts.values())


def _ms(event: HistoryEvent) -> float:
    return event.event_time.ToNanoseconds() / 1e6


START_STEPS = (
    "start call -> execution started",
    "-> first workflow task started",
    "first workflow task",
    "-> first model activity started",
    "-> model request arrives",
)
"""The steps from the start call to the first model request (see ``Run.start_split``)."""

PHASES = (
    "workflow task",
    "model activity",
    "tool activity",
    "activity dispatch",
    "workflow task dispatch",
    "other",
)


def summarise(events: list[HistoryEvent]) -> History:
    """Size, counts, phases and failures of one run's events.

    Each phase's time is also charged to a turn: turn ``k`` runs from the scheduling
    of the ``k``-th model activity to that of the next (turn 0 is the start, before
    the first model activity is scheduled).
    """
    out = History(size=sum(e.ByteSize() for e in events))
    out.counts = Counter(EventType.Name(e.event_type).removeprefix("EVENT_TYPE_") for e in events)
    at: dict[int, float] = {}
    kind: dict[int, str] = {}

    def charge(phase: str, ms: float) -> None:
        turn = len(out.model_inputs)
        while len(out.turn_phases) <= turn:
            out.turn_phases.append(dict.fromkeys(PHASES, 0.0))
        out.turn_phases[turn][phase] += ms

    for e in events:
        t = e.event_type
        now = at[e.event_id] = _ms(e)
        if t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            out.marks["execution started"] = now
        elif t == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            scheduled = e.workflow_task_started_event_attributes.scheduled_event_id
            charge("workflow task dispatch", now - at[scheduled])
            out.marks.setdefault("first workflow task started", now)
        elif t == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            charge(
                "workflow task",
                now - at[e.workflow_task_completed_event_attributes.started_event_id],
            )
            out.marks.setdefault("first workflow task completed", now)
        elif t == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            fa = e.workflow_task_failed_event_attributes
            charge("workflow task", now - at[fa.started_event_id])
            cause = WorkflowTaskFailedCause.Name(fa.cause).removeprefix(
                "WORKFLOW_TASK_FAILED_CAUSE_"
            )
            out.failures.append(f"workflow task failed ({cause}): {fa.failure.message}")
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            sa = e.activity_task_scheduled_event_attributes
            kind[e.event_id] = sa.activity_type.name
            out.largest_payload = max(out.largest_payload, sa.input.ByteSize())
            if is_model_activity(sa.activity_type.name):
                out.model_inputs.append(sa.input.ByteSize())
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            scheduled = e.activity_task_started_event_attributes.scheduled_event_id
            charge("activity dispatch", now - at[scheduled])
            if is_model_activity(kind[scheduled]):
                out.marks.setdefault("first model activity started", now)
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            ca = e.activity_task_completed_event_attributes
            model_call = is_model_activity(kind[ca.scheduled_event_id])
            charge(
                "model activity" if model_call else "tool activity", now - at[ca.started_event_id]
            )
            out.largest_payload = max(out.largest_payload, ca.result.ByteSize())
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            fa_ = e.activity_task_failed_event_attributes
            out.failures.append(
                f"activity {kind[fa_.scheduled_event_id]} failed: {fa_.failure.message}"
            )
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            msg = e.workflow_execution_failed_event_attributes.failure.message
            out.failures.append(f"workflow failed: {msg}")
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
            reason = e.workflow_execution_terminated_event_attributes.reason
            out.failures.append(f"terminated: {reason}")
    phases = {p: sum(turn[p] for turn in out.turn_phases) for p in PHASES}
    total = _ms(events[-1]) - _ms(events[0]) if events else 0.0
    phases["other"] = total - sum(phases.values())
    phases["total"] = total
    first_start = out.marks.get("first workflow task started")
    first_done = out.marks.get("first workflow task completed")
    phases["first workflow task"] = first_done - first_start if first_start and first_done else 0.0
    out.phases = phases
    return out


async def fetch_history(client: Client, workflow_id: str) -> History:
    events = [e async for e in client.get_workflow_handle(workflow_id).fetch_history_events()]
    return summarise(events)


async def show_json_bytes(server: DevServer, workflow_id: str) -> int:
    """Size of ``temporal workflow show --output json`` for the workflow's latest run."""
    proc = await asyncio.create_subprocess_exec(
        str(temporal_binary()),
        "workflow",
        "show",
        "--workflow-id",
        workflow_id,
        "--address",
        server.address,
        "--namespace",
        server.namespace,
        "--output",
        "json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"temporal workflow show failed: {err.decode(errors='replace')}")
    return len(out)


@dataclass
class Run:
    """One run of a side: wall time, when its first request came, its requests and history."""

    workflow_id: str
    wall0: float
    """When the start call began (``time.time()``)."""
    seconds: float
    first_request_ms: float
    requests: list[Logged]
    history: History
    outcome: str = "completed"
    show_json: int = 0

    def start_split(self) -> dict[str, float]:
        """Start -> first model request, split at the history's milestones (ms)."""
        marks = self.history.marks
        points = [
            self.wall0 * 1000,
            marks.get("execution started"),
            marks.get("first workflow task started"),
            marks.get("first workflow task completed"),
            marks.get("first model activity started"),
            self.wall0 * 1000 + self.first_request_ms,
        ]
        if any(p is None for p in points):
            return {}
        steps = [b - a for a, b in itertools.pairwise(p for p in points if p is not None)]
        return dict(zip(START_STEPS, steps, strict=True))

    def turn_ms(self) -> list[float]:
        """Time of each turn, by the model server's clock: request k -> request k+1."""
        at = [r.at for r in self.requests]
        return [(b - a) * 1000 for a, b in itertools.pairwise(at)]

    @property
    def turns_done(self) -> int:
        """Tool results the model got back (the turns that went all the way round)."""
        return max((r.tool_results for r in self.requests), default=0)


@dataclass
class Bench:
    server: DevServer
    model: ChatServer
    history_client: Client
    clock: FirstActivityClock
    sides: dict[str, Side]


async def run_once(
    bench: Bench, side: Side, turns: int, *, timeout: float, stall: float | None = None
) -> Run:
    """Start the side's agent and wait for it; with ``stall``, give up when no model
    request came for that many seconds (then terminate it and say how it ended)."""
    assert side.start is not None
    model = bench.model
    wf_id = f"peers-{side.key}-{uuid.uuid4().hex[:12]}"
    first = len(model.log)
    wall0 = time.time()
    t0 = time.perf_counter()
    handle = await side.start(wf_id, turns)
    waiter = asyncio.ensure_future(handle.result())
    outcome = "completed"
    while not waiter.done():
        await asyncio.wait({waiter}, timeout=0.25)
        if waiter.done():
            break
        last = model.log[-1].at if len(model.log) > first else wall0
        if stall is not None and time.time() - last > stall:
            outcome = f"stalled (no model request for {stall:.0f} s)"
        elif time.perf_counter() - t0 > timeout:
            outcome = f"timed out after {timeout:.0f} s"
        else:
            continue
        waiter.cancel()
        with contextlib.suppress(BaseException):
            await waiter
        await handle.terminate(reason=f"bench_peers: {outcome}")
        break
    seconds = time.perf_counter() - t0
    if outcome == "completed":
        exc = waiter.exception()
        if exc is not None:
            cause = exc.cause if isinstance(exc, WorkflowFailureError) else exc
            outcome = f"failed: {type(cause).__name__}: {cause}"
    requests = model.log[first:]
    history = await fetch_history(bench.history_client, wf_id)
    if requests:
        first_ms = (requests[0].at - wall0) * 1000
    else:
        first_ms = (bench.clock.first.get(wf_id, wall0) - wall0) * 1000
    return Run(wf_id, wall0, seconds, first_ms, requests, history, outcome)


# --- report --------------------------------------------------------------------------


def machine_facts() -> list[str]:
    cpu, cli = cpu_model(), server_version()

    def ver(dist: str) -> str:
        try:
            return version(dist)
        except PackageNotFoundError:
            return "not installed"

    commit = code_commit()
    return [
        f"date        {datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
        f"commit      {commit}",
        f"machine     {platform.node()} · {platform.system()} {platform.release()} · {cpu}",
        f"nproc       {len(os.sched_getaffinity(0))}",
        f"python      {platform.python_version()}",
        f"server      {cli}",
        f"packages    temporalio {ver('temporalio')}, openai {ver('openai')}, "
        f"pydantic {ver('pydantic')}, aiohttp {ver('aiohttp')}",
        f"            durable-subagents {ver('durable-subagents')}, "
        f"openai-agents {ver('openai-agents')}, "
        f"temporalio-openai-agents {ver('temporalio-openai-agents')}, "
        f"pydantic-ai-slim {ver('pydantic-ai-slim')}",
    ]


def table(header: list[str], rows: list[list[str]]) -> None:
    """A markdown table, padded so it also reads as plain text."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        padded = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    print(line(header))
    print("|" + "|".join(("-" * (w + 1)) + (":" if i else "-") for i, w in enumerate(widths)) + "|")
    for row in rows:
        print(line(row))


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def report(bench: Bench, runs: dict[str, list[Run]], turns: int) -> None:
    sides = bench.sides
    med = statistics.median
    ran = [k for k, s in sides.items() if s.ran and runs[k]]

    def per_turn(key: str) -> float | None:
        return med(r.seconds for r in runs[key]) * 1000 / turns if key in ran else None

    frameworks = [k for k in ran if k != BARE]
    best = min(frameworks, key=lambda k: per_turn(k) or 0.0) if frameworks else None
    best_ms = per_turn(best) if best else None
    bare_ms = per_turn(BARE)
    print(f"ms per turn ({turns} turns, one {TOOL} each, then the answer; median of runs)")
    print(f"best framework: {LABELS[best] if best else '-'}")
    print()
    rows = []
    for key, side in sides.items():
        if key not in ran:
            rows.append([side.label, "not run", "-", "-"])
            continue
        ms = per_turn(key)
        rows.append([side.label, ratio(ms, best_ms), ratio(ms, bare_ms), num(ms)])
    table(["side", "vs best framework", "vs bare Temporal", "ms per turn"], rows)
    print()

    cols = list(sides)

    def row(name: str, value: Callable[[str], str]) -> list[str]:
        return [name] + [value(k) if k in ran else "not run" for k in cols]

    def last(key: str) -> Run:
        return runs[key][-1]

    def model_input(key: str, index: int) -> str:
        inputs = last(key).history.model_inputs
        return f"{inputs[index] / 1000:.1f}" if inputs else "-"

    rows = [
        row("ms per turn", lambda k: num(per_turn(k))),
        row(
            "start -> first model request (ms)",
            lambda k: num(med(r.first_request_ms for r in runs[k])),
        ),
        row(
            "first workflow task (ms)",
            lambda k: num(med(r.history.phases["first workflow task"] for r in runs[k])),
        ),
        row(
            "history, sum of event.ByteSize() (KB)",
            lambda k: num(last(k).history.size / 1000),
        ),
        row(
            "history, `temporal workflow show --output json` (KB)",
            lambda k: num(last(k).show_json / 1000),
        ),
        row("history events", lambda k: str(last(k).history.events)),
        row(
            "workflow tasks",
            lambda k: str(last(k).history.counts["WORKFLOW_TASK_COMPLETED"]),
        ),
        row(
            "activities",
            lambda k: str(last(k).history.counts["ACTIVITY_TASK_COMPLETED"]),
        ),
        row(
            "model requests (HTTP)",
            lambda k: str(len(last(k).requests)) if k != BARE else "-",
        ),
        row(
            "model request body, first turn (KB)",
            lambda k: num(last(k).requests[0].size / 1000) if k != BARE else "-",
        ),
        row(
            "model request body, last turn (KB)",
            lambda k: num(last(k).requests[-1].size / 1000) if k != BARE else "-",
        ),
        row("model activity input, first turn (KB)", lambda k: model_input(k, 0)),
        row("model activity input, last turn (KB)", lambda k: model_input(k, -1)),
        row(
            "largest activity payload (KB)",
            lambda k: num(last(k).history.largest_payload / 1000),
        ),
        row("streamed (SSE)", lambda k: stream_label(last(k)) if k != BARE else "-"),
    ]
    table(["measure", *(sides[k].label for k in cols)], rows)
    print()
    print("start -> first model request, split (ms, median of runs; history timestamps)")
    print()

    def split_ms(step: str, k: str) -> str:
        return num(med(r.start_split().get(step, 0.0) for r in runs[k]))

    rows = [row(step, partial(split_ms, step)) for step in START_STEPS]
    table(["step", *(sides[k].label for k in cols)], rows)
    print()
    print("where a run's time goes, per turn (ms, median of runs; from history timestamps)")
    print()

    def phase_ms(name: str, k: str) -> str:
        return num(med(r.history.phases[name] for r in runs[k]) / turns)

    rows = [row(name, partial(phase_ms, name)) for name in (*PHASES, "total")]
    table(["phase", *(sides[k].label for k in cols)], rows)
    print()
    print("history events by type (last run)")
    print()
    kinds = sorted({kind for k in ran for kind in last(k).history.counts})

    def count(kind: str, k: str) -> str:
        return str(last(k).history.counts[kind])

    rows = [row(kind, partial(count, kind)) for kind in kinds]
    table(["event", *(sides[k].label for k in cols)], rows)
    for side in sides.values():
        if not side.ran:
            print(f"\n{side.label}: {side.skipped}")


def stream_label(run: Run) -> str:
    streamed = {r.streamed for r in run.requests}
    return "yes" if streamed == {True} else "no" if streamed == {False} else "mixed"


def window(values: list[float], end: int, size: int = 10) -> float | None:
    """Median of turns ``end - size + 1 .. end`` (1-based), if all were reached."""
    if end < size or end > len(values):
        return None
    return statistics.median(values[end - size : end])


WARN_LIMIT = 512 * 1024
"""The payload size above which the Temporal SDK logs a TMPRL1103 warning (its error
limit, 2 MiB, fails the workflow task)."""


def outcome(run: Run) -> str:
    if run.outcome == "completed":
        return "completed"
    return run.outcome.split(" (")[0].split(":")[0] + f" at turn {run.turns_done + 1}"


def over(run: Run, limit: int) -> str:
    turn = next((i + 1 for i, n in enumerate(run.history.model_inputs) if n > limit), None)
    return "never" if turn is None else f"turn {turn}"


def report_long(runs: dict[str, Run], sides: dict[str, Side], turns: int, kb: int) -> None:
    print(f"long case: {turns} turns, each tool result {kb} KB")
    print()
    cols = [k for k in sides if k != BARE]
    reached = min((r.turns_done for r in runs.values()), default=0)
    common = (reached - 9, reached) if reached >= 10 else None

    def row(name: str, value: Callable[[Run], str]) -> list[str]:
        return [name] + [value(runs[k]) if k in runs else "not run" for k in cols]

    def turn_ms(run: Run, first: int, last: int) -> str:
        ms = run.turn_ms()
        return num(statistics.median(ms[first - 1 : last])) if len(ms) >= last else "-"

    def phase(name: str, first: int, last: int, run: Run) -> str:
        turn_phases = run.history.turn_phases
        if len(turn_phases) <= last:
            return "-"
        return num(statistics.median(turn_phases[k][name] for k in range(first, last + 1)))

    rows = [
        row("outcome", outcome),
        row("turns completed (tool results sent back)", lambda r: str(r.turns_done)),
        row("model requests (HTTP)", lambda r: str(len(r.requests))),
        row("wall time (s)", lambda r: num(r.seconds)),
        row("ms at turn 10", lambda r: turn_ms(r, 10, 10)),
        row("ms per turn, median of turns 1-10", lambda r: turn_ms(r, 1, 10)),
    ]
    windows = [(1, 10)]
    if common and 10 < common[1] < turns:  # the last window has its own rows
        windows.append(common)
        rows.append(
            row(
                f"ms per turn, median of turns {common[0]}-{common[1]}",
                lambda r: turn_ms(r, *common),
            )
        )
    rows += [
        row(f"ms at turn {turns}", lambda r: turn_ms(r, turns, turns)),
        row(
            f"ms per turn, median of turns {turns - 9}-{turns}",
            lambda r: turn_ms(r, turns - 9, turns),
        ),
        row(
            "model request body, last (KB)",
            lambda r: num(r.requests[-1].size / 1000) if r.requests else "-",
        ),
        row(
            "model activity input, largest (KB)",
            lambda r: num(max(r.history.model_inputs, default=0) / 1000),
        ),
        row(
            f"first model activity input over {WARN_LIMIT // 1024} KiB (SDK warning)",
            lambda r: over(r, WARN_LIMIT),
        ),
        row("largest activity payload (KB)", lambda r: num(r.history.largest_payload / 1000)),
        row("history, latest run (KB)", lambda r: num(r.history.size / 1000)),
        row("history events, latest run", lambda r: str(r.history.events)),
    ]
    table(["measure", *(sides[k].label for k in cols)], rows)
    print()
    print("per turn, by history timestamps (ms, median over the turns named)")
    print()
    rows = []
    for first, last in [*windows, (turns - 9, turns)]:
        for name in PHASES[:-1]:
            rows.append(row(f"turns {first}-{last}: {name}", partial(phase, name, first, last)))
    table(["phase", *(sides[k].label for k in cols)], rows)
    for key in cols:
        if key not in runs:
            continue
        run = runs[key]
        print(f"\n{sides[key].label}: {run.outcome}")
        seen: Counter[str] = Counter(
            f if len(f) < 400 else f[:400] + "..." for f in run.history.failures
        )
        for text, count in seen.items():
            print(f"  {text}" + (f"  (x{count})" if count > 1 else ""))


# --- main ----------------------------------------------------------------------------


def core_logs_to_stderr() -> None:
    """Send the Temporal core's log lines (the long case's TMPRL1103 payload warnings)
    through ``logging`` to stderr, instead of to stdout among the tables."""
    logger = logging.getLogger("temporalio.core")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
    filter = TelemetryFilter(core_level="WARN", other_level="ERROR")
    forwarding = LogForwardingConfig(logger=logger)
    telemetry = TelemetryConfig(logging=LoggingConfig(filter=filter, forwarding=forwarding))
    Runtime.set_default(Runtime(telemetry=telemetry))


async def main(args: argparse.Namespace) -> None:
    core_logs_to_stderr()
    for fact in machine_facts():
        print(fact)
    tuned = "default dynamic config" if args.default_server else "DevServer low-latency config"
    print(
        f"settings    turns={args.turns} repeats={args.repeats} long={args.long} "
        f"tool_activities={args.tool_activities} ({tuned})"
    )
    print()
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp_name:
        tmp = Path(tmp_name)
        # A root worker runs reads as an unprivileged user, who must reach the file.
        os.chmod(tmp_name, 0o755)
        workspace = tmp / "ws"
        workspace.mkdir()
        (workspace / SMALL_FILE).write_text("x\n")
        (workspace / BIG_FILE).write_text(("x" * 99 + "\n") * (args.long_kb * 10))
        model = ChatServer()
        await model.start()
        os.environ.update(
            {
                "BENCH_PEERS_BASE_URL": model.base_url,
                "BENCH_PEERS_WORKSPACE": str(workspace),
                "OPENAI_BASE_URL": model.base_url,
                "OPENAI_API_KEY": "bench",
                "OPENAI_AGENTS_DISABLE_TRACING": "1",
            }
        )
        server = DevServer(port=free_port(), ui_port=free_port(), db=tmp / "temporal.db", ui=False)
        if args.default_server:
            server.dynamic_config = {}
        await server.start()
        try:
            await bench_all(server, model, tmp, workspace, args)
        finally:
            await server.stop()
            await model.close()


async def bench_all(
    server: DevServer, model: ChatServer, tmp: Path, workspace: Path, args: argparse.Namespace
) -> None:
    clock = FirstActivityClock()
    sides = await build_sides(server, model, tmp, workspace, clock, args.tool_activities)
    bench = Bench(server, model, await Client.connect(server.address), clock, sides)
    for side in sides.values():
        if not side.ran:
            print(f"{side.label}: {side.skipped}")
    ran = [s for s in sides.values() if s.ran]
    runs: dict[str, list[Run]] = {s.key: [] for s in ran}
    long_runs: dict[str, Run] = {}
    async with contextlib.AsyncExitStack() as stack:
        for side in ran:
            if side.worker is not None:
                await stack.enter_async_context(side.worker)
        model.turns, model.path = args.turns, SMALL_FILE
        for side in ran:
            await run_once(bench, side, args.turns, timeout=args.timeout)
        for rep in range(args.repeats):
            order = ran[rep % len(ran) :] + ran[: rep % len(ran)]
            for side in order:
                run = await run_once(bench, side, args.turns, timeout=args.timeout)
                if run.outcome != "completed":
                    raise RuntimeError(f"{side.label}: {run.outcome}; {run.history.failures}")
                if side.key != BARE and len(run.requests) != args.turns + 1:
                    print(f"  note: {side.label} made {len(run.requests)} model requests")
                runs[side.key].append(run)
            line = ", ".join(
                f"{s.label} {runs[s.key][-1].seconds * 1000 / args.turns:.1f}" for s in ran
            )
            print(f"repeat {rep + 1}/{args.repeats}: ms per turn: {line}", flush=True)
        for side in ran:
            last = runs[side.key][-1]
            last.show_json = await show_json_bytes(server, last.workflow_id)
        if args.long:
            model.turns, model.path = args.long_turns, BIG_FILE
            for side in ran:
                if side.key == BARE:
                    continue
                print(f"long case: {side.label}...", flush=True)
                long_runs[side.key] = await run_once(
                    bench,
                    side,
                    args.long_turns,
                    timeout=args.long_timeout,
                    stall=args.stall,
                )
    if model.errors:
        print(f"model server errors: {Counter(model.errors).most_common()}")
    print()
    report(bench, runs, args.turns)
    if args.long:
        print()
        report_long(long_runs, sides, args.long_turns, args.long_kb)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=20, help="tool-call turns per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per side; median shown")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    parser.add_argument(
        "--default-server",
        action="store_true",
        help="run the dev server without DevServer's low-latency dynamic config",
    )
    parser.add_argument(
        "--tool-activities",
        action="store_true",
        help="also run durable-subagents with its read tools as activities, not local ones",
    )
    parser.add_argument(
        "--long", action="store_true", help="also run the long case (--long-turns x --long-kb)"
    )
    parser.add_argument("--long-turns", type=int, default=200, help="turns of the long case")
    parser.add_argument("--long-kb", type=int, default=50, help="KB per tool result (long)")
    parser.add_argument(
        "--long-timeout", type=float, default=300.0, help="seconds per long run at most"
    )
    parser.add_argument(
        "--stall",
        type=float,
        default=15.0,
        help="long case: give up on a side after this many seconds without a model request",
    )
    args = parser.parse_args(argv)
    if args.turns < 1 or args.repeats < 1 or args.long_turns < 10:
        parser.error("--turns and --repeats must be at least 1, --long-turns at least 10")
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
