"""Crash matrix: a real ``subagents worker`` process is SIGKILLed at each phase of a task.

Each case runs its own fake OpenAI server and worker subprocess on its own task queue,
kills the worker at one phase (mid model stream, mid tool call, mid local read, while
paused for an approval, between turns), starts a new worker process, and checks that
the task ends with the right answer, that tool side effects happened once (a call that
was in flight at the kill runs again, but what its killed attempt wrote never lands) and
that no turn the history had recorded was sent to the model again. The last test is a
small run of ``bench/bench_faults.py``'s load: 12 tasks, a 10 % 5xx rate and a kill. All
of them run concurrently in one module fixture; each test asserts on its own part.

A SIGKILLed activity is noticed by its heartbeat timeout (15 s for a model turn, 10 s
for a tool call); a workflow task started on the dead worker by its 10 s workflow task
timeout; one still on the dead worker's sticky queue moves after ``STICKY`` seconds
(``subagents worker --sticky-queue-timeout``). The module takes about 25 s.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus

from bench.bench_faults import LoadResult, WorkerProcess, run_load
from durable_subagents import SubagentClient, TaskInfo, TaskStatus
from durable_subagents.agents import BUILTIN_AGENTS
from durable_subagents.storage._local import LocalBlobStore
from durable_subagents.testing import DevServer, FakeOpenAIServer

from ..helpers import CEILING
from ..helpers.processes import processes_matching, unique_sleep
from ..helpers.providers import activity_runs
from ..helpers.tasks import give_to_tool_user

SIDE = "side.txt"
pytestmark = pytest.mark.timeout(600)
"""The first test of the module waits for every case of ``runs`` (they run at once): on a
busy machine, more than the 180 s one test may take."""

MODEL = "openai:gpt-crash"
STICKY = 1.0
"""``subagents worker --sticky-queue-timeout``: a dead worker's workflow tasks move on
after this many seconds."""


def bash(command: str) -> list[dict[str, Any]]:
    return [{"name": "bash", "arguments": {"command": command}}]


def append(line: str) -> list[dict[str, Any]]:
    """A bash call that appends ``line`` to the side-effect file and prints it."""
    return bash(f"echo '{line}' | tee -a {SIDE}")


@dataclass
class Case:
    """One crash case: the phase, and what it saw."""

    phase: str
    task_id: str = ""
    info: TaskInfo | None = None
    side: Counter[str] = field(default_factory=Counter)
    requests: list[dict[str, Any]] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    killed_after: list[str] = field(default_factory=list)
    """Activities the history had completed when the worker was killed."""


class Phase:
    """How a phase scripts the model, where it kills the worker, and what it expects."""

    name: str
    turns: int
    """Model turns the task needs."""
    expect_side: dict[str, int]
    expect_requests: int
    tool_results: list[str]
    """What the model saw of each tool call, in order."""
    permissions: list[dict[str, str]] | None = None
    token_budget: int | None = None

    def prepare(self, workspace: Path) -> None:
        """Files the phase needs in the workspace."""

    def script(self, srv: FakeOpenAIServer) -> None:
        raise NotImplementedError

    async def kill(self, ctx: CaseContext) -> None:
        """Wait for the phase, then SIGKILL ``ctx.worker``."""
        raise NotImplementedError

    async def recover(self, ctx: CaseContext) -> TaskInfo:
        """Start the second worker and wait for the task to end."""
        await ctx.start_worker()
        return await ctx.client.check_task(ctx.task_id, wait=True, timeout=CEILING)

    @property
    def result(self) -> str:
        return f"final answer after a crash at {self.name}"


@dataclass
class CaseContext:
    temporal: Client
    client: SubagentClient
    srv: FakeOpenAIServer
    task_id: str
    workspace: Path
    new_worker: Callable[[], WorkerProcess]
    worker: WorkerProcess | None = None
    killed_after: list[str] = field(default_factory=list)

    async def start_worker(self) -> None:
        self.worker = self.new_worker()
        await self.worker.start()

    def side(self) -> Counter[str]:
        path = self.workspace / SIDE
        return Counter(path.read_text().splitlines() if path.exists() else [])

    async def completed_activities(self) -> list[str]:
        handle = self.temporal.get_workflow_handle(self.task_id)
        scheduled: dict[int, str] = {}
        done = []
        async for e in handle.fetch_history_events():
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                scheduled[e.event_id] = (
                    e.activity_task_scheduled_event_attributes.activity_type.name
                )
            elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                attrs = e.activity_task_completed_event_attributes
                done.append(scheduled[attrs.scheduled_event_id])
        return done

    async def kill(self) -> None:
        assert self.worker is not None
        self.worker.kill()
        self.killed_after = await self.completed_activities()


async def wait_until(predicate: Callable[[], bool], what: str, timeout: float = CEILING) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


class ModelCall(Phase):
    """The worker dies while the model streams turn 2 (the stream hangs after a chunk)."""

    name = "model_call"
    turns = 3
    expect_side = {"one": 1, "two": 1}
    expect_requests = 4  # turn 2 was in flight: it is sent again, nothing else is
    tool_results = ["one", "two"]

    def script(self, srv: FakeOpenAIServer) -> None:
        srv.add_reply(tool_calls=append("one"))
        srv.add_reply(text="this stream never ends", hang=True)
        srv.add_reply(tool_calls=append("two"))
        srv.add_reply(text=self.result)

    async def kill(self, ctx: CaseContext) -> None:
        await asyncio.wait_for(ctx.srv.hanging.wait(), CEILING)
        await ctx.kill()


class ToolCall(Phase):
    """The worker dies while bash runs turn 2's ``sleep``.

    The first attempt sleeps until the worker is killed; the retry finds the file the
    test writes after the kill and goes on at once.
    """

    name = "tool_call"
    turns = 3
    # The killed attempt had written "two", which died with it (what a command writes
    # lands when it ends): the retry writes "two" and "two-done", once each.
    expect_side = {"one": 1, "two": 1, "two-done": 1}
    expect_requests = 3
    tool_results = ["one", "two-done"]
    sleep = unique_sleep(3602)
    killed = "worker-killed"

    def script(self, srv: FakeOpenAIServer) -> None:
        srv.add_reply(tool_calls=append("one"))
        command = f"echo two >> {SIDE}; [ -f {self.killed} ] || {self.sleep}"
        srv.add_reply(tool_calls=bash(f"{command}; echo two-done | tee -a {SIDE}"))
        srv.add_reply(text=self.result)

    async def kill(self, ctx: CaseContext) -> None:
        await wait_until(lambda: bool(processes_matching(self.sleep)), "the sleep to start")
        await ctx.kill()
        (ctx.workspace / self.killed).touch()


class Paused(Phase):
    """The worker dies while turn 2's call waits for approval; approved while none runs."""

    name = "paused_approve_while_down"
    turns = 3
    expect_side = {"one": 1, "two": 1}
    expect_requests = 3
    tool_results = ["one", "two"]
    pause_id: str | None = None
    permissions = [{"tool": "bash", "pattern": "*two*", "action": "ask"}]

    def script(self, srv: FakeOpenAIServer) -> None:
        srv.add_reply(tool_calls=append("one"))
        srv.add_reply(tool_calls=append("two"))
        srv.add_reply(text=self.result)

    async def kill(self, ctx: CaseContext) -> None:
        info = await ctx.client.check_task(ctx.task_id, wait=True, timeout=CEILING)
        assert info.status == TaskStatus.PAUSED, info
        self.pause_id = info.pause_id
        await ctx.kill()

    async def recover(self, ctx: CaseContext) -> TaskInfo:
        await ctx.client.approve(ctx.task_id)
        await ctx.start_worker()
        return await ctx.client.check_task(
            ctx.task_id, wait=True, timeout=CEILING, after_pause=self.pause_id
        )


