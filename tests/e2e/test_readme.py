"""Every Python snippet of the README and docs/ runs as shown, against a real server and worker.

Each snippet runs as a script of its own in a fresh process, with only what a user's
environment would give it (``TEMPORAL_ADDRESS``, ``SUBAGENTS_TASK_QUEUE`` and, for the
tool loop, ``OPENAI_BASE_URL``), while a worker with the scripted model serves it.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import importlib.util
import json
import os
import re
import sys
import sysconfig
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from pydantic import SecretStr
from temporalio.client import Client

from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.activities import Notifier
from durable_subagents.config import Settings
from durable_subagents.providers import clear_provider_cache, close_providers
from durable_subagents.testing import FakeAnthropicServer, FakeOpenAIServer
from durable_subagents.tools.mcp import load_mcp_config
from durable_subagents.wire._payloads import NotifyEvent, NotifyInput, NotifyTask
from durable_subagents.worker import create_worker

from ..helpers import CEILING
from ..helpers.mcp_servers import python_server, write_config
from ..helpers.tasks import TEST_MODELS, script

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "CONTRIBUTING.md"]
"""The pages whose snippets run: the README, every page of docs/, CONTRIBUTING."""
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


@dataclass
class Snippet:
    page: str
    line: int
    lang: str
    code: str

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def snippets(lang: str) -> list[Snippet]:
    found = []
    for page in PAGES:
        text = page.read_text()
        found += [
            Snippet(
                str(page.relative_to(ROOT)),
                text.count("\n", 0, m.start()) + 1,
                m.group(1),
                m.group(2),
            )
            for m in _BLOCK.finditer(text)
            if m.group(1) == lang
        ]
    return found


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
    if "mcp__" in code:
        return "mcp"
    if "spawn_task(" in code:
        return "spawn"
    return "unknown"


def test_every_python_snippet_has_a_check() -> None:
    kinds = [kind(s) for s in PYTHON]
    assert "unknown" not in kinds, [(s.name, k) for s, k in zip(PYTHON, kinds, strict=True)]
    assert len(PYTHON) >= 6


COMMON = {"--address", "--namespace", "--profile", "--task-queue", "--help"}
"""Options docs/cli.md states once for every command that talks to Temporal."""


def synopsis() -> dict[str, str]:
    """The command synopsis of docs/cli.md: each command's lines joined, by command name."""
    section = (ROOT / "docs" / "cli.md").read_text()
    block = next(m.group(2) for m in _BLOCK.finditer(section) if m.group(1) == "")
    commands: dict[str, str] = {}
    name = ""
    for line in block.splitlines():
        if line.startswith("subagents "):
            words = line.split()
            name = words[1] if not words[1].startswith(("-", "[")) else ""
            commands[name] = commands.get(name, "") + " " + " ".join(words[2 if name else 1 :])
        elif line.strip():
            commands[name] += " " + line.strip()
    return commands


def test_the_command_synopsis_matches_each_commands_help() -> None:
    """Every command, argument and option of `--help` is in the synopsis of docs/cli.md, and
    nothing else is (options every command takes are stated once, above it)."""
    import typer.main

    from durable_subagents.cli import app

    group = typer.main.get_command(app)
    listed = synopsis()
    assert set(listed) == {"", *group.commands}, sorted(listed)
    for name, line in listed.items():
        command = group.commands[name] if name else group
        mentioned = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", line))
        params = [p for p in command.params if not set(p.opts) & COMMON]
        for param in params:
            if param.param_type_name == "argument":
                assert re.search(rf"\b{param.metavar}\b", line), (name, param.metavar, line)
                continue
            forms = {*param.opts, *param.secondary_opts}
            assert forms & mentioned, f"subagents {name}: {sorted(forms)} missing from {line}"
        known = {f for p in command.params for f in (*p.opts, *p.secondary_opts)}
        assert mentioned <= known | {"-"}, f"subagents {name}: no {mentioned - known - {'-'}}"
        words = set(re.findall(r"\b[A-Z][A-Z_]+\b", line.split("[", 1)[0]))
        arguments = {p.metavar for p in command.params if p.param_type_name == "argument"}
        assert words == arguments, (name, words, arguments)


def test_the_licence_is_the_mit_licence_the_package_declares() -> None:
    import tomllib

    root = README.parent
    declared = tomllib.loads((root / "pyproject.toml").read_text())["project"]["license"]
    assert declared == {"text": "MIT"}
    text = (root / "LICENSE").read_text()
    assert text.startswith("MIT License\n\nCopyright (c) 2026 the durable-subagents authors\n")
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in text


def test_json_snippets_parse() -> None:
    for snippet in snippets("json"):
        json.loads(snippet.code)


