"""A worker in production: metrics, health and readiness, on a real worker and server.

``run_worker`` (what ``subagents worker`` runs) serves ``/metrics``, ``/healthz`` and
``/readyz`` on ``--metrics-port``; ``subagents worker --check`` runs the readiness
checks from another process, for exec probes.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from pydantic import SecretStr

from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.storage._sealing import new_key
from durable_subagents.testing import DevServer, FakeOpenAIServer, free_port
from durable_subagents.tools import _sandbox_host as sandbox_host

from ..helpers.metrics import get, running_worker, samples, scrape, value
from ..helpers.tasks import TEST_MODELS, script

CLI = [sys.executable, "-m", "durable_subagents"]


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result or time.monotonic() > deadline:
            return result
        await asyncio.sleep(0.2)


async def test_metrics_count_what_a_run_did(
    settings: Settings, client: SubagentClient, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("remember the milk\n")
    config = settings.model_copy(update={"metrics_port": free_port()})
    async with running_worker(config) as base:
        before = await scrape(base)
        task_id = await client.spawn_task(
            "explore",
            "read the notes",
            model=script(
                {
                    "tool_calls": [
                        {"name": "read_file", "arguments": {"path": "notes.txt"}},
                        {"name": "read_file", "arguments": {"path": "missing.txt"}},
                    ],
                    "usage": {"input_tokens": 120, "output_tokens": 30},
                },
                {"text": "milk", "usage": {"input_tokens": 200, "output_tokens": 5}},
            ),
        )
        info = await client.check_task(task_id, wait=True, timeout=60)
        assert info.status == TaskStatus.COMPLETED, info
        status, text = await asyncio.to_thread(get, f"{base}/metrics")
    assert status == 200
    after = samples(text)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("subagents_tasks_started", agent="explore", run="new") == 1
    assert delta("subagents_tasks_finished", agent="explore", status="completed") == 1
    assert delta("subagents_model_turn_seconds_count", model="scripted", outcome="ok") == 2
    assert delta("subagents_model_tokens", model="scripted", kind="input") == 320
    assert delta("subagents_model_tokens", model="scripted", kind="output") == 35
    assert delta("subagents_tool_calls", tool="read_file", outcome="ok") == 1
    assert delta("subagents_tool_calls", tool="read_file", outcome="error") == 1
    # Temporal's own metrics come through the same endpoint.
    assert value(after, "temporal_worker_task_slots_available") > 0
    assert any(name.startswith("temporal_activity_schedule_to_start_latency") for name, _ in after)
    # Bounded labels: no task id, no path, no prompt.
    for secret in (task_id, "notes.txt", "missing.txt", str(workspace), "read the notes"):
        assert secret not in text


async def test_a_worker_process_freezes_its_start_up_and_collects_less(
    settings: Settings, client: SubagentClient, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("remember the milk\n")
    python_own = gc.get_threshold()
    frozen = gc.get_freeze_count()  # a CLI test run in this process may have frozen some
    default = Settings.model_fields["gc_threshold"].default
    try:
        # Settings(gc_threshold=0), as the tests' own: the collector stays as it was.
        async with running_worker(settings):
            assert gc.get_threshold() == python_own
            assert gc.get_freeze_count() == frozen
        gc.unfreeze()
        async with running_worker(settings.model_copy(update={"gc_threshold": default})):
            assert gc.get_threshold() == (default, *python_own[1:])
            # the interpreter, temporalio and the library's modules: out of every
            # later collection
            assert gc.get_freeze_count() > 50_000
            # and a frozen start-up runs tasks as before: reads in the turn, an answer
            task_id = await client.spawn_task(
                "explore",
                "read the notes",
                model=script(
                    {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
                    {"text": "milk"},
                ),
            )
            result = await client.check_task(task_id, wait=True, timeout=60)
            assert result.status == TaskStatus.COMPLETED, result
            assert result.result == "milk"
    finally:
        gc.unfreeze()
        gc.set_threshold(*python_own)


async def test_compactions_are_counted_by_kind(
    settings: Settings, client: SubagentClient, workspace: Path
) -> None:
    """A scripted task reads more than a 2,048-token window holds: each compaction the
    task reports is counted, as notes or as a summary."""
    (workspace / "notes.txt").write_text("a line worth keeping\n" * 60)
    read = {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]}
    model = "scripted:" + json.dumps({"turns": [read], "repeat": 8, "final": "done"})
    config = settings.model_copy(update={"metrics_port": free_port(), "context_window": 2048})
    async with running_worker(config) as base:
        before = await scrape(base)
        task_id = await client.spawn_task("explore", "read the notes", model=model)
        info = await client.check_task(task_id, wait=True, timeout=60)
        assert info.status == TaskStatus.COMPLETED, info.error
        after = await scrape(base)
    assert info.compactions >= 1
    counted = sum(
        value(after, "subagents_compactions", agent="explore", kind=kind)
        - value(before, "subagents_compactions", agent="explore", kind=kind)
        for kind in ("notes", "summary")
    )
    assert counted == info.compactions


async def test_paused_tasks_are_a_gauge_and_labels_stay_bounded(
    settings: Settings, client: SubagentClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model that names a new model for every child cannot grow the label set."""
    config = settings.model_copy(update={"metrics_port": free_port()})
    async with FakeOpenAIServer() as srv, running_worker(config) as base:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-metrics")
        for _ in range(3):
            srv.add_error(404)  # the provider does not know the model
            task_id = await client.spawn_task(
                "explore", "x", model=f"openai:gpt-made-up-{uuid.uuid4().hex}"
            )
            done = await client.check_task(task_id, wait=True, timeout=60)
            assert done.status == TaskStatus.FAILED
        paused = await client.spawn_task(
            "general",
            "ask first",
            model=script({"tool_calls": [{"name": "bash", "arguments": {"command": "true"}}]}),
            permission_mode="default",
        )
        assert (await client.check_task(paused, wait=True, timeout=60)).status == TaskStatus.PAUSED
        scraped = await eventually(lambda: _gauge_at(base, settings.task_queue, 1), timeout=30)
        assert scraped
        failed = value(await scrape(base), "subagents_model_turn_seconds_count", outcome="failed")
        assert failed == 3
        text = (await asyncio.to_thread(get, f"{base}/metrics"))[1]
        assert "gpt-made-up" not in text
        assert 'model="openai:other"' in text
        await client.reject(paused, reason="no")
        await client.cancel_task(paused)


