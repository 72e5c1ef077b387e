"""Every Python snippet of the README runs as shown, against a real server and worker.

Each snippet runs as a script of its own in a fresh process, with only what a user's
environment would give it (``TEMPORAL_ADDRESS``, ``SUBAGENTS_TASK_QUEUE`` and, for the
tool loop, ``OPENAI_BASE_URL``), while a worker with the scripted model serves it.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from temporalio.client import Client

from durable_subagents import SubagentClient, TaskStatus
from durable_subagents._payloads import NotifyEvent, NotifyInput, NotifyTask
from durable_subagents.activities import Notifier
from durable_subagents.config import Settings
from durable_subagents.testing import FakeOpenAIServer
from durable_subagents.worker import create_worker

README = Path(__file__).parent.parent / "README.md"
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


@dataclass
class Snippet:
    line: int
    lang: str
    code: str

    @property
    def name(self) -> str:
        return f"README.md:{self.line}"


def snippets(lang: str) -> list[Snippet]:
    text = README.read_text()
    return [
        Snippet(text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2))
        for m in _BLOCK.finditer(text)
        if m.group(1) == lang
    ]


PYTHON = snippets("python")


def kind(snippet: Snippet) -> str:
    """Which check a snippet gets (each must be one of the known kinds)."""
    code = snippet.code
    if "webhook-signature" in code:
        return "webhook"
    if "SubagentsPlugin" in code:
        return "plugin"
    if "@workflow.defn" in code:
        return "workflow"
    if "@tool(" in code:
        return "tool"
    if "AsyncOpenAI" in code:
        return "tool_loop"
    if "approve(" in code:
        return "approval"
    if "client.watch(" in code:
        return "watch"
    if "output_schema=" in code:
        return "structured"
    if "spawn_task(" in code:
        return "spawn"
    return "unknown"


def test_every_python_snippet_has_a_check() -> None:
    kinds = [kind(s) for s in PYTHON]
    assert "unknown" not in kinds, [(s.name, k) for s, k in zip(PYTHON, kinds, strict=True)]
    assert len(PYTHON) >= 6


def test_json_snippets_parse() -> None:
    for snippet in snippets("json"):
        json.loads(snippet.code)


@pytest.fixture
async def served(
    temporal_client: Client, settings: Settings, workspace: Path, tmp_path: Path
) -> AsyncIterator[dict[str, str]]:
    """A worker on this test's queue (its model plays the demo's `general` script, which
    runs bash), and the environment a snippet's process gets."""
    (workspace / "inventory").mkdir()
    (workspace / "inventory" / "stock.py").write_text("def count():\n    return 1\n")
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_stock.py").write_text("def test_count():\n    pass\n")
    worker_settings = settings.model_copy(update={"model": "scripted:demo-general"})
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SUBAGENTS_", "TEMPORAL_", "OPENAI_", "ANTHROPIC_"))
    }
    env.update(
        TEMPORAL_ADDRESS=settings.address,
        SUBAGENTS_TASK_QUEUE=settings.task_queue,
        SUBAGENTS_BLOB_DIR=str(settings.resolved_blob_dir),
        SUBAGENTS_DATA_DIR=str(tmp_path / "client-data"),
    )
    async with create_worker(temporal_client, worker_settings):
        yield env


async def run_snippet(snippet: Snippet, env: dict[str, str], cwd: Path) -> str:
    script = cwd / f"snippet_{snippet.line}.py"
    script.write_text(snippet.code)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, f"{snippet.name} failed:\n{err.decode()[-3000:]}"
    return out.decode()