def test_mcp_server_declarations_load_as_shown(tmp_path: Path) -> None:
    """Every ``mcpServers`` snippet is a configuration a worker takes whole."""
    declared = [s for s in snippets("json") if '"mcpServers"' in s.code]
    assert declared
    for snippet in declared:
        path = tmp_path / f"{snippet.line}.json"
        path.write_text(snippet.code)
        variables = dict.fromkeys(re.findall(r"\$\{(\w+)\}", snippet.code), "set")
        config = load_mcp_config([path], variables)
        assert config.problems == [], (snippet.name, config.problems)
        assert set(config.servers) == set(json.loads(snippet.code)["mcpServers"])


MCP_JSON = ROOT / "docs" / "mcp.md"


async def test_the_mcp_json_snippet_serves_tasks_offline(
    served: dict[str, str], tmp_path: Path
) -> None:
    """docs/mcp.md's ``.mcp.json`` starts the server the README installs, and a task it
    spawns runs on the worker `subagents dev` starts with no API key."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    [snippet] = [
        s for s in snippets("json") if s.page == "docs/mcp.md" and '"subagents": {' in s.code
    ]
    server = json.loads(snippet.code)["mcpServers"]["subagents"]
    command = Path(server["command"])
    # The README installs into the clone's .venv: the command names it whole, as an MCP
    # client started in another directory, without the venv on PATH, needs it.
    assert command.is_absolute() and command.parts[-3:] == (".venv", "bin", "subagents")
    installed = Path(sysconfig.get_path("scripts")) / "subagents"
    assert installed.is_file()
    env = {**served, **server["env"], "TEMPORAL_ADDRESS": served["TEMPORAL_ADDRESS"]}
    params = StdioServerParameters(command=str(installed), args=server["args"], env=env)
    with (tmp_path / "mcp.err").open("w") as errlog:
        async with (
            asyncio.timeout(CEILING),
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            spawned = await session.call_tool(
                "spawn_subagent", {"agent": "explore", "prompt": "Find the retry logic."}
            )
            assert not spawned.is_error, spawned
            task_id = json.loads(spawned.content[0].text)["task_id"]  # type: ignore[union-attr]
            checked = await session.call_tool(
                "check_subagent", {"task_id": task_id, "timeout": CEILING}
            )
            view = json.loads(checked.content[0].text)  # type: ignore[union-attr]
            assert view["status"] == "completed", view


async def test_the_endpoints_snippet_serves_a_worker_as_shown(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """docs/models.md's endpoints file, with two fake servers in its servers' places: a
    task on each endpoint reaches its own server, with the key and header it names."""
    [snippet] = [
        s for s in snippets("toml") if s.page == "docs/models.md" and "[endpoints." in s.code
    ]
    local, remote = "http://localhost:11434/v1", "https://llm-gateway.example.com/anthropic"
    assert local in snippet.code and remote in snippet.code
    monkeypatch.setenv("GATEWAY_KEY", "sk-gateway-from-the-env")
    monkeypatch.delenv("TEAM", raising=False)
    async with FakeOpenAIServer(quirks="ollama") as ollama, FakeAnthropicServer() as gateway:
        path = tmp_path / "endpoints.toml"
        path.write_text(
            snippet.code.replace(local, ollama.base_url).replace(remote, gateway.base_url)
        )
        ollama.add_reply(text="from ollama")
        gateway.add_reply(text="from the gateway")
        worker_settings = settings.model_copy(
            update={"endpoints": SecretStr(str(path)), "models": "*"}
        )
        clear_provider_cache()
        try:
            async with create_worker(temporal_client, worker_settings):
                infos = []
                for model in ("ollama:llama3.1", "gateway:claude-haiku-4-5"):
                    task_id = await client.spawn_task("explore", "hi", model=model)
                    infos.append(await client.check_task(task_id, wait=True, timeout=CEILING))
        finally:
            await close_providers()
    assert [(i.status, i.result) for i in infos] == [
        (TaskStatus.COMPLETED, "from ollama"),
        (TaskStatus.COMPLETED, "from the gateway"),
    ], [i.error for i in infos]
    assert [r["model"] for r in ollama.requests + gateway.requests] == [
        "llama3.1",
        "claude-haiku-4-5",
    ]
    [headers] = gateway.request_headers
    assert headers["x-team"] == "research"
    sent = headers.get("x-api-key") or headers["authorization"]
    assert sent.removeprefix("Bearer ") == "sk-gateway-from-the-env"


@pytest.fixture
async def served(
    temporal_client: Client, settings: Settings, workspace: Path, tmp_path: Path
) -> AsyncIterator[dict[str, str]]:
    """A worker on this test's queue with the default model, as `subagents dev` runs one
    with no API key, and the environment a snippet's process gets."""
    (workspace / "inventory").mkdir()
    (workspace / "inventory" / "stock.py").write_text("def count():\n    return 1\n")
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_stock.py").write_text("def test_count():\n    pass\n")
    worker_settings = settings.model_copy(update={"model": None})
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SUBAGENTS_", "TEMPORAL_", "OPENAI_", "ANTHROPIC_"))
    }
    env.update(
        **TEST_MODELS,
        TEMPORAL_ADDRESS=settings.address,
        SUBAGENTS_TASK_QUEUE=settings.task_queue,
        SUBAGENTS_BLOB_DIR=str(settings.resolved_blob_dir),
        SUBAGENTS_DATA_DIR=str(tmp_path / "client-data"),
    )
    async with create_worker(temporal_client, worker_settings):
        yield env