class PausedApprovedLater(Paused):
    """As ``Paused``, but approved once the new worker runs."""

    name = "paused_approve_after_restart"

    async def recover(self, ctx: CaseContext) -> TaskInfo:
        await ctx.start_worker()
        paused = await ctx.client.check_task(ctx.task_id)
        assert paused.status == TaskStatus.PAUSED and paused.pause_id == self.pause_id
        await ctx.client.approve(ctx.task_id)
        return await ctx.client.check_task(
            ctx.task_id, wait=True, timeout=CEILING, after_pause=self.pause_id
        )


class BetweenTurns(Phase):
    """The worker dies after a turn's result is recorded and before the next one starts.

    The worker is frozen (SIGSTOP) every few milliseconds while the server is asked
    whether any activity is scheduled or running; the first time none is (the
    workflow task that schedules the next turn is pending or running on the frozen
    worker), it is SIGKILLed. Otherwise it is thawed (SIGCONT) and runs on.
    """

    name = "between_turns"
    turns = 4
    expect_side = {"one": 1, "two": 1, "three": 1}
    expect_requests = 4  # nothing was in flight: nothing is sent twice
    tool_results = ["one", "two", "three"]

    def script(self, srv: FakeOpenAIServer) -> None:
        for line in ("one", "two", "three"):
            srv.add_reply(tool_calls=append(line))
        srv.add_reply(text=self.result)

    async def kill(self, ctx: CaseContext) -> None:
        assert ctx.worker is not None
        handle = ctx.temporal.get_workflow_handle(ctx.task_id)
        deadline = time.monotonic() + CEILING
        while time.monotonic() < deadline:
            if ctx.srv.completed_streams >= 1:
                ctx.worker.signal(signal.SIGSTOP)
                await asyncio.sleep(0.02)  # let what the worker already sent arrive
                desc = await handle.describe()
                if desc.status != WorkflowExecutionStatus.RUNNING:
                    break
                if not desc.raw_description.pending_activities:
                    await ctx.kill()
                    return
                ctx.worker.signal(signal.SIGCONT)
            await asyncio.sleep(0.003)
        raise AssertionError("never caught the worker between turns")


