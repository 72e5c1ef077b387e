"""Model settings: reasoning effort, temperature and output tokens, from agent to wire.

Real worker and dev server; the real openai/anthropic SDKs against the fake servers,
which record what they received and report usage as the APIs do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI, BadRequestError
from temporalio.client import Client

from durable_subagents import AgentSpec, InvalidRequest, SubagentClient, TaskStatus
from durable_subagents.client import SubagentTools
from durable_subagents.config import Settings
from durable_subagents.providers import clear_provider_cache, close_providers
from durable_subagents.providers._thinking import THINKING_BUDGETS
from durable_subagents.testing import FakeAnthropicServer, FakeModelServer, FakeOpenAIServer
from durable_subagents.testing.fake_openai import REASONING_TOKENS, FakeReply
from durable_subagents.worker import create_worker

from ..helpers.providers import THINKER

PLAIN = AgentSpec(name="plain", description="No settings.", tools=["read_file"])


@contextlib.asynccontextmanager
async def model_api(monkeypatch: pytest.MonkeyPatch, kind: str) -> AsyncIterator[FakeModelServer]:
    """A fake ``kind`` API this process's workers call."""
    server: FakeModelServer = FakeOpenAIServer() if kind == "openai" else FakeAnthropicServer()
    async with server as srv:
        monkeypatch.setenv(f"{kind.upper()}_API_KEY", "k")
        monkeypatch.setenv(f"{kind.upper()}_BASE_URL", srv.base_url)
        clear_provider_cache()
        try:
            yield srv
        finally:
            await close_providers()


@pytest.fixture
def agents(client: SubagentClient) -> SubagentClient:
    client.agents.update(thinker=THINKER, plain=PLAIN)
    return client