@pytest.mark.parametrize("snippet", PYTHON, ids=[s.name for s in PYTHON])
async def test_snippet_runs_as_shown(
    snippet: Snippet,
    served: dict[str, str],
    tmp_path: Path,
    temporal_client: Client,
    settings: Settings,
    client: SubagentClient,
) -> None:
    what = kind(snippet)
    if what == "tool_loop":
        async with FakeOpenAIServer() as api:
            spawn = {"agent": "explore", "prompt": "Find the retry logic."}
            api.add_reply(tool_calls=[{"name": "spawn_subagent", "arguments": spawn}])
            api.add_reply(text="A subagent is on it.")
            env = {**served, "OPENAI_BASE_URL": api.base_url, "OPENAI_API_KEY": "test"}
            out = await run_snippet(snippet, env, tmp_path)
            assert out.strip() == "A subagent is on it."
            tool_result = api.requests[1]["messages"][-1]
            assert tool_result["role"] == "tool" and "task_id" in tool_result["content"]
        [child] = await client.list_tasks(parent_id="orchestrator-1")
        done = await client.check_task(child.id, wait=True, timeout=30)
        assert done.status == TaskStatus.COMPLETED
        return
    if what == "plugin":
        # The snippet's own worker, on a queue of its own, runs the task.
        env = {
            **served,
            "SUBAGENTS_TASK_QUEUE": settings.task_queue + "-plugin",
            "SUBAGENTS_MODEL": "scripted:demo-general",
        }
        out = await run_snippet(snippet, env, tmp_path)
        assert out.startswith("completed ") and "offline" in out.lower(), out
        return
    out = await run_snippet(snippet, served, tmp_path)
    if what == "webhook":
        assert out == ""
        await _verify_a_real_notification(snippet)
    elif what == "spawn":
        assert "input_tokens" in out and "offline" in out.lower(), out
    elif what == "structured":
        verdict, rest = out.split(" ", 1)
        assert verdict == "pass" and rest.startswith("['inventory/stock.py'] "), out
        assert json.loads(rest.split(" ", 1)[1]) == {
            "verdict": "pass",
            "files": ["inventory/stock.py"],
        }
    elif what == "watch":
        assert "[turn 1 · " in out and "[turn 2 · " in out, out
    elif what == "approval":
        assert "asks to run: bash · wc -l inventory/*.py tests/*.py" in out, out
        assert out.splitlines()[1].startswith("completed "), out
        assert "inventory/stock.py" in out
    elif what == "tool":
        assert out == ""
    elif what == "workflow":
        await _run_review_workflow(snippet, tmp_path, temporal_client, settings)


async def _run_review_workflow(
    snippet: Snippet, tmp_path: Path, temporal_client: Client, settings: Settings
) -> None:
    """The workflow snippet, run on a worker as the README says, starts real subagents."""
    path = tmp_path / "readme_review.py"
    path.write_text(snippet.code)
    spec = importlib.util.spec_from_file_location("readme_review", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["readme_review"] = module
    sys.path.insert(0, str(tmp_path))  # the sandbox imports the workflow's module again
    try:
        spec.loader.exec_module(module)
        review = module.ReviewWorkflow
        queue = settings.task_queue + "-review"
        review_settings = settings.model_copy(update={"task_queue": queue})
        async with create_worker(temporal_client, review_settings, workflows=[review]):
            results = await temporal_client.execute_workflow(
                review.run,
                ["a.py", "b.py"],
                id=f"review-{queue}",
                task_queue=queue,
            )
    finally:
        sys.modules.pop("readme_review", None)
        sys.path.remove(str(tmp_path))
    assert len(results) == 2 and all(isinstance(r, str) and r for r in results)


async def _verify_a_real_notification(snippet: Snippet) -> None:
    """The snippet's ``verify`` accepts what a worker posts, and nothing altered."""
    received: list[tuple[dict[str, str], bytes]] = []

    async def handle(request: web.Request) -> web.Response:
        received.append((dict(request.headers), await request.read()))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    event = NotifyEvent(
        id="subagent-x-notify-1",
        type="task.completed",
        time=datetime.now(UTC),
        task=NotifyTask(id="subagent-x", status=TaskStatus.COMPLETED, result_preview="d\u202eone"),
    )
    try:
        for key in (secret, "a plain secret of 16+ bytes"):
            notifier = Notifier(default_url=f"http://127.0.0.1:{port}/hook", secret=key)
            await notifier.send_notification(NotifyInput(event=event))
    finally:
        await runner.cleanup()
    namespace: dict[str, Any] = {}
    exec(compile(snippet.code, snippet.name, "exec"), namespace)
    verify = namespace["verify"]
    (headers, body), (plain_headers, plain_body) = received
    assert verify(secret, headers, body)
    assert verify("a plain secret of 16+ bytes", plain_headers, plain_body)
    assert not verify(secret, headers, body.replace(b"completed", b"cancelled"))
    assert not verify(secret, plain_headers, plain_body)  # another secret's
    assert not verify(secret, {**headers, "webhook-id": "other"}, body)
    stale = {**headers, "webhook-timestamp": str(int(headers["webhook-timestamp"]) - 3600)}
    assert not verify(secret, stale, body)