async def run_snippet(snippet: Snippet, env: dict[str, str], cwd: Path) -> str:
    script = cwd / f"snippet_{Path(snippet.page).stem.replace('-', '_')}_{snippet.line}.py"
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
        done = await client.check_task(child.id, wait=True, timeout=CEILING)
        assert done.status == TaskStatus.COMPLETED
        return
    if what == "mcp":
        await _run_with_a_time_server(snippet, served, tmp_path, temporal_client, settings)
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
        command = "find . -name '*.py' -not -path '*/.*' | sort | xargs wc -l"
        assert out.startswith(f"asks to run: bash · {command}\n"), out  # it paused, offline
        assert out.splitlines()[1].startswith("completed "), out
        assert "inventory/stock.py" in out
    elif what == "tool":
        assert out == ""
    elif what == "workflow":
        await _run_review_workflow(snippet, tmp_path, temporal_client, settings)


async def _run_with_a_time_server(
    snippet: Snippet,
    served: dict[str, str],
    tmp_path: Path,
    temporal_client: Client,
    settings: Settings,
) -> None:
    """The snippet's agent, on a worker whose ``time`` server is mcp-server-time, runs the
    tool its rule allows without a pause, and prints what the server answered."""
    config = write_config(
        tmp_path / "servers.json", {"time": python_server("time", "-m", "mcp_server_time")}
    )
    asks = {"name": "mcp__time__get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}
    model = script({"tool_calls": [asks]}, {"text": "It is evening in Tokyo."})
    queue = settings.task_queue + "-mcp"
    update = {"task_queue": queue, "mcp_config": str(config), "model": model}
    async with create_worker(temporal_client, settings.model_copy(update=update)):
        env = {**served, "SUBAGENTS_TASK_QUEUE": queue, "SUBAGENTS_MODEL": model}
        out = await run_snippet(snippet, env, tmp_path)
    *answer, status = out.strip().splitlines()
    assert json.loads("\n".join(answer))["timezone"] == "Asia/Tokyo", out
    assert status == "completed", out


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


def test_the_client_table_names_each_calls_parameters() -> None:
    """docs/client.md's table of calls states each call's parameters, in order, with the
    same keyword-only marker and defaults as the code: the table cannot drift."""
    import inspect

    from durable_subagents import SubagentClient

    text = (ROOT / "docs" / "client.md").read_text()
    rows = re.findall(r"^\| (`\w+\(.*?\)`(?: / `\w+\(.*?\)`)*) \|", text, re.M)
    shown = {}
    for cell in rows:
        for call in re.findall(r"`(\w+)\((.*?)\)`", cell):
            shown[call[0]] = call[1].replace("\\|", "|")
    public = {
        name
        for name, fn in inspect.getmembers(SubagentClient, inspect.iscoroutinefunction)
        if not name.startswith("_")
    } | {"watch"}
    assert set(shown) == public - {"close", "connect"}, sorted(public ^ set(shown))
    alias = {"id": "task_id", "ids": "task_ids"}  # the table's short names
    for name, params in shown.items():
        signature = list(inspect.signature(getattr(SubagentClient, name)).parameters.values())
        positional = [p.name for p in signature[1:] if p.kind is not p.KEYWORD_ONLY]
        keyword = {p.name for p in signature[1:] if p.kind is p.KEYWORD_ONLY}
        defaults = {p.name: p.default for p in signature[1:]}
        written = [part.strip() for part in params.split(",")]
        before = [w.split("=")[0] for w in written] + ["*"]  # none written: all positional
        star = before.index("*")
        names = [alias.get(w, w) for w in before[:star]]
        assert names == positional, (name, names, positional)
        assert {alias.get(w, w) for w in before[star + 1 : -1]} == keyword, (name, keyword)
        for w in written:
            key, _, value = w.partition("=")
            if value and key != "mode":  # mode="all"|"any" names the choices
                assert ast.literal_eval(value) == defaults[alias.get(key, key)], (name, w)
