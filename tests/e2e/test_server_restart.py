"""The Temporal server goes away mid-run and comes back on the same SQLite file.

A dev server of its own (not the session's), one worker in this process that stays up
through the outage, and tasks in every state when the server goes: running a
``sleep 2`` bash call, streaming a slow model answer, paused for an approval, spawned a
moment before. The server is stopped (SIGTERM) or killed (SIGKILL to its process
group), stays down, and is started again with the same database file on the same port.
Every task must finish with its answer, the paused one only after its approval.

Down for 3 s, every side effect happens once and the model is asked once. Down for
12 s, longer than a tool call's heartbeat timeout (10 s), the server retries the calls
that were running: a tool call that finished meanwhile is answered from its record
(each side effect still once), and the model turn may be asked again, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from durable_subagents import SubagentClient, TaskStatus, connect_client
from durable_subagents.config import Settings
from durable_subagents.providers import clear_provider_cache, close_providers
from durable_subagents.testing import DevServer, FakeOpenAIServer, free_port
from durable_subagents.worker import create_worker

from ..helpers import CEILING
from ..helpers.processes import processes_matching, unique_sleep, wait_for
from ..helpers.tasks import give_to_tool_user, script

SLOW_ANSWER = " ".join(f"word{i}" for i in range(12))


@pytest.fixture
async def own_server(tmp_path: Path) -> AsyncIterator[DevServer]:
    server = DevServer(port=free_port(), ui_port=free_port(), db=tmp_path / "own.db", ui=False)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def slow_model(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeOpenAIServer]:
    """A fake OpenAI API whose one answer streams for about 4 s (0.33 s a word)."""
    async with FakeOpenAIServer() as srv:
        srv.add_reply(text=SLOW_ANSWER, chunk_delay=0.33)
        srv.add_reply(text=SLOW_ANSWER)  # for a retry
        monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-restart")
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        clear_provider_cache()
        try:
            yield srv
        finally:
            await close_providers()


def sleeper(name: str, sleep: str) -> str:
    """A task whose one call writes ``side-<name>.txt`` (a file of its own: concurrent
    calls that change one file conflict, as their writes land when each ends)."""
    side = f"side-{name}.txt"
    command = f"echo '{name} start' >> {side}; {sleep}; echo '{name} slept' | tee -a {side}"
    return script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]},
        {"text": "tool said: {last_tool_result}"},
    )


def side_effects(workspace: Path) -> Counter[str]:
    return Counter(
        line for f in workspace.glob("side-*.txt") for line in f.read_text().splitlines()
    )


async def take_down(server: DevServer, how: str) -> None:
    if how == "sigkill":
        assert server.pid is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
    await server.stop()  # SIGTERM and wait (after a SIGKILL: just reap)


@pytest.mark.parametrize(
    ("how", "outage"), [("sigterm", 3.0), ("sigkill", 12.0)], ids=["stop-3s", "kill-12s"]
)
async def test_tasks_survive_a_server_restart_on_the_same_db(
    how: str, outage: float, own_server: DevServer, slow_model: FakeOpenAIServer, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    give_to_tool_user(workspace)
    settings = Settings(
        address=own_server.address,
        namespace=own_server.namespace,
        task_queue=f"restart-{uuid.uuid4().hex[:8]}",
        data_dir=tmp_path / "data",
        blob_dir=tmp_path / "blobs",
        workspace=workspace,
    )
    temporal = await connect_client(own_server.address, own_server.namespace)
    client = SubagentClient(
        temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
    )
    approved = "echo 'approved ran' | tee -a side-approved.txt"
    asks = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": approved}}]},
        {"text": "after approval: {last_tool_result}"},
    )
    async with create_worker(temporal, settings):
        sleeps = [unique_sleep(2) for _ in range(3)]
        sleepers = [
            await client.spawn_task("general", f"sleep {i}", model=sleeper(f"s{i}", sleeps[i]))
            for i in range(3)
        ]
        streaming = await client.spawn_task("general", "answer slowly", model="openai:gpt-slow")
        paused = await client.spawn_task(
            "general", "ask first", model=asks, permissions=[{"tool": "bash", "action": "ask"}]
        )
        before = await client.check_task(paused, wait=True, timeout=CEILING)
        assert before.status == TaskStatus.PAUSED and before.pause_id
        started: set[int] = set()

        def all_started() -> bool:
            # running now, or its writes landed: ended already (on a slow machine)
            effects = side_effects(workspace)
            started.update(
                i for i in range(3) if processes_matching(sleeps[i]) or effects[f"s{i} start"]
            )
            return len(started) == 3

        await wait_for(all_started, what="sleeps")
        await wait_for(
            lambda: len(slow_model.requests) == 1 and slow_model.completed_streams == 0,
            what="the slow stream to start",
        )
        last = await client.spawn_task("explore", "x", model=script({"text": "just in time"}))

        down = time.monotonic()
        await take_down(own_server, how)
        await asyncio.sleep(outage)  # the sleeps end, the stream goes on: no server
        await own_server.start()
        up = time.monotonic()

        # The same client and worker carry on; the pause survived as it was.
        after = await client.check_task(paused)
        assert after.status == TaskStatus.PAUSED and after.pause_id == before.pause_id
        await client.approve(paused)
        infos = await asyncio.gather(
            *(
                client.check_task(t, wait=True, timeout=CEILING)
                for t in [*sleepers, streaming, last]
            ),
            client.check_task(paused, wait=True, timeout=CEILING, after_pause=before.pause_id),
        )
        finished = time.monotonic()
    print(
        f"{how}: down {up - down:.1f}s, all done {finished - up:.1f}s after the restart; "
        f"side effects {sum(side_effects(workspace).values())}, "
        f"model requests {len(slow_model.requests)}"
    )
    for i, info in enumerate(infos[:3]):
        assert info.status == TaskStatus.COMPLETED, info.error
        assert info.result == f"tool said: s{i} slept"
    assert infos[3].status == TaskStatus.COMPLETED, infos[3].error
    assert infos[3].result == SLOW_ANSWER
    assert infos[4].status == TaskStatus.COMPLETED, infos[4].error
    assert infos[4].result == "just in time"
    assert infos[5].status == TaskStatus.COMPLETED, infos[5].error
    assert infos[5].result == "after approval: approved ran"
    effects = side_effects(workspace)
    in_flight = [f"s{i} {what}" for i in range(3) for what in ("start", "slept")]
    assert set(effects) == {*in_flight, "approved ran"}
    assert effects["approved ran"] == 1  # approved and run after the restart
    # each tool ran once: a call that finished while its result could not be reported
    # is answered from its record when the server retries it
    assert all(effects[line] == 1 for line in in_flight), effects
    if outage < 10:
        assert len(slow_model.requests) == 1 and slow_model.completed_streams == 1
    else:
        # a model turn that outlived its heartbeat timeout is asked again, once
        assert len(slow_model.requests) <= 2
