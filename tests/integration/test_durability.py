"""Durability rules, checked on real histories, real processes and real HTTP streams."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToJson
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import ActivityEnvironment

from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.activities import SubagentActivities
from durable_subagents.agents import BUILTIN_AGENTS
from durable_subagents.config import Settings
from durable_subagents.testing import FakeAnthropicServer, FakeOpenAIServer
from durable_subagents.tools import BUILTIN_TOOLS, ToolRegistry, tool
from durable_subagents.types import ToolCall
from durable_subagents.wire._payloads import ToolCallInput
from durable_subagents.worker import create_worker

from ..helpers import CEILING
from ..helpers.processes import processes_matching, unique_sleep, wait_for
from ..helpers.providers import fake_provider
from ..helpers.tasks import script

SLEEP_3301 = unique_sleep(3301)
SLEEP_3302 = unique_sleep(3302)
SLEEP_3913 = unique_sleep(3913)

PAYLOAD_LIMIT = 256 * 1024


async def all_runs_events(temporal: Client, task_id: str) -> list:  # type: ignore[type-arg]
    """Every run's events, first run first: the latest run back through each run it
    continued (from its history, which visibility would list only after a while)."""
    runs = []
    run_id = None
    while True:
        handle = temporal.get_workflow_handle(task_id, run_id=run_id)
        events = [e async for e in handle.fetch_history_events()]
        runs.append(events)
        run_id = events[0].workflow_execution_started_event_attributes.continued_execution_run_id
        if not run_id:
            return [e for run in reversed(runs) for e in run]


async def test_200_turns_of_50kb_tool_output_keep_history_small(
    client: SubagentClient, temporal_client: Client, worker: None, workspace: Path
) -> None:
    (workspace / "big.txt").write_text(("x" * 99 + "\n") * 500)  # 50,000 bytes
    model = script(
        {
            "text": "reading again",
            "tool_calls": [{"name": "read_file", "arguments": {"path": "big.txt"}}],
        },
        repeat=200,
        final="all done",
    )
    task_id = await client.spawn_task("explore", "read it 200 times", model=model, max_turns=300)
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.turns == 201
    assert info.result == "all done"
    # every run's real history
    events = await all_runs_events(temporal_client, task_id)
    total = sum(e.ByteSize() for e in events)
    assert total < 5 * 1024 * 1024, f"history is {total} bytes"
    turns = reads = asked = 0
    converter = temporal_client.data_converter.payload_converter
    for e in events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            size = e.activity_task_scheduled_event_attributes.input.ByteSize()
            assert size < PAYLOAD_LIMIT, f"activity input of {size} bytes"
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            result = e.activity_task_completed_event_attributes.result
            assert result.ByteSize() < PAYLOAD_LIMIT, f"activity result of {result.ByteSize()}"
            turns += 1
            reads += len(converter.from_payload(result.payloads[0], dict).get("read_results", {}))
        marker = e.marker_recorded_event_attributes
        if marker.marker_name == "core_local_activity" and b'"run_tool"' in (
            marker.details["data"].payloads[0].data
        ):  # a read the workflow ran itself
            size = marker.details["result"].ByteSize()
            assert size < PAYLOAD_LIMIT, f"local activity result of {size} bytes"
            reads += 1
        if marker.marker_name == "core_local_activity" and b'"activity_options"' in (
            marker.details["data"].payloads[0].data
        ):
            asked += 1
    assert (turns, reads) == (201, 200)  # each turn ran its read, or the workflow did
    assert asked == 1  # the first run asked its worker's options; the next carried them
    continued = [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    ]
    assert len(continued) >= 2, "the server suggested continue-as-new; the task must use it"
    # the model really saw the full 50 KB each time: the transcript holds it
    transcript = await client.get_transcript(task_id)
    tool_msgs = [m for m in transcript if m.role == "tool"]
    assert len(tool_msgs) == 200
    assert all(len(m.content) > 50_000 for m in tool_msgs)


async def test_api_keys_never_enter_the_history(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = f"sk-test-{uuid.uuid4().hex}"
    async with fake_provider(monkeypatch, FakeOpenAIServer(), "OPENAI", key=secret) as srv:
        srv.add_reply(tool_calls=[{"name": "list_files", "arguments": {}}], usage=(100, 7))
        srv.add_reply(text="nothing here", usage=(150, 9))
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task("explore", "look", model="openai:gpt-test")
            info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.usage.input_tokens == 250 and info.usage.output_tokens == 16
    assert info.model == "openai:gpt-test"
    # the key was really used on the wire...
    assert any(h.get("authorization") == f"Bearer {secret}" for h in srv.request_headers)
    # ...and is nowhere in the history, memo, search attributes or result
    events = await all_runs_events(temporal_client, task_id)
    raw = b"".join(e.SerializeToString() for e in events)
    assert b"openai:gpt-test" in raw  # payloads are plain JSON bytes: the scan sees them
    assert secret.encode() not in raw
    assert secret not in "\n".join(MessageToJson(e) for e in events)
    desc = await temporal_client.get_workflow_handle(task_id).describe()
    assert secret not in str(await desc.memo())


async def test_anthropic_through_the_workflow_sums_usage(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with fake_provider(
        monkeypatch, FakeAnthropicServer(), "ANTHROPIC", key="test-key"
    ) as srv:
        srv.add_reply(tool_calls=[{"name": "grep", "arguments": {"pattern": "x"}}], usage=(40, 3))
        srv.add_reply(text="no matches", usage=(60, 4))
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task("explore", "grep", model="anthropic:claude-test")
            info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "no matches"
    assert (info.usage.input_tokens, info.usage.output_tokens) == (100, 7)
    second = srv.requests[1]
    kinds = [block["type"] for m in second["messages"] for block in _blocks(m)]
    assert "tool_use" in kinds and "tool_result" in kinds


def _blocks(message: dict) -> list:  # type: ignore[type-arg]
    content = message["content"]
    return content if isinstance(content, list) else [{"type": "text"}]


async def test_cancel_kills_every_process_the_command_started(
    client: SubagentClient, temporal_client: Client, worker: None
) -> None:
    model = script(
        {
            "tool_calls": [
                {"name": "bash", "arguments": {"command": f"{SLEEP_3301} & {SLEEP_3302}; wait"}}
            ]
        }
    )
    task_id = await client.spawn_task("general", "sleep", model=model)
    await wait_for(
        lambda: len(processes_matching(SLEEP_3301) + processes_matching(SLEEP_3302)) >= 2,
        what="sleeps to start",
    )
    started = asyncio.get_running_loop().time()
    pending = await client.cancel_task(task_id, wait=False)
    assert pending.status == TaskStatus.CANCELLING
    info = await client.check_task(task_id, wait=True, timeout=20)
    elapsed = asyncio.get_running_loop().time() - started
    assert info.status == TaskStatus.CANCELLED
    # The promise: a running command hears of a cancel with its next heartbeat (every
    # second). The ceiling leaves room for a loaded machine.
    assert elapsed < 10, f"cancel took {elapsed:.1f}s"
    assert processes_matching(SLEEP_3301) == [] and processes_matching(SLEEP_3302) == []
    desc = await temporal_client.get_workflow_handle(task_id).describe()
    assert desc.status == WorkflowExecutionStatus.CANCELED
    statuses = await _memo_statuses(temporal_client, task_id)
    assert statuses[-2:] == ["cancelling", "cancelled"]


async def _memo_statuses(temporal: Client, task_id: str) -> list[str]:
    out = []
    conv = temporal.data_converter.payload_converter
    async for e in temporal.get_workflow_handle(task_id).fetch_history_events():
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
            fields = e.workflow_properties_modified_event_attributes.upserted_memo.fields
            if "status" in fields:
                out.append(conv.from_payload(fields["status"], str))
    return out


async def test_cancel_closes_a_streaming_model_call(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with fake_provider(monkeypatch, FakeOpenAIServer(), "OPENAI") as srv:
        srv.add_reply(text="this will never finish", hang=True)
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task("explore", "hang", model="openai:gpt-test")
            await asyncio.wait_for(srv.hanging.wait(), CEILING)
            info = await client.cancel_task(task_id, wait=True, timeout=CEILING)
            assert info.status == TaskStatus.CANCELLED
            await asyncio.wait_for(srv.disconnected.wait(), CEILING)
    assert srv.disconnects >= 1


async def test_worker_crash_kills_tools_and_a_new_worker_finishes_the_task(
    client: SubagentClient, temporal_client: Client, settings: Settings, workspace: Path
) -> None:
    first, second = unique_sleep(3401), unique_sleep(3402)
    # The retry knows itself by a file the test writes once the worker is dead: a file the
    # killed attempt wrote never lands.
    command = (
        "if [ -f worker-killed ]; then echo second-attempt; "
        f"else touch marker; {first} & {second}; wait; fi"
    )

    def sleeping() -> list[int]:
        return processes_matching(first) + processes_matching(second)

    model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]},
        {"text": "tool said: {last_tool_result}"},
    )
    env = {
        **os.environ,
        "SUBAGENTS_BLOB_DIR": str(settings.resolved_blob_dir),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "durable_subagents",
            "worker",
            "--address",
            settings.address,
            "--task-queue",
            settings.task_queue,
            "--workspace",
            str(workspace),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    # The cut-off call runs again (the agent's on_interrupted), in a fresh overlay.
    client.agents["general"] = BUILTIN_AGENTS["general"].model_copy(
        update={"on_interrupted": "rerun"}
    )
    try:
        task_id = await client.spawn_task("general", "crash me", model=model)
        await wait_for(lambda: len(sleeping()) == 2, what="sleeps to start")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        await wait_for(lambda: not sleeping(), what="tool processes to die")
    finally:
        if proc.poll() is None:
            proc.kill()
    (workspace / "worker-killed").touch()
    async with create_worker(temporal_client, settings):
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert "second-attempt" in (info.result or "")
    # what the killed attempt wrote died with it
    assert not (workspace / "marker").exists()


async def test_oversized_input_fails_the_task_clearly(
    temporal_client: Client, settings: Settings, worker: None
) -> None:
    client = SubagentClient(
        temporal_client,
        task_queue=settings.task_queue,
        blob_store=settings.blob_store(),
        max_prompt_bytes=2_000_000,
    )
    task_id = await client.spawn_task("explore", "y" * 400_000, model="scripted")
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.FAILED
    assert info.error is not None and "payload limit" in info.error
    desc = await temporal_client.get_workflow_handle(task_id).describe()
    assert desc.status == WorkflowExecutionStatus.FAILED


async def test_temporal_retries_429_after_retry_after_and_fails_fast_on_400(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with fake_provider(monkeypatch, FakeOpenAIServer(), "OPENAI") as srv:
        srv.add_error(429, headers={"Retry-After": "1"})
        srv.add_reply(text="after the retry")
        srv.add_error(400, body={"error": {"message": "bad parameter max_tokens"}})
        async with create_worker(temporal_client, settings):
            retried = await client.spawn_task("explore", "a", model="openai:gpt-test")
            ok = await client.check_task(retried, wait=True, timeout=CEILING)
            bad = await client.spawn_task("explore", "b", model="openai:gpt-test")
            failed = await client.check_task(bad, wait=True, timeout=CEILING)
    assert ok.status == TaskStatus.COMPLETED and ok.result == "after the retry"
    attempts = [
        e.activity_task_started_event_attributes.attempt
        async for e in temporal_client.get_workflow_handle(retried).fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert attempts == [2]  # the first attempt failed and was retried by Temporal
    assert failed.status == TaskStatus.FAILED
    assert failed.error is not None and "bad parameter max_tokens" in failed.error
    assert len(srv.requests) == 3  # the 400 was not retried


async def test_a_closed_runs_status_wins_over_the_memo(
    client: SubagentClient, temporal_client: Client
) -> None:
    task_id = await client.spawn_task("explore", "never runs", model="scripted")
    await temporal_client.get_workflow_handle(task_id).terminate(reason="operator stop")
    info = await client.check_task(task_id)
    assert info.status == TaskStatus.CANCELLED
    assert info.stop_reason == "terminated"
    desc = await temporal_client.get_workflow_handle(task_id).describe()
    assert (await desc.memo())["status"] == "pending"  # the memo could not know


async def test_a_running_task_that_temporal_stops_never_shows_the_stale_memo(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    from datetime import timedelta

    from durable_subagents.agents import BUILTIN_AGENTS
    from durable_subagents.spawn import SpawnOptions, build_task_input, start_metadata

    sleep = script({"tool_calls": [{"name": "bash", "arguments": {"command": SLEEP_3913}}]})
    task_input = build_task_input(
        BUILTIN_AGENTS["general"], "x", SpawnOptions(model=sleep), description="x",
        parent_id=None, default_model=None, created_at=datetime.now(UTC),
    )  # fmt: skip
    memo, attributes = start_metadata(task_input)
    async with create_worker(temporal_client, settings):
        terminated = await client.spawn_task("general", "x", model=sleep)
        # a run started with an execution timeout by someone else's tooling
        timed_out = f"subagent-general-{uuid.uuid4().hex[:12]}"
        await temporal_client.start_workflow(
            "SubagentWorkflow",
            task_input,
            id=timed_out,
            task_queue=settings.task_queue,
            memo=memo,
            search_attributes=attributes,
            execution_timeout=timedelta(seconds=3),
        )
        await wait_for(lambda: len(processes_matching(SLEEP_3913)) == 2, what="both commands")
        assert (await client.check_task(terminated)).status == TaskStatus.RUNNING
        await temporal_client.get_workflow_handle(terminated).terminate(reason="operator stop")
        info = await client.check_task(timed_out, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.TIMED_OUT and info.stop_reason == "execution_timeout"
    stopped = await client.check_task(terminated)
    assert stopped.status == TaskStatus.CANCELLED and stopped.stop_reason == "terminated"
    for task_id in (terminated, timed_out):
        desc = await temporal_client.get_workflow_handle(task_id).describe()
        assert (await desc.memo())["status"] == "running"  # stale, and not shown


def test_a_new_worker_ends_what_a_dead_workers_call_left_running() -> None:
    """A sandbox's inner process that outlived its killed worker dies at the next start.

    The window is the sandbox's start: its inner process asks to die with its parent a
    moment after it is made, and a worker killed in between leaves it running in the
    call's cgroup. Here the leftover is placed there directly.
    """
    from durable_subagents.tools import _cgroup_host

    hierarchies = _cgroup_host.available()
    if not hierarchies:
        pytest.skip("no writable cgroup for tool calls on this machine")
    parent = hierarchies[0].base.parent
    gone = subprocess.Popen(["true"])
    gone.wait()
    ours = (
        parent
        / f"durable-subagents-{_cgroup_host._pid_namespace()}-{gone.pid}"
        / "tree-x"
        / "task-x"
        / "call-left"
    )
    # a worker of another PID namespace: its pid means nothing here, its calls are kept
    theirs = parent / f"durable-subagents-1-{gone.pid}" / "call-kept"
    left, kept = [subprocess.Popen(["sleep", seconds]) for seconds in ("3601", "3602")]
    try:
        for cgroup, proc in ((ours, left), (theirs, kept)):
            cgroup.mkdir(parents=True)
            (cgroup / "cgroup.procs").write_text(str(proc.pid))

        _cgroup_host._sweep_stale(parent)

        assert left.wait(5) == -signal.SIGKILL
        assert not ours.parent.parent.parent.exists()  # the dead worker's base, whole
        assert kept.poll() is None and theirs.exists()
    finally:
        for proc in (left, kept):
            proc.kill()
            proc.wait()
        for cgroup in (theirs, ours):
            with contextlib.suppress(OSError):
                cgroup.rmdir()
                cgroup.parent.rmdir()


async def test_a_short_read_goes_unrecorded_only_for_a_workflow_that_knows(
    workspace: Path, settings: Settings
) -> None:
    """A retried call answers with its record instead of running again; a read-only
    tool's short result is not recorded (running it again changes nothing), but only
    when the workflow says it reads ``recorded``: an older one may pass any result by
    record name, and gets every result recorded."""
    (workspace / "f.txt").write_text("before\n")
    activities = SubagentActivities(settings.blob_store(), workspace_root=workspace)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, current_attempt_scheduled_time=datetime.now(UTC))
    read = ToolCall(id="call_r", name="read_file", arguments={"path": "f.txt"})
    write = ToolCall(id="call_w", name="write_file", arguments={"path": "g.txt", "content": "x"})

    def inp(task: str, call: ToolCall, *, knows: bool) -> ToolCallInput:
        return ToolCallInput(task_id=task, call=call, unrecorded_reads=knows)

    def records(task: str) -> list[str]:
        found = settings.resolved_blob_dir.rglob("records/*")
        return [p.name for p in found if task in str(p) and not p.name.endswith("-started")]

    old = await env.run(activities.run_tool, inp("t-old", read, knows=False))
    new = await env.run(activities.run_tool, inp("t-new", read, knows=True))
    wrote = await env.run(activities.run_tool, inp("t-new", write, knows=True))
    assert old.recorded and len(records("t-old")) == 1
    assert not new.recorded and wrote.recorded and len(records("t-new")) == 1
    assert "before" in new.content
    # a retry of the unrecorded read reads again; of the write, answers from its record
    (workspace / "f.txt").write_text("after\n")
    (workspace / "g.txt").unlink()
    env.info = dataclasses.replace(env.info, attempt=2, workflow_id="")  # no task to ask
    again = await env.run(activities.run_tool, inp("t-new", read, knows=True))
    assert "after" in again.content
    assert await env.run(activities.run_tool, inp("t-new", write, knows=True)) == wrote
    assert not (workspace / "g.txt").exists()


async def test_a_call_cut_off_before_its_first_heartbeat_landed_is_reported_not_run_again(
    workspace: Path, settings: Settings, tmp_path: Path
) -> None:
    """The worker dies while the tool runs, before the heartbeat saying it began reached
    the server: the retry sees no heartbeat at all. The mark written before the tool ran
    says it did, so the retry reports the call instead of running it a second time."""
    ledger = tmp_path / "ledger.txt"
    began = asyncio.Event()

    @tool
    async def pay(amount: int) -> str:
        """Pay: a side effect that must not happen twice unseen.

        Args:
            amount: How much.
        """
        with ledger.open("a") as out:
            out.write(f"paid {amount}\n")
        if len(ledger.read_text().splitlines()) == 1:
            began.set()
            await asyncio.Event().wait()  # the first payment hangs until its worker ends
        return "paid"

    tools = ToolRegistry(dict(BUILTIN_TOOLS))
    tools.register(pay)
    activities = SubagentActivities(settings.blob_store(), workspace_root=workspace, tools=tools)
    call = ToolCall(id="call_p", name="pay", arguments={"amount": 3})
    inp = ToolCallInput(task_id="t-pay", call=call, on_interrupted="report")
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, current_attempt_scheduled_time=datetime.now(UTC))
    first = asyncio.ensure_future(env.run(activities.run_tool, inp))
    await asyncio.wait_for(began.wait(), CEILING)
    env.cancel()  # the attempt ends with the worker; its heartbeats never reached anyone
    with pytest.raises(asyncio.CancelledError):
        await first
    retry = ActivityEnvironment()
    retry.info = dataclasses.replace(
        retry.info,
        attempt=2,
        heartbeat_details=[],
        workflow_id="",  # no task to ask
    )
    result = await retry.run(activities.run_tool, inp)
    assert ledger.read_text() == "paid 3\n"
    assert result.is_error and "pay was interrupted" in result.content, result.content
