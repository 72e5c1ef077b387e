"""`subagents mcp`, driven by the real MCP stdio client as a subprocess."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import Client

from durable_subagents import SubagentClient
from durable_subagents.agents import BUILTIN_AGENTS, load_agents
from durable_subagents.client import SubagentTools
from durable_subagents.config import Settings

from ..helpers.agent_files import PLANTED_EXPLORE, write
from ..helpers.cli import _env
from ..helpers.mcp import NAMES, call, mcp_session
from ..helpers.tasks import script

REVIEWER = """\
---
name: reviewer
description: Reviews a change for bugs.
tools: Read, Grep
---

You review code.
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with one agent file, so the tool list is not just the built-ins."""
    root = tmp_path / "project"
    (root / ".claude" / "agents").mkdir(parents=True)
    (root / ".claude" / "agents" / "reviewer.md").write_text(REVIEWER)
    return root


async def test_tools_spawn_check_and_errors(
    tmp_path: Path,
    project: Path,
    settings: Settings,
    temporal_client: Client,
    worker: None,
) -> None:
    env = _env(
        tmp_path,
        TEMPORAL_ADDRESS=settings.address,
        SUBAGENTS_TASK_QUEUE=settings.task_queue,
        SUBAGENTS_BLOB_DIR=str(settings.resolved_blob_dir),
    )
    expected = SubagentTools(SubagentClient(temporal_client, agents=load_agents(project))).schemas()
    args = ["--agents-dir", str(project), "--parent-id", "mcp-test"]
    async with asyncio.timeout(30), mcp_session(tmp_path, env, *args) as session:
        listed = (await session.list_tools()).tools
        assert [t.name for t in listed] == NAMES
        assert [
            {"name": t.name, "description": t.description, "parameters": t.input_schema}
            for t in listed
        ] == expected
        assert "reviewer" in listed[0].input_schema["properties"]["agent"]["enum"]

        model = script({"text": "the answer is 42"})
        is_error, spawned = await call(
            session, "spawn_subagent", agent="explore", prompt="find it", model=model
        )
        assert not is_error, spawned
        task_id = spawned["task_id"]

        is_error, checked = await call(session, "check_subagent", task_id=task_id, timeout=20)
        assert not is_error, checked
        assert checked["status"] == "completed"
        assert checked["result"] == "the answer is 42"
        assert checked["next"].startswith("completed:")

        is_error, unknown = await call(session, "spawn_subagent", agent="explor", prompt="x")
        assert is_error
        assert unknown["error"].startswith("unknown agent 'explor'; known: explore")

        is_error, bad = await call(session, "check_subagent", task_id=task_id, wait="soon")
        assert is_error and bad["error"].startswith("invalid arguments for check_subagent")

        for _ in range(50):  # visibility is eventually consistent
            is_error, mine = await call(session, "list_subagents")
            if mine["tasks"]:
                break
            await asyncio.sleep(0.2)
        assert not is_error
        assert [t["id"] for t in mine["tasks"]] == [task_id]

    info = await SubagentClient(temporal_client).check_task(task_id)
    assert info.parent_id == "mcp-test"
    log = (tmp_path / "mcp.err").read_text()
    assert "parent id mcp-test" in log and "Traceback" not in log


async def test_started_below_the_root_offers_the_roots_agents_only(tmp_path: Path) -> None:
    """Claude Code may start the server in ``src/``, where a model planted an ``explore``."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    write(project / ".claude/agents/reviewer.md", REVIEWER)
    write(project / "src/.claude/agents/explore.md", PLANTED_EXPLORE)
    env = _env(tmp_path)
    args = ("--address", "127.0.0.1:1")
    async with asyncio.timeout(20), mcp_session(tmp_path, env, *args, cwd=project / "src") as s:
        [spawn] = [t for t in (await s.list_tools()).tools if t.name == "spawn_subagent"]
    assert spawn.description is not None
    assert spawn.input_schema["properties"]["agent"]["enum"] == [*BUILTIN_AGENTS, "reviewer"]
    assert f"- explore: {BUILTIN_AGENTS['explore'].description}" in spawn.description
    assert "Explores the code." not in spawn.description
    assert "replaces the built-in" not in (tmp_path / "mcp.err").read_text()


async def test_unreachable_temporal_still_lists_tools(tmp_path: Path) -> None:
    env = _env(tmp_path)
    async with asyncio.timeout(20), mcp_session(tmp_path, env, "--address", "127.0.0.1:1") as s:
        assert [t.name for t in (await s.list_tools()).tools] == NAMES
        for _ in range(2):  # the connection is retried on every call, and fails clearly
            is_error, answer = await call(s, "list_subagents")
            assert is_error
            assert set(answer) == {"error"}
            assert "cannot reach Temporal at 127.0.0.1:1" in answer["error"]
            assert "subagents dev" in answer["error"]
    log = (tmp_path / "mcp.err").read_text()
    assert "Traceback" not in log
    assert "parent id mcp-" in log  # the default: a fresh id per server


async def test_approvals_by_a_person_keep_approve_from_the_model(tmp_path: Path) -> None:
    env = _env(tmp_path)
    args = ("--address", "127.0.0.1:1", "--approvals", "person")
    async with asyncio.timeout(20), mcp_session(tmp_path, env, *args) as s:
        assert [t.name for t in (await s.list_tools()).tools] == [
            n for n in NAMES if n != "approve_tool_calls"
        ]
        is_error, answer = await call(s, "approve_tool_calls", task_id="any")
        assert is_error and "a person approves" in answer["error"]
    assert "approvals by the person" in (tmp_path / "mcp.err").read_text()


@pytest.mark.parametrize(
    ("address", "said"),
    [("localhost", "'localhost' has no port"), ("http://localhost:7233", "is a URL")],
)
async def test_a_malformed_address_is_one_line_and_the_tools_are_still_listed(
    tmp_path: Path, address: str, said: str
) -> None:
    env = _env(tmp_path, TEMPORAL_ADDRESS=address)
    async with asyncio.timeout(20), mcp_session(tmp_path, env) as s:
        assert [t.name for t in (await s.list_tools()).tools] == NAMES
        is_error, answer = await call(s, "list_subagents")
        assert is_error and set(answer) == {"error"}
        assert said in answer["error"] and "TEMPORAL_ADDRESS" in answer["error"]
    log = (tmp_path / "mcp.err").read_text()
    assert "Traceback" not in log and "│" not in log
    [line] = [x for x in log.splitlines() if x.startswith("error: ")]
    assert said in line
