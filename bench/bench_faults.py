"""Load with faults: concurrent subagents, a 5xx rate, and a worker SIGKILLed mid-run.

Run: ``.venv/bin/python bench/bench_faults.py [--tasks 100] [--fail-rate 0.1] [--kills 2]``

It starts its own Temporal dev server (SQLite file in a temporary directory), a fake
OpenAI server in this process that answers a seeded fraction of requests with 500/503,
and a ``subagents worker`` subprocess, which it SIGKILLs ``--kills`` times during the run
(each time starting a new one). Every task plays the same script, keyed by the task id
in its prompt: ``STEPS`` model turns that each call ``bash`` to write a line naming the
task and the step to a file of its own, then a final answer quoting the last tool output.
At the end it counts what was lost, wrong or done twice. See ``bench/README.md``.

``tests/e2e/test_crash_matrix.py`` runs a small version of this (``run_load``) in the suite.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client

from durable_subagents import SubagentClient, TaskStatus, connect_client
from durable_subagents.agents import BUILTIN_AGENTS
from durable_subagents.storage._local import LocalBlobStore
from durable_subagents.testing import (
    DevServer,
    FakeOpenAIServer,
    FakeReply,
    free_port,
    workspace_for_tools,
)

# Its workers run the scripted model and any model of the local fake servers: a worker
# runs only the models its settings allow.
os.environ.setdefault("SUBAGENTS_ALLOW_SCRIPTED", "true")
os.environ.setdefault("SUBAGENTS_MODELS", "*")

STEPS = 2
"""Tool-calling model turns per task."""
TURNS = STEPS + 1
"""Model requests one task needs when nothing fails."""
SIDE_DIR = "side-effects"
"""The directory (in the worker's workspace) where every tool call writes a file of its own.

Not one shared file: a call's writes land when its command ends, and a file that
another call changed meanwhile is kept as it is (a conflict), so concurrent appends
to one file would lose lines."""
MODEL = "openai:gpt-fake"
CHUNK_DELAY = 0.02
"""Seconds between streamed chunks: a model turn streams for about 0.25 s."""
TOOL_SLEEP = 0.2
"""Seconds each tool call sleeps after its side effect."""
_MARK = re.compile(r"\[load-task [^\]]+\]")


def task_mark(task_id: str) -> str:
    """The marker a task's prompt carries (the fake model keys its script on it)."""
    return f"[load-task {task_id}]"


def step_line(mark: str, step: int) -> str:
    """The line the task's ``step``-th tool call appends to the shared file."""
    return f"{mark} step {step}"


def expected_result(mark: str) -> str:
    """The final answer a task must end with."""
    return f"{mark} done; last tool said: {step_line(mark, STEPS)}"


# ---------------------------------------------------------------------- the fake model


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


@dataclass(frozen=True)
class Turn:
    """What one model request was: whose task, which turn, and whether it was sound."""

    mark: str | None
    turn: int
    """Assistant messages already in the conversation (0 for the first request)."""
    well_formed: bool
    """The conversation is the user prompt, then per earlier turn exactly one assistant
    message with one tool call and its one tool result, in order: no turn or tool
    result lost, doubled or from another task."""
    last_tool: str = ""
    problem: str = ""
    """What was wrong, when not well formed (the first tool result out of place)."""


def read_turn(body: Mapping[str, Any]) -> Turn:
    """Parse a Chat Completions request of a load task."""
    messages = [m for m in body.get("messages", []) if m.get("role") not in ("system", "developer")]
    if not messages or messages[0].get("role") != "user":
        return Turn(None, 0, False, problem="no user prompt first")
    found = _MARK.search(_text(messages[0].get("content")))
    mark = found.group(0) if found else None
    rest = messages[1:]
    turns = sum(1 for m in rest if m.get("role") == "assistant")
    ok = mark is not None and len(rest) == 2 * turns
    problem = "" if ok else f"{len(rest)} messages after the prompt for {turns} turns"
    last_tool = ""
    for i in range(turns if ok else 0):
        assistant, tool = rest[2 * i], rest[2 * i + 1]
        calls = assistant.get("tool_calls") or []
        last_tool = _text(tool.get("content")).strip()
        sound = (
            assistant.get("role") == "assistant"
            and len(calls) == 1
            and tool.get("role") == "tool"
            and tool.get("tool_call_id") == calls[0].get("id")
            and last_tool == step_line(mark or "", i + 1)
        )
        if ok and not sound:
            problem = f"turn {i + 1}: {len(calls)} calls, tool result {last_tool[:300]!r}"
        ok = ok and sound
    return Turn(mark, turns, ok, last_tool, problem)


class TaskScriptServer(FakeOpenAIServer):
    """A fake OpenAI API that answers each request from the task and turn it belongs to.

    ``FakeOpenAIServer`` plays one global queue of replies, which concurrent tasks would
    take in arbitrary order; this one reads the task's marker and turn from the request
    instead, so any number of tasks (and retries) get their own script. ``fail_rate``
    still fails a seeded fraction of requests first. ``turns[i]`` describes
    ``requests[i]``.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.turns: list[Turn] = []

    def _next_reply(self) -> FakeReply:
        # Called by the base class right after it recorded the request's body.
        reply = super()._next_reply()  # the seeded 5xx draw (the queue stays empty)
        turn = read_turn(self.requests[-1])
        self.turns.append(turn)
        if reply.status != 200 or turn.mark is None:
            return reply
        if turn.turn < STEPS:
            line = step_line(turn.mark, turn.turn + 1)
            # The sleep keeps calls running, so a kill finds some in flight: they run
            # again, and what a killed attempt wrote never lands. A line twice is a kill
            # after the call's writes landed, before its result was recorded.
            command = f"echo '{line}' | tee \"$(mktemp {SIDE_DIR}/XXXXXXXX)\"; sleep {TOOL_SLEEP}"
            return FakeReply(tool_calls=[{"name": "bash", "arguments": {"command": command}}])
        return FakeReply(text=f"{turn.mark} done; last tool said: {turn.last_tool or '?'}")


# ---------------------------------------------------------------------- worker process


class WorkerProcess:
    """A ``subagents worker`` subprocess; its stdout and stderr go to ``log``.

    Args:
        address: Temporal frontend ``host:port``.
        namespace: Temporal namespace.
        task_queue: The queue to poll.
        workspace: The worker's workspace root (``--workspace``).
        blob_dir: ``SUBAGENTS_BLOB_DIR``, shared with the clients.
        log: Where the worker's output is appended.
        env: Extra environment (e.g. ``OPENAI_BASE_URL``).
        args: Extra ``subagents worker`` options (e.g. ``--sticky-queue-timeout 1``).
    """

    def __init__(
        self,
        *,
        address: str,
        namespace: str,
        task_queue: str,
        workspace: Path,
        blob_dir: Path,
        log: Path,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
    ) -> None:
        self.argv = [sys.executable, "-m", "durable_subagents", "worker", "--address", address]
        self.argv += ["--namespace", namespace, "--task-queue", task_queue]
        self.argv += ["--workspace", str(workspace), *args]
        self.env = {**os.environ, "SUBAGENTS_BLOB_DIR": str(blob_dir), **(env or {})}
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    async def start(self, timeout: float = 300.0) -> None:
        """Start the process and wait until it polls (it prints ``worker on ...``).

        The wait ends when the worker is ready or has exited. ``timeout`` only stops a
        start that hangs: several workers importing at once on a busy machine took
        over a minute.
        """
        offset = self.log.stat().st_size if self.log.exists() else 0
        self.proc = self._spawn()
        deadline = time.monotonic() + timeout
        while True:
            with self.log.open("rb") as f:
                f.seek(offset)
                if b"worker on" in f.read():
                    return
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"worker not ready within {timeout:g}s:\n{self.log_tail()}")
            await asyncio.sleep(0.05)

    def _spawn(self) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as out:
            return subprocess.Popen(
                self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL the worker (no graceful shutdown) and reap it."""
        assert self.proc is not None, "not started"
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def close(self) -> None:
        """Kill the worker if it still runs (for ``finally`` blocks)."""
        if self.alive():
            self.kill()


async def poll(predicate: Callable[[], bool], interval: float = 0.01) -> None:
    """Return once ``predicate()`` is true (checked every ``interval`` seconds)."""
    while True:
        if predicate():
            return
        await asyncio.sleep(interval)


async def in_flight(temporal: Client, task_ids: list[str]) -> Counter[str]:
    """Activities started and not finished, by type, over ``task_ids``.

    Called right after a SIGKILL, before a new worker starts: these are the model turns
    and tool calls the dead worker was running, the only ones that may run twice.
    """
    counts: Counter[str] = Counter()
    limit = asyncio.Semaphore(20)

    async def one(task_id: str) -> None:
        async with limit:
            desc = await temporal.get_workflow_handle(task_id).describe()
        for pending in desc.raw_description.pending_activities:
            if pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
                counts[pending.activity_type.name] += 1

    await asyncio.gather(*(one(t) for t in task_ids))
    return counts


# ---------------------------------------------------------------------- the load


@dataclass
class LoadResult:
    """What a load run did, counted from the tasks, the side-effect files and the fake API."""

    tasks: int
    completed: int = 0
    lost: list[str] = field(default_factory=list)
    """Tasks that did not complete (failed, cancelled or still running at the timeout)."""
    wrong: list[str] = field(default_factory=list)
    """Completed tasks whose result is not the expected text."""
    side_effects: int = 0
    side_expected: int = 0
    duplicates: int = 0
    """Side-effect lines beyond one per tool call."""
    missing: int = 0
    """Tool calls whose line is in no file."""
    stray: int = 0
    """Lines in the files that no tool call should have written."""
    requests: int = 0
    requests_min: int = 0
    injected_5xx: int = 0
    resent: int = 0
    """Successful (200) model requests beyond one per task and turn."""
    malformed: int = 0
    """Model requests whose conversation was not well formed (see ``Turn``)."""
    problems: list[str] = field(default_factory=list)
    """Why, for the first few malformed requests."""
    kills: int = 0
    in_flight_tools: int = 0
    in_flight_models: int = 0
    wall: float = 0.0
    latencies: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Nothing lost, wrong or malformed; repeats only of what was in flight."""
        return (
            not self.lost
            and not self.wrong
            and not self.missing
            and not self.stray
            and not self.malformed
            and self.duplicates <= self.in_flight_tools
            and self.resent <= self.in_flight_models
        )

    def rows(self) -> list[tuple[str, str]]:
        def pct(q: float) -> float:
            ordered = sorted(self.latencies) or [0.0]
            return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

        return [
            ("tasks completed / total", f"{self.completed} / {self.tasks}"),
            ("lost (not completed)", str(len(self.lost))),
            ("wrong results", str(len(self.wrong))),
            ("malformed model requests", str(self.malformed)),
            ("tool side effects / expected", f"{self.side_effects} / {self.side_expected}"),
            ("  missing / stray lines", f"{self.missing} / {self.stray}"),
            (
                "  duplicates (in flight at kills)",
                f"{self.duplicates} ({self.in_flight_tools} tool calls)",
            ),
            ("model requests / minimum", f"{self.requests} / {self.requests_min}"),
            ("  5xx injected", str(self.injected_5xx)),
            (
                "  re-sent after a kill (in flight)",
                f"{self.resent} ({self.in_flight_models} model turns)",
            ),
            ("worker kills (SIGKILL)", str(self.kills)),
            ("wall time (s)", f"{self.wall:.1f}"),
            ("task latency p50 / p95 (s)", f"{pct(0.5):.1f} / {pct(0.95):.1f}"),
            ("task latency max (s)", f"{max(self.latencies, default=0.0):.1f}"),
        ]


def print_rows(rows: list[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in rows)
    value_width = max(len(value) for _, value in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value:>{value_width}}")


async def run_load(
    temporal: Client,
    *,
    address: str,
    namespace: str,
    tmp: Path,
    tasks: int = 100,
    fail_rate: float = 0.1,
    kills: int = 2,
    seed: int = 1,
    timeout: float = 300.0,
    log: Callable[[str], None] | None = None,
) -> LoadResult:
    """Run ``tasks`` concurrent subagents through ``kills`` worker SIGKILLs and a 5xx rate.

    Kill ``i`` happens when ``i / (kills + 1)`` of the minimum model requests have been
    answered; a new worker is started half a second later. Returns the counts; the
    caller decides what is acceptable (``LoadResult.ok``).
    """
    say = log or (lambda _: None)
    workspace, blob_dir = tmp / "ws", tmp / "blobs"
    (workspace / SIDE_DIR).mkdir(parents=True, exist_ok=True)
    workspace_for_tools(workspace)  # a root worker's commands run as its owner
    queue = f"faults-{uuid.uuid4().hex[:10]}"
    result = LoadResult(tasks=tasks, requests_min=tasks * TURNS, side_expected=tasks * STEPS)
    workers: list[WorkerProcess] = []
    async with TaskScriptServer(fail_rate=fail_rate, seed=seed, chunk_delay=CHUNK_DELAY) as srv:
        env = {"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "sk-fake-load"}

        async def new_worker() -> WorkerProcess:
            worker = WorkerProcess(
                address=address,
                namespace=namespace,
                task_queue=queue,
                workspace=workspace,
                blob_dir=blob_dir,
                log=tmp / "worker.log",
                env=env,
            )
            workers.append(worker)
            await worker.start()
            return worker

        try:
            worker = await new_worker()
            client = SubagentClient(
                temporal,
                task_queue=queue,
                blob_store=LocalBlobStore(blob_dir / namespace),
                # A step a kill cut off runs again, as a retry would.
                agents={
                    "general": BUILTIN_AGENTS["general"].model_copy(
                        update={"on_interrupted": "rerun"}
                    )
                },
            )
            ids = [f"{queue}-{i:03d}" for i in range(tasks)]
            started = time.monotonic()
            await asyncio.gather(
                *(
                    client.spawn_task(
                        "general", f"{task_mark(t)} run the steps", model=MODEL, task_id=t
                    )
                    for t in ids
                )
            )
            say(f"spawned {tasks} tasks in {time.monotonic() - started:.1f}s")
            waits = asyncio.gather(*(client.check_task(t, wait=True, timeout=timeout) for t in ids))
            for k in range(1, kills + 1):
                threshold = result.requests_min * k // (kills + 1)

                def reached(n: int = threshold) -> bool:
                    return srv.completed_streams >= n or waits.done()

                await poll(reached)
                if waits.done():
                    break
                worker.kill()
                result.kills += 1
                flying = await in_flight(temporal, ids)
                result.in_flight_tools += flying["run_tool"]
                result.in_flight_models += flying["model_turn"]
                say(
                    f"kill {k} at {time.monotonic() - started:.1f}s "
                    f"({srv.completed_streams} answers): in flight {dict(flying)}"
                )
                await asyncio.sleep(0.5)  # nothing runs: no worker at all
                worker = await new_worker()
            infos = await waits
            result.wall = time.monotonic() - started
        finally:
            for w in workers:
                w.close()
        tally(result, ids, infos, srv, workspace / SIDE_DIR)
    return result


def tally(
    result: LoadResult,
    ids: list[str],
    infos: list[Any],
    srv: TaskScriptServer,
    side_dir: Path,
) -> None:
    """Fill ``result`` from the tasks' final states, the side-effect files and the fake API."""
    for task_id, info in zip(ids, infos, strict=True):
        if info.status != TaskStatus.COMPLETED:
            result.lost.append(f"{task_id}: {info.status.value} {info.error or ''}".strip())
            continue
        result.completed += 1
        if info.result != expected_result(task_mark(task_id)):
            result.wrong.append(f"{task_id}: {info.result!r}")
        if info.created_at and info.finished_at:
            result.latencies.append((info.finished_at - info.created_at).total_seconds())
    lines = Counter(line for f in side_dir.iterdir() for line in f.read_text().splitlines())
    expected = {step_line(task_mark(t), s) for t in ids for s in range(1, STEPS + 1)}
    result.side_effects = sum(lines.values())
    result.duplicates = sum(n - 1 for line, n in lines.items() if line in expected)
    result.missing = sum(1 for line in expected if not lines[line])
    result.stray = sum(n for line, n in lines.items() if line not in expected)
    result.requests = len(srv.requests)
    answered: Counter[tuple[str | None, int]] = Counter()
    for turn, outcome in zip(srv.turns, srv.outcomes, strict=True):
        if outcome in ("500", "503"):
            result.injected_5xx += 1
        else:
            answered[(turn.mark, turn.turn)] += 1
        result.malformed += not turn.well_formed
        if not turn.well_formed and len(result.problems) < 5:
            result.problems.append(f"{turn.mark}: {turn.problem}")
    result.resent = sum(n - 1 for n in answered.values())


# ---------------------------------------------------------------------- main


def machine_facts() -> list[str]:
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return [
        f"date        {datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
        f"machine     {platform.system()} {platform.release()} · {cpu}",
        f"nproc       {len(os.sched_getaffinity(0))}",
        f"python      {platform.python_version()}",
        f"temporalio  {version('temporalio')}",
    ]


async def main(args: argparse.Namespace) -> int:
    for fact in machine_facts():
        print(fact)
    print(f"settings    tasks={args.tasks} fail_rate={args.fail_rate} kills={args.kills}")
    print(f"            seed={args.seed} steps={STEPS} (model turns per task: {TURNS})")
    print()
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as tmp_name:
        tmp = Path(tmp_name)
        server = DevServer(port=free_port(), ui_port=free_port(), db=tmp / "temporal.db", ui=False)
        await server.start()
        try:
            temporal = await connect_client(server.address, server.namespace)
            result = await run_load(
                temporal,
                address=server.address,
                namespace=server.namespace,
                tmp=tmp,
                tasks=args.tasks,
                fail_rate=args.fail_rate,
                kills=args.kills,
                seed=args.seed,
                timeout=args.timeout,
                log=lambda line: print(line, flush=True),
            )
        finally:
            await server.stop()
    print()
    print_rows(result.rows())
    for what, items in (("lost", result.lost), ("wrong", result.wrong)):
        for item in items[:10]:
            print(f"{what}: {item}")
    print()
    print("OK" if result.ok else "FAILED: see the lines above")
    return 0 if result.ok else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=100, help="concurrent subagent tasks")
    parser.add_argument("--fail-rate", type=float, default=0.1, help="5xx fraction (0-1)")
    parser.add_argument("--kills", type=int, default=2, help="worker SIGKILLs during the run")
    parser.add_argument("--seed", type=int, default=1, help="seed of the 5xx draws")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait per task")
    args = parser.parse_args(argv)
    if args.tasks < 1 or args.kills < 0 or not 0 <= args.fail_rate < 1:
        parser.error("--tasks >= 1, --kills >= 0 and 0 <= --fail-rate < 1")
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