class LocalRead(Phase):
    """The worker dies while turn 2's ``grep`` runs as a local activity.

    With a token budget the workflow runs a turn's reads itself. Its model turn is
    recorded; the workflow task that runs the read is not, so another worker runs that
    task again: the read runs again, the model is not asked again.
    """

    name = "local_read"
    turns = 3
    expect_side = {"one": 1}
    expect_requests = 3
    token_budget = 10**9
    files = 4
    tool_results = [
        "one",
        "\n".join(f"big{i}.txt:270001: needle here" for i in range(files)),
    ]

    def prepare(self, workspace: Path) -> None:
        for i in range(self.files):  # about a second of searching each
            (workspace / f"big{i}.txt").write_text(
                "no match on this line\n" * 270_000 + "needle here\n"
            )

    def script(self, srv: FakeOpenAIServer) -> None:
        srv.add_reply(tool_calls=append("one"))
        srv.add_reply(tool_calls=[{"name": "grep", "arguments": {"pattern": "needle"}}])
        srv.add_reply(text=self.result)

    async def kill(self, ctx: CaseContext) -> None:
        await wait_until(lambda: ctx.srv.completed_streams >= 2, "the grep call")
        await asyncio.sleep(0.5)  # the search has begun; it needs seconds more
        await ctx.kill()
        self.reads_at_kill = await local_reads(ctx.temporal, ctx.task_id)

    reads_at_kill: int = -1


class ReadInTurn(LocalRead):
    """The worker dies while turn 2's ``grep`` runs inside its model turn.

    The turn is not recorded: another worker runs it again once its heartbeat times out,
    model call included, with the conversation the first attempt sent.
    """

    name = "read_in_turn"
    expect_requests = 4
    token_budget = None

    def script(self, srv: FakeOpenAIServer) -> None:
        grep = [{"name": "grep", "arguments": {"pattern": "needle"}}]
        srv.add_reply(tool_calls=append("one"))
        srv.add_reply(tool_calls=grep)
        srv.add_reply(tool_calls=grep)  # the turn again, on the second worker
        srv.add_reply(text=self.result)


