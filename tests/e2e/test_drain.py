"""Graceful drain: SIGTERM to a real ``subagents worker`` process in the middle of a task.

The worker stops polling at once, lets running model turns and tool calls finish within
its drain timeout, and hands back what still runs then, so a second worker starts it at
once instead of after a heartbeat timeout. Nothing the history recorded runs again.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench.bench_faults import WorkerProcess
from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.storage._local import LocalBlobStore
from durable_subagents.testing import DevServer, FakeOpenAIServer

from ..helpers.processes import processes_matching, unique_sleep
from ..helpers.tasks import give_to_tool_user

MODEL = "openai:gpt-drain"
DRAIN = 2.0
STICKY = 1.0


class Deployment:
    """Two worker processes on one queue, a client, and a fake OpenAI server."""

    def __init__(
        self,
        tmp: Path,
        server: DevServer,
        temporal: Client,
        srv: FakeOpenAIServer,
        drain: float = DRAIN,
    ) -> None:
        self.workspace = tmp / "ws"
        self.workspace.mkdir()
        give_to_tool_user(self.workspace)
        self.queue = f"drain-{uuid.uuid4().hex[:8]}"
        blobs = tmp / "blobs"
        self.client = SubagentClient(
            temporal, task_queue=self.queue, blob_store=LocalBlobStore(blobs / server.namespace)
        )
        self.temporal = temporal
        self.workers = [
            WorkerProcess(
                address=server.address,
                namespace=server.namespace,
                task_queue=self.queue,
                workspace=self.workspace,
                blob_dir=blobs,
                log=tmp / f"worker-{name}.log",
                env={"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "sk-fake-drain"},
                args=["--drain-timeout", str(drain), "--sticky-queue-timeout", str(STICKY)],
            )
            for name in ("a", "b")
        ]

    def close(self) -> None:
        for worker in self.workers:
            worker.close()

    async def stop_first(self) -> None:
        """Start worker b, then SIGTERM worker a."""
        await self.workers[1].start()
        self.workers[0].signal(signal.SIGTERM)

    async def history(self, task_id: str) -> list[Any]:
        handle = self.temporal.get_workflow_handle(task_id)
        return [e async for e in handle.fetch_history_events()]


async def wait_for(predicate: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def turn_of(request: dict[str, Any]) -> int:
    """Which model turn a request is: one plus the assistant messages it carries."""
    return 1 + sum(1 for m in request["messages"] if m["role"] == "assistant")


def started_attempts(events: list[Any], activity: str) -> list[tuple[int, Any]]:
    """(attempt, failure of the attempt before) of each started ``activity``."""
    scheduled = {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    out = []
    for e in events:
        if e.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            continue
        attrs = e.activity_task_started_event_attributes
        if scheduled[attrs.scheduled_event_id] == activity:
            out.append((attrs.attempt, attrs.last_failure))
    return out


async def test_sigterm_during_a_long_model_turn_hands_it_to_the_next_worker(
    dev_server: DevServer, temporal_client: Client, tmp_path: Path
) -> None:
    async with FakeOpenAIServer() as srv:
        ops = Deployment(tmp_path, dev_server, temporal_client, srv)
        srv.add_reply(tool_calls=[{"name": "read_file", "arguments": {"path": "."}}])
        # Turn 2 streams for a minute: far longer than the drain.
        srv.add_reply(text=" ".join(["slow"] * 60), chunk_delay=1.0)
        srv.add_reply(text="answered by the second worker")
        try:
            await ops.workers[0].start()
            task_id = await ops.client.spawn_task("explore", "drain me", model=MODEL)
            await wait_for(lambda: len(srv.requests) >= 2, "turn 2 to start")
            await ops.stop_first()
            info = await ops.client.check_task(task_id, wait=True, timeout=60)
            code = await asyncio.to_thread(ops.workers[0].proc.wait, 30)  # type: ignore[union-attr]
        finally:
            ops.close()
    assert info.status == TaskStatus.COMPLETED, info
    assert info.result == "answered by the second worker"
    assert code == 128 + signal.SIGTERM
    # Turn 1 was recorded before the SIGTERM: never sent again; turn 2 twice.
    assert [turn_of(r) for r in srv.requests] == [1, 2, 2]
    # (the history keeps the last attempt of each activity, with the failure before it):
    # handed back at the drain's end, not timed out by the server.
    turns = started_attempts(await ops.history(task_id), "model_turn")
    assert [attempt for attempt, _ in turns] == [1, 2]
    handed = turns[-1][1]
    assert handed.application_failure_info.type == "WorkerShutdown"
    assert "handed back to another worker" in handed.message


async def test_a_model_turn_that_ends_within_the_drain_is_not_repeated(
    dev_server: DevServer, temporal_client: Client, tmp_path: Path
) -> None:
    drain = 15.0
    async with FakeOpenAIServer() as srv:
        ops = Deployment(tmp_path, dev_server, temporal_client, srv, drain=drain)
        srv.add_reply(tool_calls=[{"name": "read_file", "arguments": {"path": "."}}])
        # Turn 2 streams for about 8 s: still running at the SIGTERM, done within the drain.
        words = " ".join(["steady"] * 16)
        srv.add_reply(
            text=words, tool_calls=[{"name": "list_files", "arguments": {}}], chunk_delay=0.5
        )
        srv.add_reply(text="done")
        try:
            await ops.workers[0].start()
            task_id = await ops.client.spawn_task("explore", "drain me", model=MODEL)
            await wait_for(lambda: len(srv.requests) >= 2, "turn 2 to start")
            await ops.stop_first()
            streaming = srv.completed_streams == 1  # turn 1's only
            info = await ops.client.check_task(task_id, wait=True, timeout=60)
        finally:
            ops.close()
    assert streaming, "turn 2 ended before the SIGTERM: the test proves nothing"
    assert info.status == TaskStatus.COMPLETED, info
    assert [turn_of(r) for r in srv.requests] == [1, 2, 3]
    # Turn 2 ended on the draining worker: one stream each, none cut off.
    assert srv.outcomes == ["200", "200", "200"] and srv.disconnects == 0


async def test_sigterm_during_a_long_tool_call_hands_it_back_at_once(
    dev_server: DevServer, temporal_client: Client, tmp_path: Path
) -> None:
    """The call is handed back at the drain's end (its second attempt follows a
    ``WorkerShutdown`` failure, not the tool heartbeat timeout); the killed attempt's
    command never finishes."""
    async with FakeOpenAIServer() as srv:
        ops = Deployment(tmp_path, dev_server, temporal_client, srv)
        sleep = unique_sleep(600)
        command = f"echo start >> side.txt; {sleep}; echo end >> side.txt"
        srv.add_reply(tool_calls=[{"name": "bash", "arguments": {"command": command}}])
        srv.add_reply(text="done")
        try:
            await ops.workers[0].start()
            task_id = await ops.client.spawn_task("general", "drain a tool", model=MODEL)
            await wait_for(lambda: processes_matching(sleep), "the command to start")
            first = set(processes_matching(sleep))
            await ops.stop_first()
            await wait_for(lambda: set(processes_matching(sleep)) - first, "the second attempt")
            # killed with its worker, long before its sleep could end
            await wait_for(lambda: not first & set(processes_matching(sleep)), "the first to die")
            await ops.client.cancel_task(task_id)  # no need to wait out the sleep
        finally:
            ops.close()
    # The handed-back attempt's "start" was dropped with it; the cancelled retry's landed.
    assert (ops.workspace / "side.txt").read_text() == "start\n"
    calls = started_attempts(await ops.history(task_id), "run_tool")
    assert [attempt for attempt, _ in calls] == [2]
    assert calls[0][1].application_failure_info.type == "WorkerShutdown"