async def test_sandbox_start_failures_are_counted(
    settings: Settings, client: SubagentClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker where no sandbox can start refuses commands; the counter says so."""
    monkeypatch.setattr(sandbox_host, "_bwrap", {"exe": None})
    monkeypatch.setattr(sandbox_host, "_problems", ["bwrap: user namespaces are disabled"])
    config = settings.model_copy(update={"metrics_port": free_port()})
    async with running_worker(config) as base:
        task_id = await client.spawn_task(
            "general",
            "run it",
            model=script(
                {"tool_calls": [{"name": "bash", "arguments": {"command": "true"}}]},
                {"text": "refused"},
            ),
        )
        info = await client.check_task(task_id, wait=True, timeout=60)
        scraped = await scrape(base)
    assert info.status == TaskStatus.COMPLETED, info
    assert value(scraped, "subagents_sandbox_start_failures", reason="unavailable") == 1
    assert value(scraped, "subagents_tool_calls", tool="bash", outcome="error") == 1


async def test_with_opentelemetry_the_same_metrics_go_out_over_otlp(
    settings: Settings, client: SubagentClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collector stand-in receives OTLP/HTTP metric exports; /metrics says where they go."""
    bodies: list[bytes] = []

    async def receive(request: web.Request) -> web.Response:
        bodies.append(await request.read())
        return web.Response(content_type="application/x-protobuf", body=b"")

    app = web.Application()
    app.router.add_post("/v1/metrics", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", f"http://127.0.0.1:{port}/v1/metrics")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "300")
    config = settings.model_copy(update={"metrics_port": free_port()})
    try:
        async with running_worker(config) as base:
            task_id = await client.spawn_task("explore", "hi", model=script({"text": "hello"}))
            info = await client.check_task(task_id, wait=True, timeout=60)

            async def exported() -> bool:
                return any(b"subagents_tasks_finished" in body for body in bodies)

            assert await eventually(exported, timeout=20)
            status, text = await asyncio.to_thread(get, f"{base}/metrics")
    finally:
        await runner.cleanup()
    assert info.status == TaskStatus.COMPLETED
    assert (status, text) == (404, f"metrics go over OTLP to http://127.0.0.1:{port}/v1/metrics\n")
    everything = b"".join(bodies)
    for name in (b"subagents_model_turn_seconds", b"subagents_tasks_started", b"temporal_"):
        assert name in everything
    assert task_id.encode() not in everything


async def _gauge_at(base: str, queue: str, count: int) -> bool:
    scraped = await scrape(base)
    return value(scraped, "subagents_tasks_paused", task_queue=queue) == count


async def test_readiness_follows_the_server_and_check_runs_it_once(
    tmp_path: Path, settings: Settings
) -> None:
    """The server goes down under a ready worker and comes back on the same database."""
    port = free_port()
    server = DevServer(port=port, ui=False, db=tmp_path / "temporal.db")
    await server.start()
    config = settings.model_copy(
        update={"address": server.address, "metrics_port": free_port(), "blob_sweep": False}
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SUBAGENTS_", "TEMPORAL_"))},
        **TEST_MODELS,
    }
    env.update(
        TEMPORAL_ADDRESS=server.address,
        TEMPORAL_CONFIG_FILE=str(tmp_path / "absent.toml"),
        SUBAGENTS_TASK_QUEUE=settings.task_queue,
        SUBAGENTS_BLOB_DIR=str(settings.resolved_blob_dir),
        SUBAGENTS_DATA_DIR=str(tmp_path / "data"),
    )
    try:
        async with running_worker(config) as base:
            assert await asyncio.to_thread(get, f"{base}/healthz") == (200, "ok\n")
            assert await eventually(lambda: _ready(base))
            check = await asyncio.to_thread(
                subprocess.run,
                [*CLI, "worker", "--check"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert check.returncode == 0, check.stderr
            assert check.stdout.startswith("ready: Temporal at")
            other = await asyncio.to_thread(
                subprocess.run,
                [*CLI, "worker", "--check", "--task-queue", "nobody-polls-this"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert other.returncode == 1
            assert " ".join(other.stderr.split()) == (
                "error: not ready: Temporal does not see a worker of this host polling task "
                "queue 'nobody-polls-this' (namespace 'default') in the last 120 s"
            )

            await server.stop()
            status, body = await asyncio.to_thread(get, f"{base}/readyz")
            assert status == 503
            assert body.startswith(f"not ready: cannot reach Temporal at {server.address}")
            assert await asyncio.to_thread(get, f"{base}/healthz") == (200, "ok\n")
            down = await asyncio.to_thread(
                subprocess.run,
                [*CLI, "worker", "--check"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert down.returncode == 1
            assert down.stderr.count("\n") == 1 and "Traceback" not in down.stderr

            await server.start()
            assert await eventually(lambda: _ready(base), timeout=60)
    finally:
        await server.stop()


async def _ready(base: str) -> bool:
    status, _ = await asyncio.to_thread(get, f"{base}/readyz")
    return status == 200


async def test_a_worker_says_once_at_start_that_its_workspace_holds_its_secrets(
    settings: Settings,
    workspace: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``subagents keygen >> .env`` in the workspace: one warning naming the file and the
    variables, never a value; a workspace without them starts without it."""
    api_key = "sk-workspace-" + uuid.uuid4().hex
    payload_key = new_key()
    monkeypatch.setenv("OPENAI_API_KEY", api_key)
    (workspace / ".env").write_text(
        f"# payload key (subagents keygen)\nSUBAGENTS_PAYLOAD_KEY={payload_key}\n"
        f'OPENAI_API_KEY="{api_key}"\n'
    )
    (workspace / "README.md").write_text("a project\n")
    config = settings.model_copy(
        update={"payload_key": SecretStr(payload_key), "metrics_port": free_port()}
    )
    caplog.set_level(logging.WARNING)
    async with running_worker(config):
        pass  # ready: the look at the workspace is done
    said = [r.getMessage() for r in caplog.records if "secrets" in r.getMessage()]
    assert len(said) == 1, said
    [line] = said
    assert str(workspace.resolve()) in line
    assert ".env (SUBAGENTS_PAYLOAD_KEY, OPENAI_API_KEY)" in line or (
        ".env (OPENAI_API_KEY, SUBAGENTS_PAYLOAD_KEY)" in line
    )
    assert "README.md" not in line and "\n" not in line
    assert payload_key not in caplog.text and api_key not in caplog.text

    (workspace / ".env").unlink()
    caplog.clear()
    async with running_worker(config.model_copy(update={"metrics_port": free_port()})):
        pass
    assert not [r for r in caplog.records if "secrets" in r.getMessage()]
