"""OpenAI-compatible servers' quirks, through the real ``openai`` SDK.

``FakeOpenAIServer(quirks=...)`` plays each profile's server: usage never or always
sent, tool-call ids missing or reused, arguments whole in one chunk, thinking as
``reasoning_content`` (or ``reasoning``), a 400 for ``max_completion_tokens`` or
``parallel_tool_calls``. A tool loop works against each, with the profile the worker
would choose for it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.providers import OpenAIProvider, clear_provider_cache, close_providers
from durable_subagents.providers._profiles import PROFILES
from durable_subagents.testing import FakeOpenAIServer
from durable_subagents.testing.fake_openai import SERVER_QUIRKS
from durable_subagents.types import Message, ModelRequest, ToolSpec
from durable_subagents.worker import create_worker

GREP = ToolSpec(
    name="grep",
    description="Search files.",
    parameters={"type": "object", "properties": {"pattern": {"type": "string"}}},
)
CALLS = [
    {"name": "grep", "arguments": {"pattern": "def "}},
    {"name": "grep", "arguments": {"pattern": "class "}},
]


@pytest.mark.parametrize("profile", sorted(SERVER_QUIRKS))
async def test_a_tool_loop_works_against_each_profiles_server(profile: str) -> None:
    """Two calls in one turn get ids of their own, their results go back to them, the
    thinking streams apart from the answer, and usage the server never sent is an
    estimate, marked so."""
    quirks = SERVER_QUIRKS[profile]
    async with FakeOpenAIServer(quirks=quirks) as srv:
        srv.add_reply(text="Searching.", tool_calls=CALLS, usage=None)
        srv.add_reply(text="Found f and C.")
        provider = OpenAIProvider(api_key="sk-x", base_url=srv.base_url, profile=PROFILES[profile])
        messages = [Message(role="user", content="find functions and classes")]
        thoughts: list[str] = []
        texts: list[str] = []
        try:
            request = ModelRequest(model="m", messages=messages, tools=[GREP])
            first = await provider.complete(request, texts.append, thoughts.append)
            ids = [call.id for call in first.tool_calls]
            assert len(set(ids)) == 2 and all(ids), ids
            assert [c.arguments for c in first.tool_calls] == [c["arguments"] for c in CALLS]
            messages += [
                Message(role="assistant", content=first.text, tool_calls=first.tool_calls),
                *(
                    Message(role="tool", content=f"hit {n}", tool_call_id=i, tool_name="grep")
                    for n, i in enumerate(ids)
                ),
            ]
            second = await provider.complete(
                ModelRequest(model="m", messages=messages, tools=[GREP])
            )
        finally:
            await provider.aclose()
    assert srv.outcomes == ["200", "200"]  # no parameter refused
    sent = srv.requests[1]["messages"]
    assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == ids
    assert second.text == "Found f and C."
    assert first.text == "Searching." == "".join(texts)
    assert "".join(thoughts).strip() == quirks.thinking
    for response in (first, second):
        assert response.usage.estimated == (quirks.usage == "never")
        assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    if quirks.usage != "never":
        assert first.usage.input_tokens == srv.usages[0]["prompt_tokens"]


async def test_the_openai_profile_meets_a_refusing_server_with_the_servers_400() -> None:
    """Without its profile, a server that refuses max_completion_tokens answers 400:
    the profile is what makes the difference."""
    async with FakeOpenAIServer(quirks="vllm") as srv:
        srv.add_reply(text="never sent")
        provider = OpenAIProvider(api_key="sk-x", base_url=srv.base_url, profile=PROFILES["openai"])
        try:
            with pytest.raises(Exception, match="max_completion_tokens"):
                await provider.complete(
                    ModelRequest(model="m", messages=[Message(role="user", content="hi")])
                )
        finally:
            await provider.aclose()
    assert srv.outcomes == ["400"]


async def test_a_task_against_a_server_without_usage_marks_its_usage_estimated(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    workspace: Path,
) -> None:
    """A task on the dev server against a llama.cpp-like server (no usage, one id for
    every call, thinking beside the answer): it completes, its usage is an estimate,
    marked so, and the thinking shows to ``watch`` and never in the answer."""
    (workspace / "a.txt").write_text("alpha\n")
    async with FakeOpenAIServer(quirks="llamacpp") as srv:
        srv.add_reply(
            tool_calls=[
                {"name": "read_file", "arguments": {"path": "a.txt"}},
                {"name": "list_files", "arguments": {}},
            ]
        )
        srv.add_reply(text="a.txt holds alpha.")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("SUBAGENTS_OPENAI_PROFILE", "llamacpp")
        clear_provider_cache()
        try:
            async with create_worker(temporal_client, settings):
                task_id = await client.spawn_task(
                    "explore", "What does a.txt hold?", model="openai:qwen3"
                )
                info = await client.check_task(task_id, wait=True, timeout=120)
                events = [e async for e in client.watch(task_id)]
        finally:
            await close_providers()
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "a.txt holds alpha."
    assert info.usage.estimated and info.usage.input_tokens > 0
    assert "max_completion_tokens" not in srv.requests[0]
    thinking = "".join(e.text or "" for e in events if e.kind == "thinking")
    assert SERVER_QUIRKS["llamacpp"].thinking.split()[0] in thinking
    assert "thinks" not in "".join(e.text or "" for e in events if e.kind == "text")
    tool_ids = [m["tool_call_id"] for m in srv.requests[1]["messages"] if m["role"] == "tool"]
    assert len(set(tool_ids)) == 2
