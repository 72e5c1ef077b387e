"""`subagents mcp`, driven by the real MCP stdio client as a subprocess."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent
from temporalio.client import Client

from durable_subagents import SubagentClient
from durable_subagents.agents import load_agents
from durable_subagents.client import SubagentTools
from durable_subagents.config import Settings

from .conftest import script
from .test_cli import _env
from .test_orchestrator_tools import NAMES

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


@asynccontextmanager
async def mcp_session(
    tmp_path: Path, env: dict[str, str], *args: str
) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "durable_subagents", "mcp", *args],
        env=env,
        cwd=tmp_path,
    )
    with (tmp_path / "mcp.err").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


async def call(session: ClientSession, name: str, **arguments: Any) -> tuple[bool, Any]:
    """One tool call: (isError, the JSON the tool answered)."""
    result = await session.call_tool(name, arguments)
    assert isinstance(result, CallToolResult)
    [content] = result.content
    assert isinstance(content, TextContent)
    return result.is_error, json.loads(content.text)


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
