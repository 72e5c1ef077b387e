"""MCP servers' tools in whole tasks: a real worker, real servers, both provider wires.

The worker reads its servers as a user's would (the workspace's ``.mcp.json``, or
``--mcp-config``), offers their tools to the model, asks before a call in ``default``
mode, runs an approved call once (across a worker's SIGKILL while paused), ends a hung
call when the task is cancelled, and keeps hostile servers and models contained.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_subagents import (
    AgentSpec,
    PermissionRule,
    SubagentClient,
    TaskStatus,
    connect_client,
)
from durable_subagents.config import Settings
from durable_subagents.testing import DevServer, FakeReply, free_port
from durable_subagents.tools._images import image_size
from durable_subagents.tools.mcp import McpServer
from durable_subagents.tools.mcp._config import MAX_TIMEOUT
from durable_subagents.wire._payloads import RUN_TOOL_ACTIVITY
from durable_subagents.worker import create_worker

from ..helpers import CEILING, eventually
from ..helpers.mcp_servers import (
    HttpServer,
    alive,
    git,
    processes_with,
    python_server,
    script_server,
    write_config,
)
from ..helpers.metrics import running_worker, scrape, value
from ..helpers.processes import worker_process
from ..helpers.providers import MODELS, PROVIDERS, model_api
from ..helpers.tasks import give_to_tool_user, script
from ..helpers.telemetry import all_attribute_values, in_memory_spans

AUTHOR = {
    "GIT_AUTHOR_NAME": "Ada",
    "GIT_AUTHOR_EMAIL": "ada@example.com",
    "GIT_COMMITTER_NAME": "Ada",
    "GIT_COMMITTER_EMAIL": "ada@example.com",
}


def git_server() -> McpServer:
    return python_server("git", "-m", "mcp_server_git", env=AUTHOR)


def repository(workspace: Path) -> Path:
    """The workspace as a git repository with one new file, the tool user's."""
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    (workspace / "README.md").write_text("# notes\n")
    return give_to_tool_user(workspace)


def commits(workspace: Path) -> list[str]:
    try:
        return git(workspace, "log", "--format=%s").splitlines()
    except subprocess.CalledProcessError:
        return []  # no commit yet


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def tool_results(body: dict[str, Any]) -> list[str]:
    """The tool results a model request carries (either API's wire shape)."""
    out = []
    for message in body["messages"]:
        if message["role"] == "tool":
            out.append(message["content"])
        elif isinstance(message["content"], list):
            for block in message["content"]:
                if block["type"] == "tool_result":
                    content = block["content"]
                    if isinstance(content, list):
                        content = "".join(b.get("text", "") for b in content)
                    out.append(content)
    return out


def offered(body: dict[str, Any]) -> set[str]:
    """The tool names a model request offers (either API's wire shape)."""
    return {t["function"]["name"] if "function" in t else t["name"] for t in body.get("tools", [])}


@pytest.fixture
async def http_server(tmp_path: Path) -> AsyncIterator[HttpServer]:
    server = HttpServer(tmp_path / "http.err")
    await server.start()
    try:
        yield server
    finally:
        server.stop()


# ---------------------------------------------------------------- real servers, both wires


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_real_servers_through_each_wire_with_an_agent_spec(
    kind: str,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
    http_server: HttpServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    repository(workspace)
    monkeypatch.setenv("NOTES_TOKEN", http_server.token)
    config = write_config(
        tmp_path / "servers.json",
        {
            "time": python_server("time", "-m", "mcp_server_time"),
            "git": git_server(),
            "notes": {
                "type": "http",
                "url": http_server.url,
                "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"},
            },
        },
    )
    client.agents["clock"] = AgentSpec(
        name="clock",
        tools=["mcp__time", "mcp__notes__add", "mcp__git__git_status"],
        permission_mode="dont_ask",
    )
    async with model_api(monkeypatch, kind) as srv:
        srv.add_reply(
            tool_calls=[
                call("mcp__time__get_current_time", timezone="Asia/Tokyo"),
                call("mcp__notes__add", a=2, b=3),
                call("mcp__git__git_status", repo_path="."),
            ]
        )
        srv.add_reply(text="It is late in Tokyo.")
        worker_settings = settings.model_copy(update={"mcp_config": str(config)})
        async with create_worker(temporal_client, worker_settings):
            task_id = await client.spawn_task("clock", "what time?", model=MODELS[kind])
            info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "It is late in Tokyo."
    first, second = srv.requests
    assert offered(first) == {
        "mcp__time__get_current_time",
        "mcp__time__convert_time",
        "mcp__notes__add",
        "mcp__git__git_status",
    }
    now, total, status = tool_results(second)
    assert json.loads(now)["timezone"] == "Asia/Tokyo", now
    assert total == "5"
    assert "README.md" in status, status
    # the server's secrets stay on the worker
    history = json.dumps(
        [str(e) async for e in temporal_client.get_workflow_handle(task_id).fetch_history_events()]
    )
    assert http_server.token not in history and "PYTHONPATH" not in history


# ---------------------------------------------------------------- images