async def turn_reads(temporal: Client, task_id: str) -> int:
    """How many reads the task's recorded model turns ran themselves."""
    converter = temporal.data_converter.payload_converter
    count = 0
    async for e in temporal.get_workflow_handle(task_id).fetch_history_events():
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            payload = e.activity_task_completed_event_attributes.result.payloads[0]
            count += len(converter.from_payload(payload, dict).get("read_results", {}))
    return count


async def local_reads(temporal: Client, task_id: str) -> int:
    """How many tool calls the task's history recorded as local activities."""
    return sum(run.local for run in await activity_runs(temporal, task_id))


PHASES: dict[str, Phase] = {
    p.name: p
    for p in (
        ModelCall(),
        ToolCall(),
        Paused(),
        PausedApprovedLater(),
        BetweenTurns(),
        LocalRead(),
        ReadInTurn(),
    )
}


async def run_case(phase: Phase, temporal: Client, server: DevServer, tmp: Path) -> Case:
    case = Case(phase.name)
    workspace, blobs = tmp / "ws", tmp / "blobs"
    workspace.mkdir(parents=True)
    phase.prepare(workspace)
    give_to_tool_user(workspace)
    queue = f"crash-{phase.name}-{uuid.uuid4().hex[:6]}"
    client = SubagentClient(
        temporal,
        task_queue=queue,
        blob_store=LocalBlobStore(blobs / server.namespace),
        # A call in flight at the kill runs again (the default reports it to the model).
        agents={
            "general": BUILTIN_AGENTS["general"].model_copy(update={"on_interrupted": "rerun"})
        },
    )
    workers: list[WorkerProcess] = []
    async with FakeOpenAIServer() as srv:

        def new_worker() -> WorkerProcess:
            worker = WorkerProcess(
                address=server.address,
                namespace=server.namespace,
                task_queue=queue,
                workspace=workspace,
                blob_dir=blobs,
                log=tmp / "worker.log",
                env={"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "sk-fake-crash"},
                args=["--sticky-queue-timeout", str(STICKY)],
            )
            workers.append(worker)
            return worker

        phase.script(srv)
        ctx = CaseContext(temporal, client, srv, "", workspace, new_worker)
        try:
            await ctx.start_worker()
            started = time.monotonic()
            ctx.task_id = await client.spawn_task(
                "general",
                f"crash at {phase.name}",
                model=MODEL,
                permissions=phase.permissions,
                token_budget=phase.token_budget,
            )
            await phase.kill(ctx)
            assert not workers[0].alive()
            case.info = await phase.recover(ctx)
            case.seconds = time.monotonic() - started
        finally:
            for w in workers:
                w.close()
        case.task_id = ctx.task_id
        case.side = ctx.side()
        case.requests = list(srv.requests)
        case.outcomes = list(srv.outcomes)
        case.killed_after = ctx.killed_after
    return case


LOAD = "load"
"""The key of the small load run in ``runs``."""


def selected(request: pytest.FixtureRequest) -> list[str]:
    """The runs this session's tests of this module need (``-k`` runs only those)."""
    names = []
    for item in request.session.items:
        if getattr(item, "module", None) is not request.module:
            continue
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "phase" in callspec.params:
            names.append(callspec.params["phase"])
        elif getattr(item, "originalname", "") == "test_load_with_5xx_and_a_worker_kill":
            names.append(LOAD)
    return names


@pytest.fixture(scope="module")
async def runs(
    request: pytest.FixtureRequest,
    dev_server: DevServer,
    temporal_client: Client,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """Every crash case and the load run this module's selected tests need, concurrently.

    Each is mostly waiting (heartbeat and sticky-queue timeouts): together they take as
    long as the slowest (the model-call case, ~17 s) instead of the sum (~70 s).
    """
    names = selected(request)

    async def one(name: str) -> Any:
        tmp = tmp_path_factory.mktemp(name)
        if name != LOAD:
            return await run_case(PHASES[name], temporal_client, dev_server, tmp)
        (tmp / "ws").mkdir()
        give_to_tool_user(tmp / "ws")  # a root worker runs the commands as its owner
        return await run_load(
            temporal_client,
            address=dev_server.address,
            namespace=dev_server.namespace,
            tmp=tmp,
            tasks=12,
            fail_rate=0.1,
            kills=1,
            seed=7,
            timeout=CEILING,
        )

    results = await asyncio.gather(*(one(n) for n in names), return_exceptions=True)
    return dict(zip(names, results, strict=True))


def conversation(body: dict[str, Any]) -> list[tuple[str, str]]:
    """``(role, content or tool call)`` of a request's messages, system prompt left out."""
    out = []
    for m in body["messages"]:
        if m["role"] == "system":
            continue
        calls = m.get("tool_calls") or []
        text = calls[0]["function"]["arguments"] if calls else (m.get("content") or "")
        out.append((m["role"], str(text)))
    return out


@pytest.mark.parametrize("phase", list(PHASES))
async def test_worker_sigkill_at(phase: str, runs: dict[str, Any], temporal_client: Client) -> None:
    case = runs[phase]
    if isinstance(case, BaseException):
        raise case
    assert isinstance(case, Case)
    spec = PHASES[phase]
    info = case.info
    assert info is not None
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == spec.result
    assert info.turns == spec.turns
    # Tool side effects: once per call. A call in flight at the kill runs again, but what
    # its killed attempt wrote never lands.
    assert dict(case.side) == spec.expect_side
    # The model: turns the history had recorded are never sent again.
    assert len(case.requests) == spec.expect_requests, case.outcomes
    assert len(case.requests) <= spec.turns + 1
    # The final request carries each turn once, in order, and the tool results.
    last = conversation(case.requests[-1])
    roles = [role for role, _ in last]
    assert roles == ["user"] + ["assistant", "tool"] * (spec.turns - 1)
    tool_results = [text.strip() for role, text in last if role == "tool"]
    assert tool_results == spec.tool_results
    if phase == "model_call":
        # the retry sent exactly the conversation of the attempt that died
        assert conversation(case.requests[1]) == conversation(case.requests[2])
        assert case.killed_after == ["model_turn", "run_tool"]
    if phase == "tool_call":
        # killed while the call ran: its turn was recorded, its result not; it ran again
        assert case.killed_after == ["model_turn", "run_tool", "model_turn"]
        runs = await activity_runs(temporal_client, case.task_id)
        assert [r.attempt for r in runs if r.activity == "run_tool"] == [1, 2]
    if phase == "local_read":
        assert isinstance(spec, LocalRead)
        assert case.killed_after == ["model_turn", "run_tool", "model_turn"]
        assert spec.reads_at_kill == 0, "killed after the read was recorded"
        assert await local_reads(temporal_client, case.task_id) == 1
        assert await turn_reads(temporal_client, case.task_id) == 0
    if phase == "read_in_turn":
        assert conversation(case.requests[1]) == conversation(case.requests[2])
        assert case.killed_after == ["model_turn", "run_tool"]
        assert await local_reads(temporal_client, case.task_id) == 0
        assert await turn_reads(temporal_client, case.task_id) == 1
    if phase == "between_turns":
        assert case.killed_after, "killed before the first turn"
        assert len(case.killed_after) < 2 * spec.turns - 1, "killed after the last turn"
    print(f"{phase}: {case.seconds:.1f}s, killed after {case.killed_after}")


async def test_load_with_5xx_and_a_worker_kill(runs: dict[str, Any]) -> None:
    """A small ``bench_faults`` run: 12 tasks, 10 % 5xx, one SIGKILL mid-run."""
    result = runs[LOAD]
    if isinstance(result, BaseException):
        raise result
    assert isinstance(result, LoadResult)
    print("\n".join(f"{name}: {value}" for name, value in result.rows()))
    assert result.kills == 1
    assert result.completed == 12 and result.lost == []
    assert result.wrong == []
    assert result.malformed == 0, result.problems
    assert result.missing == 0 and result.stray == 0
    assert result.duplicates <= result.in_flight_tools
    assert result.resent <= result.in_flight_models
    assert result.injected_5xx > 0
    assert result.requests == result.requests_min + result.injected_5xx + result.resent