async def test_reasoning_effort_reaches_the_openai_wire_and_reasoning_tokens_are_counted(
    agents: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    workspace: Path,
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    async with model_api(monkeypatch, "openai") as srv:
        srv.add_reply(
            tool_calls=[{"name": "read_file", "arguments": {"path": "a.txt"}}], usage=(10, 5)
        )
        srv.add_reply(text="It says alpha.", usage=(30, 4), reasoning_tokens=700)
        async with create_worker(temporal_client, settings):
            task_id = await agents.spawn_task(
                "thinker", "what is in a.txt?", model="openai:o4-mini"
            )
            info = await agents.check_task(task_id, wait=True, timeout=60)
    assert info.status == TaskStatus.COMPLETED, info.error
    for body in srv.requests:
        assert body["reasoning_effort"] == "medium"
        assert body["temperature"] == 0.3
        assert (
            body["max_tokens"] == 2000
        )  # a custom base URL: max_tokens, not max_completion_tokens
    medium = REASONING_TOKENS["medium"]
    assert info.usage.reasoning_tokens == medium + 700
    assert info.usage.output_tokens == (5 + medium) + (4 + 700)  # reasoning within output
    assert info.usage.input_tokens == 10 + 30


async def test_no_effort_and_no_settings_send_none_and_report_no_reasoning(
    agents: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with model_api(monkeypatch, "openai") as srv:
        srv.add_reply(text="done", usage=(10, 5))
        async with create_worker(temporal_client, settings):
            task_id = await agents.spawn_task("plain", "go", model="openai:gpt-test")
            info = await agents.check_task(task_id, wait=True, timeout=60)
    [body] = srv.requests
    assert "reasoning_effort" not in body and "temperature" not in body
    assert body["max_tokens"] == 8192
    assert info.usage.reasoning_tokens == 0 and info.usage.output_tokens == 5


async def test_the_anthropic_wire_gets_thinking_for_the_effort_and_else_the_temperature(
    agents: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agents.agents["hot"] = PLAIN.model_copy(update={"name": "hot", "temperature": 1.5})
    async with model_api(monkeypatch, "anthropic") as srv:
        srv.add_reply(text="done")
        srv.add_reply(text="done")
        async with create_worker(temporal_client, settings):
            for agent in ("thinker", "hot"):
                task_id = await agents.spawn_task(agent, "go", model="anthropic:claude-test")
                info = await agents.check_task(task_id, wait=True, timeout=60)
                assert info.status == TaskStatus.COMPLETED, info.error
    thinker, hot = srv.requests
    # a model name without a version thinks adaptively; the effort's budget is room on
    # top of the answer's tokens; the API takes no temperature with thinking
    assert thinker["thinking"] == {"type": "adaptive"}
    assert thinker["output_config"] == {"effort": "medium"}
    assert thinker["max_tokens"] == 2000 + THINKING_BUDGETS["medium"]
    assert "temperature" not in thinker
    assert hot["temperature"] == 1.0  # the API's most; OpenAI's go to 2
    assert hot["max_tokens"] == 8192 and "thinking" not in hot


async def test_a_spawn_may_lower_the_effort_never_raise_it(
    agents: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(InvalidRequest, match="'high' is more than agent 'thinker''s 'medium'"):
        await agents.spawn_task("thinker", "go", reasoning_effort="high")
    with pytest.raises(InvalidRequest, match="unknown reasoning_effort 'extreme'; use one of"):
        await agents.spawn_task("thinker", "go", reasoning_effort="extreme")
    tools = SubagentTools(agents, parent_id="orch-effort")
    refused = json.loads(
        await tools.call(
            "spawn_subagent", {"agent": "thinker", "prompt": "go", "reasoning_effort": "high"}
        )
    )
    assert set(refused) == {"error"} and "can only lower it" in refused["error"]
    async with model_api(monkeypatch, "openai") as srv:
        srv.add_reply(text="lowered")
        srv.add_reply(text="chosen")
        async with create_worker(temporal_client, settings):
            lowered = await agents.spawn_task(
                "thinker", "go", model="openai:gpt-test", reasoning_effort="low"
            )
            await agents.check_task(lowered, wait=True, timeout=60)
            # an agent without an effort leaves it to the spawn
            chosen = await agents.spawn_task(
                "plain", "go", model="openai:gpt-test", reasoning_effort="high"
            )
            info = await agents.check_task(chosen, wait=True, timeout=60)
    assert [b["reasoning_effort"] for b in srv.requests] == ["low", "high"]
    assert info.usage.reasoning_tokens == REASONING_TOKENS["high"]


async def test_the_fake_server_refuses_an_effort_the_api_does_not_know() -> None:
    async with FakeOpenAIServer() as srv:
        client = AsyncOpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
        with pytest.raises(BadRequestError) as caught:
            await client.chat.completions.create(
                model="o4-mini",
                messages=[{"role": "user", "content": "hi"}],
                reasoning_effort="extreme",  # type: ignore[arg-type]
            )
        completion = await client.chat.completions.create(
            model="o4-mini", messages=[{"role": "user", "content": "hi"}], reasoning_effort="low"
        )
        await client.close()
    assert "Invalid value: 'extreme'. Supported values are:" in str(caught.value)
    assert srv.outcomes == ["400", "200"]
    usage = completion.usage
    assert usage is not None and usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == REASONING_TOKENS["low"]
    # completion_tokens holds the reasoning tokens, on top of what the reply's text counts
    reply_tokens = srv.output_tokens(FakeReply(text=srv.default_text))
    assert usage.completion_tokens == reply_tokens + REASONING_TOKENS["low"]


async def test_an_agent_files_effort_reaches_the_wire_through_the_cli(
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    agent_file = project / ".claude/agents/thinker.md"
    agent_file.parent.mkdir(parents=True)
    agent_file.write_text(
        "---\nname: thinker\ndescription: Thinks.\ntools: Read\nreasoning_effort: medium\n---\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "TEMPORAL_ADDRESS": settings.address,
        "SUBAGENTS_TASK_QUEUE": settings.task_queue,
        "SUBAGENTS_DATA_DIR": str(tmp_path / "cli-data"),
        "SUBAGENTS_BLOB_DIR": str(settings.resolved_blob_dir),
    }
    base = ["spawn", "thinker", "go", "--agents-dir", str(project), "--model", "openai:gpt-test"]
    code, out, err = await cli(*base, "--reasoning-effort", "high", env=env)
    assert code == 1 and out == "" and "Traceback" not in err
    assert "can only lower it" in " ".join(err.split())
    async with model_api(monkeypatch, "openai") as srv:
        srv.add_reply(text="thought")
        async with create_worker(temporal_client, settings):
            code, out, err = await cli(
                *base, "--reasoning-effort", "low", "--wait", "--json", env=env
            )
    assert code == 0, err
    info: dict[str, Any] = json.loads(out)
    assert info["status"] == "completed"
    assert info["usage"]["reasoning_tokens"] == REASONING_TOKENS["low"]
    assert srv.requests[0]["reasoning_effort"] == "low"


async def cli(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "durable_subagents", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