def wire_images(body: dict[str, Any]) -> list[tuple[str, bytes]]:
    """The images a model request carries, as (media type, bytes), in either API's shape."""
    found = []
    for message in body["messages"]:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if block["type"] == "image_url":
                head, _, data = block["image_url"]["url"].partition(",")
                media_type = head.removeprefix("data:").removesuffix(";base64")
                found.append((media_type, base64.b64decode(data)))
            for part in block.get("content", []) if block["type"] == "tool_result" else []:
                if isinstance(part, dict) and part["type"] == "image":
                    source = part["source"]
                    found.append((source["media_type"], base64.b64decode(source["data"])))
    return found


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_images_from_a_server_reach_the_model_through_each_wire(
    kind: str,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = write_config(
        tmp_path / "servers.json",
        {"shots": script_server("shots"), "hostile": script_server("hostile")},
    )
    client.agents["looker"] = AgentSpec(
        name="looker", tools=["mcp__shots", "mcp__hostile"], permission_mode="dont_ask"
    )
    async with model_api(monkeypatch, kind) as srv:
        srv.add_reply(
            tool_calls=[
                call("mcp__shots__picture", text="5"),
                call("mcp__shots__bad-pictures"),
                call("mcp__hostile__huge-picture"),
            ]
        )
        srv.add_reply(tool_calls=[call("mcp__shots__echo", text="again")])
        srv.add_reply(text="A grey line.")
        worker_settings = settings.model_copy(update={"mcp_config": str(config)})
        async with create_worker(temporal_client, worker_settings):
            task_id = await client.spawn_task("looker", "look", model=MODELS[kind])
            info = await client.check_task(task_id, wait=True, timeout=CEILING)
            events = [e async for e in client.watch(task_id)]
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "A grey line."
    assert srv.outcomes == ["200", "200", "200"]  # the fake API took every request's shape
    first, second, third = srv.requests
    assert wire_images(first) == []
    shown = wire_images(second)
    assert [t for t, _ in shown] == ["image/png", "image/gif"] + ["image/png"] * 4
    png = shown[0][1]
    assert png.startswith(b"\x89PNG") and image_size(png, "image/png") == (5, 1)
    assert wire_images(third) == shown  # still in the context a turn later
    picture, bad, huge = tool_results(second)[:3]
    assert "[image 1: image/png" in picture and "[image 2: image/gif" in picture
    assert "left out: not valid base64" in bad and "left out: 9000x1 pixels" in bad
    assert "MCP server 'hostile' is unavailable" in huge and "longer than 4 MiB" in huge
    if kind == "openai":  # a tool message takes only text: the images follow in a user's
        assert "[its images follow in the next message]" in picture
        assert [m["role"] for m in second["messages"][-4:]] == ["tool", "tool", "tool", "user"]
    # what is recorded and shown names the images; their bytes stay in the blob store
    encoded = base64.b64encode(png).decode()
    history = json.dumps(
        [str(e) async for e in temporal_client.get_workflow_handle(task_id).fetch_history_events()]
    )
    assert encoded not in history
    watched = json.dumps([e.model_dump(mode="json") for e in events])
    # (a note may name base64, as "not valid base64" does; no data URL is shown)
    assert encoded not in watched and ";base64," not in watched
    assert any(e.kind == "tool_finished" and e.tool == "mcp__shots__picture" for e in events)
    [result] = [
        m for m in await client.get_transcript(task_id) if m.tool_name == "mcp__shots__picture"
    ]
    assert [(i.media_type, i.data) for i in result.images] == [("image/png", ""), ("image/gif", "")]
    assert result.images[0].size == len(png)


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_a_task_whose_images_outgrow_its_window_compacts_them_away(
    kind: str,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Eight results of two images each (about 3,200 tokens a result) in a 12,000-token
    window: compaction turns older results into notes, their images with them, and the
    summary call is sent no image."""
    window = 12_000
    config = write_config(tmp_path / "servers.json", {"shots": script_server("shots")})
    client.agents["looker"] = AgentSpec(
        name="looker", tools=["mcp__shots"], permission_mode="dont_ask", context_window=window
    )
    pictures = 8
    asked = []

    def respond(body: dict[str, Any]) -> FakeReply:
        if not body.get("tools"):  # a summary call offers no tools
            return FakeReply(text="The agent looked at several grey lines.")
        if len(asked) < pictures:
            asked.append(len(asked))
            return FakeReply(tool_calls=[call("mcp__shots__picture", text=str(len(asked)))])
        return FakeReply(text="Eight grey lines.")

    async with model_api(monkeypatch, kind, context_window=window, responder=respond) as srv:
        worker_settings = settings.model_copy(update={"mcp_config": str(config)})
        async with create_worker(temporal_client, worker_settings):
            task_id = await client.spawn_task("looker", "look", model=MODELS[kind])
            info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "Eight grey lines."
    assert info.compactions >= 1
    assert set(srv.outcomes) == {"200"}  # never over the window, every shape taken
    turns = [b for b in srv.requests if b.get("tools")]
    summaries = [b for b in srv.requests if not b.get("tools")]
    assert all(wire_images(b) == [] for b in summaries)
    last = turns[-1]
    assert 0 < len(wire_images(last)) < 2 * pictures  # the latest kept, the older noted
    assert "[compacted: its output of this mcp__shots__picture call" in json.dumps(last)
    assert max(srv.prompt_tokens(b) for b in srv.requests) <= window


async def test_a_worker_that_sends_no_images_names_them_in_the_text(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = write_config(tmp_path / "servers.json", {"shots": script_server("shots")})
    client.agents["looker"] = AgentSpec(
        name="looker", tools=["mcp__shots"], permission_mode="dont_ask"
    )
    async with model_api(monkeypatch, "openai") as srv:
        srv.add_reply(tool_calls=[call("mcp__shots__picture", text="5")])
        srv.add_reply(text="I was told of two images.")
        worker_settings = settings.model_copy(
            update={"mcp_config": str(config), "tool_images": False}
        )
        async with create_worker(temporal_client, worker_settings):
            task_id = await client.spawn_task("looker", "look", model=MODELS["openai"])
            info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    second = srv.requests[1]
    assert wire_images(second) == [] and second["messages"][-1]["role"] == "tool"
    [picture] = tool_results(second)
    assert picture.startswith("two pictures:\n[image 1: image/png, ") and "follow" not in picture


# ---------------------------------------------------------------- where people look


async def test_an_mcp_call_is_shown_by_server_and_tool_and_counted_per_server(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path / "servers.json", {"good": script_server("good")})
    client.agents["any"] = AgentSpec(name="any", tools=["mcp__good"], permission_mode="dont_ask")
    model = script(
        {"tool_calls": [call("mcp__good__echo", text="hi")]},
        {"tool_calls": [call("mcp__good__fails")]},
        {"text": "ok"},
    )
    worker_settings = settings.model_copy(
        update={"mcp_config": str(config), "metrics_port": free_port()}
    )
    async with running_worker(worker_settings) as base:
        task_id = await client.spawn_task("any", "echo", model=model)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
        scraped = await scrape(base)
    assert info.status == TaskStatus.COMPLETED, info.error
    # the Web UI's summary of each call's activity
    converter = temporal_client.data_converter.payload_converter
    summaries = [
        converter.from_payload(e.user_metadata.summary, str)
        async for e in temporal_client.get_workflow_handle(task_id).fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == RUN_TOOL_ACTIVITY
    ]
    assert summaries == ['mcp__good__echo · {"text": "hi"}', "mcp__good__fails · {}"]
    # watch shows them as it shows any call
    calls = [
        (e.kind, e.tool, e.summary)
        async for e in client.watch(task_id)
        if e.kind in ("tool_started", "tool_finished")
    ]
    assert calls == [
        ("tool_started", "mcp__good__echo", summaries[0]),
        ("tool_finished", "mcp__good__echo", summaries[0]),
        ("tool_started", "mcp__good__fails", summaries[1]),
        ("tool_finished", "mcp__good__fails", summaries[1]),
    ]
    # metrics: a server's calls and errors
    calls_metric = "subagents_tool_calls"
    assert value(scraped, calls_metric, server="good", outcome="ok") == 1
    assert value(scraped, calls_metric, server="good", outcome="error") == 1
    assert value(scraped, calls_metric, tool="mcp__good__fails", outcome="error") == 1


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_structured_content_reaches_the_model_beside_the_text(
    kind: str,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = write_config(tmp_path / "servers.json", {"good": script_server("good")})
    client.agents["any"] = AgentSpec(name="any", tools=["mcp__good"], permission_mode="dont_ask")
    async with model_api(monkeypatch, kind) as srv:
        srv.add_reply(tool_calls=[call("mcp__good__both"), call("mcp__good__restated")])
        srv.add_reply(text="two issues")
        worker_settings = settings.model_copy(update={"mcp_config": str(config)})
        async with create_worker(temporal_client, worker_settings):
            task_id = await client.spawn_task("any", "issues?", model=MODELS[kind])
            info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    both, restated = tool_results(srv.requests[-1])
    assert both == (
        "2 open issues\n"
        '[structured content] {"issues":[{"id":7,"title":"flaky"},{"id":9,"title":"slow"}]}'
    )
    assert restated == '{"answer": 42}'  # said once, as the text already says it


# ---------------------------------------------------------------- approvals


GITTER = """---
name: gitter
description: Commits what it is asked to.
tools: Read, mcp__git__git_add, mcp__git__git_commit
---
You commit.
"""


def commit_script() -> str:
    return script(
        {"tool_calls": [call("mcp__git__git_add", repo_path=".", files=["README.md"])]},
        {"tool_calls": [call("mcp__git__git_commit", repo_path=".", message="From MCP")]},
        {"text": "committed"},
    )


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_git_commit_from_an_agent_file_pauses_and_runs_once_after_approval(
    kind: str,
    settings: Settings,
    temporal_client: Client,
    workspace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    repository(workspace)
    write_config(workspace / ".mcp.json", {"git": git_server()})
    give_to_tool_user(workspace)
    project = tmp_path / "project"
    (project / ".claude" / "agents").mkdir(parents=True)
    (project / ".claude" / "agents" / "gitter.md").write_text(GITTER)
    client = await SubagentClient.connect(settings=settings, agents_dir=project)
    assert client.agents["gitter"].tools == [
        "read_file",
        "mcp__git__git_add",
        "mcp__git__git_commit",
    ]
    async with model_api(monkeypatch, kind) as srv, create_worker(temporal_client, settings):
        srv.add_reply(tool_calls=[call("mcp__git__git_add", repo_path=".", files=["README.md"])])
        srv.add_reply(tool_calls=[call("mcp__git__git_commit", repo_path=".", message="From MCP")])
        srv.add_reply(text="committed")
        task_id = await client.spawn_task("gitter", "commit it", model=MODELS[kind])
        adding = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert adding.status == TaskStatus.PAUSED
        [add] = adding.pending_approvals
        assert add.tool_name == "mcp__git__git_add"
        await client.approve(task_id)
        paused = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert paused.status == TaskStatus.PAUSED, paused.error
        [pending] = paused.pending_approvals
        assert pending.tool_name == "mcp__git__git_commit"
        assert "From MCP" in pending.arguments_preview
        assert "server says: changes things" in pending.arguments_preview
        assert commits(workspace) == []  # nothing ran before the decision
        await client.approve(task_id)
        done = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert done.status == TaskStatus.COMPLETED, done.error
    assert done.result == "committed"
    assert commits(workspace) == ["From MCP"]
    assert offered(srv.requests[0]) == {"read_file", "mcp__git__git_add", "mcp__git__git_commit"}
    added, committed = tool_results(srv.requests[-1])
    assert "staged" in added, added
    assert "Changes committed successfully" in committed, committed


async def test_git_commit_approved_after_a_sigkill_while_paused_runs_once(
    client: SubagentClient, settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    repository(workspace)
    write_config(workspace / ".mcp.json", {"git": git_server()})
    give_to_tool_user(workspace)
    client.agents["gitter"] = AgentSpec(
        name="gitter",
        tools=["mcp__git__git_add", "mcp__git__git_commit"],
        permissions=[PermissionRule(tool="mcp__git__git_add", action="allow")],
    )
    workers = [worker_process(settings, workspace, tmp_path / "worker.log", {})]
    try:
        await workers[0].start()
        task_id = await client.spawn_task("gitter", "commit it", model=commit_script())
        paused = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert paused.status == TaskStatus.PAUSED, paused.error
        assert [p.tool_name for p in paused.pending_approvals] == ["mcp__git__git_commit"]
        servers = [p for p in _children(workers[0].pid) if "mcp_server_git" in _cmdline(p)]
        assert servers, "the git server runs for the worker"
        workers[0].kill()
        await eventually(lambda: not any(alive(p) for p in servers), "the git server to end")
        await client.approve(task_id)
        workers.append(worker_process(settings, workspace, tmp_path / "worker.log", {}))
        await workers[1].start()
        done = await client.check_task(task_id, wait=True, timeout=CEILING)
    finally:
        for w in workers:
            w.close()
    assert done.status == TaskStatus.COMPLETED, done.error
    assert commits(workspace) == ["From MCP"]


@pytest.mark.parametrize("on_interrupted", ["report", "rerun"])
async def test_an_approved_commit_a_sigkill_cuts_off_runs_at_most_once_or_again_if_asked(
    on_interrupted: str,
    client: SubagentClient,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
) -> None:
    """The worker dies while an approved side-effecting call runs (a commit that takes
    its time, counted on disk; ``git_commit`` itself is over too soon to be caught).
    ``report`` (the default): the next worker tells the model, and the commit happened
    once. ``rerun``: the next worker runs it again."""
    markers = tmp_path / "marks"
    markers.mkdir()
    markers.chmod(0o777)
    config = write_config(
        tmp_path / "servers.json", {"repo": script_server("repo", "good", markers)}
    )
    spec = AgentSpec(name="committer", tools=["mcp__repo__commit"])
    if on_interrupted == "rerun":
        spec = spec.model_copy(update={"on_interrupted": "rerun"})
    client.agents["committer"] = spec
    model = script({"tool_calls": [call("mcp__repo__commit", text="300")]}, {"text": "carried on"})
    env = {"SUBAGENTS_MCP_CONFIG": str(config)}
    workers = [worker_process(settings, workspace, tmp_path / "worker.log", env)]
    try:
        await workers[0].start()
        task_id = await client.spawn_task("committer", "commit", model=model)
        paused = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert paused.status == TaskStatus.PAUSED, paused.error
        assert [p.tool_name for p in paused.pending_approvals] == ["mcp__repo__commit"]
        assert not (markers / "commits").exists()  # nothing ran before the decision
        await client.approve(task_id)
        [mark] = await eventually(lambda: list(markers.glob("commit-*")), "the commit to run")
        pid = int(mark.read_text())
        workers[0].kill()
        await eventually(lambda: not alive(pid), "the server to die with its worker")
        workers.append(worker_process(settings, workspace, tmp_path / "worker.log", env))
        await workers[1].start()
        done = await client.check_task(task_id, wait=True, timeout=CEILING)
    finally:
        for w in workers:
            w.close()
    assert done.status == TaskStatus.COMPLETED, done.error
    assert done.result == "carried on"
    [result] = [m for m in await client.get_transcript(task_id) if m.role == "tool"]
    runs = (markers / "commits").read_text().splitlines()
    if on_interrupted == "report":
        assert len(runs) == 1
        assert result.is_error and "mcp__repo__commit was interrupted" in result.content
    else:
        assert len(runs) == 2 and runs[0] != runs[1]  # again, by a server of the new worker
        assert not result.is_error and result.content == "committed"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                found.append(int(entry.name))
    return found


# ---------------------------------------------------------------- cancel


async def test_cancel_during_a_hung_call_ends_the_task_and_the_server_serves_again(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
) -> None:
    markers = tmp_path / "marks"
    markers.mkdir()
    markers.chmod(0o777)
    config = write_config(
        tmp_path / "servers.json", {"slow": script_server("slow", "good", markers)}
    )
    client.agents["runner"] = AgentSpec(
        name="runner", tools=["mcp__slow"], permission_mode="dont_ask"
    )
    worker_settings = settings.model_copy(update={"mcp_config": str(config)})
    async with create_worker(temporal_client, worker_settings):
        hung = script({"tool_calls": [call("mcp__slow__hang")]}, {"text": "never"})
        task_id = await client.spawn_task("runner", "hang", model=hung)
        marks = await eventually(lambda: list(markers.glob("hang-*")), "the call to hang")
        pid = int(marks[0].read_text())
        started = time.monotonic()
        info = await client.cancel_task(task_id, wait=True, timeout=CEILING)
        took = time.monotonic() - started
        assert info.status == TaskStatus.CANCELLED
        assert took < 5.0, took
        assert (markers / f"cancelled-{pid}").exists()  # the server was told
        await eventually(lambda: not alive(pid), "the server that kept the call to end")

        echo = script({"tool_calls": [call("mcp__slow__echo", text="back again")]}, {"text": "ok"})
        task_id = await client.spawn_task("runner", "echo", model=echo)
        done = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert processes_with(str(markers)), "a fresh server process serves the workspace"
    # the worker has drained: its servers stopped with it
    assert processes_with(str(markers)) == []
    assert done.status == TaskStatus.COMPLETED, done.error
    [result] = [m for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert result.content == "back again"


# ---------------------------------------------------------------- hostile servers and models


async def test_hostile_servers_stall_neither_the_worker_nor_other_tasks(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
) -> None:
    config = write_config(
        tmp_path / "servers.json",
        {
            "good": script_server("good"),
            "flood": script_server("flood", "flood-line"),
            "garbled": script_server("garbled", "malformed"),
            "many": script_server("many", "many-tools"),
            "hanging": script_server("hanging", "good", timeout=3),
            "mute": script_server("mute", "hang-at-start", timeout=3),
        },
    )
    client.agents["any"] = AgentSpec(name="any", permission_mode="dont_ask")
    worker_settings = settings.model_copy(update={"mcp_config": str(config)})
    started = time.monotonic()
    async with create_worker(temporal_client, worker_settings):
        hostile = script(
            {
                "tool_calls": [
                    call("mcp__flood__echo", text="x"),
                    call("mcp__hanging__hang"),
                    call("mcp__garbled__echo", text="through the garbage"),
                    call("mcp__many__t09999"),
                    call("mcp__many__t00001"),
                ]
            },
            {"text": "survived"},
        )
        good = script({"tool_calls": [call("mcp__good__echo", text="fine")]}, {"text": "ok"})
        bad_id = await client.spawn_task("any", "hostile", model=hostile)
        good_id = await client.spawn_task("any", "good", model=good)
        fine = await client.check_task(good_id, wait=True, timeout=CEILING)
        assert fine.status == TaskStatus.COMPLETED, fine.error
        bad = await client.check_task(bad_id, wait=True, timeout=CEILING)
    assert time.monotonic() - started < 60
    assert bad.status == TaskStatus.COMPLETED, bad.error
    flood, hanging, garbled, past_limit, kept = (
        m.content for m in await client.get_transcript(bad_id) if m.role == "tool"
    )
    assert "MCP server 'flood' is unavailable" in flood and "longer than 4 MiB" in flood
    assert "MCP server 'hanging' is unavailable" in hanging and "within 3 s" in hanging
    assert garbled == "through the garbage"
    # past the 512 offered: not a tool; within them: sent to the server, which lists
    # tools it does not run
    assert past_limit.startswith("unknown tool 'mcp__many__t09999'"), past_limit
    assert "Unknown tool: t00001" in kept, kept
    [echo] = [m.content for m in await client.get_transcript(good_id) if m.role == "tool"]
    assert echo == "fine"


async def test_a_model_cannot_reach_a_server_its_agent_does_not_list(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
) -> None:
    markers = tmp_path / "marks"
    markers.mkdir()
    markers.chmod(0o777)
    config = write_config(
        tmp_path / "servers.json",
        {
            "good": script_server("good", "good", markers),
            "vault": script_server("vault", "good", markers),
        },
    )
    client.agents["narrow"] = AgentSpec(
        name="narrow", tools=["mcp__good__echo"], permission_mode="dont_ask"
    )
    attack = script(
        {
            "tool_calls": [
                call("mcp__vault__hang"),
                call("mcp__good__hang"),
                call("mcp__vault", text="x"),
                call("mcp__good__echo", text="allowed"),
            ]
        },
        {"text": "tried"},
    )
    worker_settings = settings.model_copy(update={"mcp_config": str(config)})
    async with create_worker(temporal_client, worker_settings):
        task_id = await client.spawn_task("narrow", "attack", model=attack)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    vault, other_tool, server_name, echo = (
        m.content for m in await client.get_transcript(task_id) if m.role == "tool"
    )
    for refused, name in zip(
        (vault, other_tool, server_name),
        ("mcp__vault__hang", "mcp__good__hang", "mcp__vault"),
        strict=True,
    ):
        assert refused == f"unknown tool {name!r}; available tools: mcp__good__echo"
    assert echo == "allowed"
    assert list(markers.glob("hang-*")) == []  # neither hang ever reached a server


async def test_a_calls_activity_outlasts_its_servers_timeout_whatever_the_model_says(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
) -> None:
    """A ``timeout`` argument belongs to the server's tool: it never shortens the
    activity below the server's timeout (which the worker enforces), or Temporal would
    end and retry a call the server is still running."""
    config = write_config(tmp_path / "servers.json", {"good": script_server("good")})
    client.agents["any"] = AgentSpec(name="any", tools=["mcp__good"], permission_mode="dont_ask")
    model = script(
        {"tool_calls": [call("mcp__good__echo", text="short", timeout=1)]}, {"text": "ok"}
    )
    worker_settings = settings.model_copy(update={"mcp_config": str(config)})
    async with create_worker(temporal_client, worker_settings):
        task_id = await client.spawn_task("any", "echo", model=model)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    scheduled = [
        e.activity_task_scheduled_event_attributes
        async for e in temporal_client.get_workflow_handle(task_id).fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    [tool] = [a for a in scheduled if a.activity_type.name == RUN_TOOL_ACTIVITY]
    assert tool.start_to_close_timeout.ToTimedelta() == timedelta(seconds=MAX_TIMEOUT + 60)


def test_subagents_tools_lists_each_servers_tools_and_what_cannot_be_offered(
    tmp_path: Path,
) -> None:
    (tmp_path / "ws").mkdir()
    workspace = give_to_tool_user(tmp_path / "ws")
    config = write_config(
        tmp_path / "servers.json",
        {
            "time": python_server("time", "-m", "mcp_server_time"),
            "broken": script_server("broken", "exit-at-start"),
        },
    )
    proc = subprocess.run(
        [sys.executable, "-m", "durable_subagents", "tools", "--json",
         "--workspace", str(workspace), "--mcp-config", str(config)],
        capture_output=True, text=True, timeout=CEILING,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert rows["read_file"]["source"] == "built-in"
    clock = rows["mcp__time__get_current_time"]
    assert clock["source"] == "MCP server time"
    assert clock["read_only"] is False and clock["read_only_hint"] is True
    assert not any(name.startswith("mcp__broken") for name in rows)
    assert "MCP server 'broken'" in proc.stderr and "exited with status 3" in proc.stderr
    assert "fatal: no such database: prod" in proc.stderr


def test_subagents_tools_shows_a_hostile_description_as_inert_text(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    workspace = give_to_tool_user(tmp_path / "ws")
    config = write_config(
        tmp_path / "servers.json", {"liar": script_server("liar", "lying-descriptions")}
    )
    proc = subprocess.run(
        [sys.executable, "-m", "durable_subagents", "tools",
         "--workspace", str(workspace), "--mcp-config", str(config)],
        capture_output=True, text=True, timeout=CEILING, env={**os.environ, "COLUMNS": "300"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "mcp__liar__echo" in proc.stdout
    # The escapes and the override are shown as marked escapes, not sent to the terminal;
    # the markup is printed as the text it is.
    for raw in ("\x1b", "\u202e", "\x07"):
        assert raw not in proc.stdout + proc.stderr
    assert "\\x1b[2J" in proc.stdout and "Safe read-only tool." in proc.stdout


async def test_a_call_a_sigkill_cut_off_is_reported_not_run_again(
    client: SubagentClient, settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    markers = tmp_path / "marks"
    markers.mkdir()
    markers.chmod(0o777)
    config = write_config(
        tmp_path / "servers.json", {"slow": script_server("slow", "good", markers)}
    )
    client.agents["runner"] = AgentSpec(
        name="runner", tools=["mcp__slow"], permission_mode="dont_ask"
    )
    model = script({"tool_calls": [call("mcp__slow__hang")]}, {"text": "carried on"})
    env = {"SUBAGENTS_MCP_CONFIG": str(config)}
    workers = [worker_process(settings, workspace, tmp_path / "worker.log", env)]
    try:
        await workers[0].start()
        task_id = await client.spawn_task("runner", "hang", model=model)
        [mark] = await eventually(lambda: list(markers.glob("hang-*")), "the call to run")
        pid = int(mark.read_text())
        workers[0].kill()
        await eventually(lambda: not alive(pid), "the server to die with its worker")
        workers.append(worker_process(settings, workspace, tmp_path / "worker.log", env))
        await workers[1].start()
        done = await client.check_task(task_id, wait=True, timeout=CEILING)
    finally:
        for w in workers:
            w.close()
    assert done.status == TaskStatus.COMPLETED, done.error
    assert done.result == "carried on"
    [result] = [m for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert "mcp__slow__hang was interrupted" in result.content, result.content
    assert [m.name for m in markers.glob("hang-*")] == [mark.name]  # never sent again


# ---------------------------------------------------------------- rules and plan mode


@pytest.mark.parametrize("action", ["deny", "ask"])
async def test_a_rule_on_a_whole_server_stops_or_pauses_each_of_its_calls(
    action: str,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    tmp_path: Path,
) -> None:
    markers = tmp_path / "marks"
    markers.mkdir()
    markers.chmod(0o777)
    config = write_config(
        tmp_path / "servers.json", {"slow": script_server("slow", "good", markers)}
    )
    client.agents["ruled"] = AgentSpec(
        name="ruled",
        tools=["mcp__slow"],
        permission_mode="dont_ask",  # the server's calls run unless the rule says otherwise
        permissions=[PermissionRule(tool="mcp__slow", action=action)],  # type: ignore[arg-type]
    )
    model = script({"tool_calls": [call("mcp__slow__hang")]}, {"text": "gave up"})
    worker_settings = settings.model_copy(update={"mcp_config": str(config)})
    async with create_worker(temporal_client, worker_settings):
        task_id = await client.spawn_task("ruled", "hang", model=model)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
        if action == "ask":
            assert info.status == TaskStatus.PAUSED, info.error
            [pending] = info.pending_approvals
            assert pending.tool_name == "mcp__slow__hang"
            await client.reject(task_id, reason="not now")
            info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    [result] = [m.content for m in await client.get_transcript(task_id) if m.role == "tool"]
    if action == "deny":
        assert result == (
            "mcp__slow__hang was denied by this agent's permission rules; do not retry it"
        )
    else:
        assert "not now" in result, result
    # the task has ended: the call never reached the server
    assert list(markers.glob("hang-*")) == []


PLAN_FILE = """---
name: planner
description: Plans with the clock.
tools: Read, mcp__time
permissionMode: plan
---
You plan.
"""


def agents_table(project: Path) -> dict[str, str]:
    """``subagents agents``' tools column, by agent name."""
    proc = subprocess.run(
        [sys.executable, "-m", "durable_subagents", "agents", "--agents-dir", str(project)],
        capture_output=True, text=True, timeout=CEILING, env={**os.environ, "COLUMNS": "300"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return {line.split()[0]: line.split()[1] for line in proc.stdout.splitlines()[1:]}


async def test_a_plan_agent_is_offered_the_mcp_tools_it_lists_that_an_allow_rule_names(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = write_config(
        tmp_path / "servers.json", {"time": python_server("time", "-m", "mcp_server_time")}
    )
    now, convert = "mcp__time__get_current_time", "mcp__time__convert_time"
    allow = PermissionRule(tool="mcp__time__*", action="allow")
    cases: dict[str, tuple[AgentSpec, set[str]]] = {
        "one": (
            AgentSpec(
                name="one",
                tools=["read_file", "mcp__time"],
                permissions=[PermissionRule(tool=now, action="allow")],
            ),
            {"read_file", now},
        ),
        "server": (
            AgentSpec(
                name="server",
                tools=["mcp__time"],
                permissions=[PermissionRule(tool="mcp__time", action="allow")],
            ),
            {now, convert},
        ),
        "unlisted": (
            AgentSpec(name="unlisted", tools=["read_file"], permissions=[allow]),
            {"read_file"},
        ),
        "every": (
            AgentSpec(name="every", tools=None, permissions=[allow]),
            {"read_file", "list_files", "grep"},
        ),
        "asks": (
            AgentSpec(
                name="asks",
                tools=["read_file", "mcp__time"],
                permissions=[PermissionRule(tool="mcp__time__*", action="ask")],
            ),
            {"read_file"},
        ),
    }
    project = tmp_path / "project"
    (project / ".claude" / "agents").mkdir(parents=True)
    (project / ".claude" / "agents" / "planner.md").write_text(PLAN_FILE)
    from_file = await SubagentClient.connect(settings=settings, agents_dir=project)
    cases["planner"] = (from_file.agents["planner"], {"read_file"})
    seen: dict[str, set[str]] = {}
    async with model_api(monkeypatch, "openai") as srv:
        worker_settings = settings.model_copy(update={"mcp_config": str(config)})
        async with create_worker(temporal_client, worker_settings):
            for name, (spec, _) in cases.items():
                client.agents[name] = spec.model_copy(update={"permission_mode": "plan"})
                srv.add_reply(text="planned")
                task_id = await client.spawn_task(name, "plan", model=MODELS["openai"])
                info = await client.check_task(task_id, wait=True, timeout=CEILING)
                assert info.status == TaskStatus.COMPLETED, (name, info.error)
                seen[name] = offered(srv.requests[-1])
    assert seen == {name: expected for name, (_, expected) in cases.items()}
    # `subagents agents` shows what the worker offered the agent file's plan agent
    assert agents_table(project)["planner"] == "read_file"


def test_subagents_agents_shows_the_mcp_tools_of_agent_files(tmp_path: Path) -> None:
    agents = tmp_path / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "gitter.md").write_text(GITTER)
    (agents / "clock.md").write_text(
        "---\nname: clock\ndescription: d\ntools: Read, mcp__time, mcp__git\n"
        "disallowedTools: mcp__git\n---\nTell the time.\n"
    )
    (agents / "planner.md").write_text(PLAN_FILE)
    (agents / "reader.md").write_text(
        "---\nname: reader\ndescription: d\npermissionMode: plan\n---\nRead.\n"
    )
    table = agents_table(tmp_path)
    assert table["gitter"] == "read_file,mcp__git__git_add,mcp__git__git_commit"
    assert table["clock"] == "read_file,mcp__time"
    # a plan agent's file names no rule allowing an MCP tool: a worker offers it none
    assert table["planner"] == "read_file"
    # every tool, in plan: the read-only ones (a worker offers it no MCP tool)
    assert table["reader"] == "read_file,list_files,grep"
    assert table["explore"] == "read_file,list_files,grep"
    # --json says the same in offered_tools beside the spec as written
    proc = subprocess.run(
        [sys.executable, "-m", "durable_subagents", "agents", "--json",
         "--agents-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=CEILING,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = {row["name"]: row for row in json.loads(proc.stdout)}
    assert rows["clock"]["offered_tools"] == ["read_file", "mcp__time"]
    assert rows["clock"]["tools"] == ["read_file", "mcp__time", "mcp__git"]
    assert rows["planner"]["offered_tools"] == ["read_file"]
    assert {n: ",".join(r["offered_tools"] or ["all"]) for n, r in rows.items()} == table


async def test_an_agent_listing_a_tool_no_server_offers_fails_saying_what_to_register(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    tmp_path: Path,
) -> None:
    config = write_config(
        tmp_path / "servers.json", {"time": python_server("time", "-m", "mcp_server_time")}
    )
    client.agents["lost"] = AgentSpec(
        name="lost", tools=["read_file", "mcp__nope__x"], permission_mode="dont_ask"
    )
    worker_settings = settings.model_copy(update={"mcp_config": str(config)})
    async with create_worker(temporal_client, worker_settings):
        task_id = await client.spawn_task("lost", "go", model=script({"text": "never"}))
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.FAILED
    assert info.error is not None
    assert "agent 'lost' allows tools this worker does not have: mcp__nope__x;" in info.error
    assert "mcp__time__get_current_time" in info.error  # what this worker has
    assert "MCP servers, .mcp.json or --mcp-config" in info.error


# ---------------------------------------------------------------- agent files, transports, secrets


NOTETAKER = """---
name: notetaker
description: Takes notes and reads the repository's state.
tools: Read, mcp__git__git_status, mcp__notes
permissionMode: bypassPermissions
---
You take notes.
"""


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_an_agent_file_uses_stdio_and_token_servers_through_each_wire_and_no_secret_leaks(
    kind: str,
    settings: Settings,
    dev_server: DevServer,
    temporal_client: Client,
    workspace: Path,
    tmp_path: Path,
    http_server: HttpServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The servers of the workspace's .mcp.json (a bearer token from ``${NOTES_TOKEN}``,
    a stdio server with a secret in its ``env``) serve a Claude Code agent file; neither
    secret reaches the task's history, memo, search attributes, blob store, spans or the
    worker's log."""
    caplog.set_level(logging.DEBUG)
    repository(workspace)
    secret = f"env-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("NOTES_TOKEN", http_server.token)
    write_config(
        workspace / ".mcp.json",
        {
            "git": python_server(
                "git", "-m", "mcp_server_git", env={**AUTHOR, "GIT_SECRET": secret}
            ),
            "notes": {
                "type": "http",
                "url": http_server.url,
                "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"},
            },
        },
    )
    give_to_tool_user(workspace)
    project = tmp_path / "project"
    (project / ".claude" / "agents").mkdir(parents=True)
    (project / ".claude" / "agents" / "notetaker.md").write_text(NOTETAKER)
    client = await SubagentClient.connect(settings=settings, agents_dir=project)
    with in_memory_spans(monkeypatch) as otel:
        traced = await connect_client(dev_server.address, dev_server.namespace, tracing=True)
        async with model_api(monkeypatch, kind) as srv:
            srv.add_reply(
                tool_calls=[
                    call("mcp__git__git_status", repo_path="."),
                    {"name": "mcp__notes__hello", "arguments": {"name": "Ada"}},
                ]
            )
            srv.add_reply(text="noted")
            async with create_worker(traced, settings, tracer_provider=otel.provider):
                task_id = await client.spawn_task("notetaker", "take notes", model=MODELS[kind])
                info = await client.check_task(task_id, wait=True, timeout=CEILING)
        spans = json.dumps([[s.name for s in otel.spans()], all_attribute_values(otel.spans())])
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "noted"
    first, second = srv.requests
    assert offered(first) == {
        "read_file",
        "mcp__git__git_status",
        "mcp__notes__add",
        "mcp__notes__hello",
    }
    status, hello = tool_results(second)
    assert "README.md" in status, status
    assert hello == "hello, Ada"
    # where a secret could go, each seen to hold the task's traces first
    handle = temporal_client.get_workflow_handle(task_id)
    described = await handle.describe()
    places = {
        "history": "\n".join([str(e) async for e in handle.fetch_history_events()]),
        "memo": json.dumps(await described.memo(), default=str),
        "search attributes": str(
            described.raw_description.workflow_execution_info.search_attributes
        ),
        "description": described.raw_description.SerializeToString().decode("latin-1"),
        "spans": spans,
        "log": caplog.text + "".join(str(r.__dict__) for r in caplog.records),
        "blob store": "".join(
            f.read_bytes().decode("latin-1")
            for f in settings.resolved_blob_dir.rglob("*")
            if f.is_file()
        ),
    }
    assert "mcp__notes__hello" in places["history"]
    assert "hello, Ada" in places["blob store"], "the transcript is in the blob store"
    assert "subagent.tool" in spans and "mcp__notes__hello" in spans
    assert "notetaker" in places["memo"] and "notetaker" in places["search attributes"]
    assert caplog.records, "the worker logged"
    for place, text in places.items():
        for leak in (http_server.token, secret, "GIT_SECRET"):
            assert leak not in text, f"{leak} in the {place}"


async def test_a_tool_over_sse_with_a_bearer_token(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = HttpServer(tmp_path / "sse.err", transport="sse")
    await server.start()
    try:
        monkeypatch.setenv("SSE_TOKEN", server.token)
        config = write_config(
            tmp_path / "servers.json",
            {
                "notes": {
                    "type": "sse",
                    "url": server.url,
                    "headers": {"Authorization": "Bearer ${SSE_TOKEN}"},
                }
            },
        )
        client.agents["sse"] = AgentSpec(
            name="sse", tools=["mcp__notes"], permission_mode="dont_ask"
        )
        model = script({"tool_calls": [call("mcp__notes__add", a=20, b=22)]}, {"text": "sum"})
        worker_settings = settings.model_copy(update={"mcp_config": str(config)})
        async with create_worker(temporal_client, worker_settings):
            task_id = await client.spawn_task("sse", "add", model=model)
            info = await client.check_task(task_id, wait=True, timeout=CEILING)
    finally:
        server.stop()
    assert info.status == TaskStatus.COMPLETED, info.error
    [result] = [m.content for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert result == "42"
