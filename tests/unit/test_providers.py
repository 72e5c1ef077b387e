"""Model providers without a server: name resolution, retry headers and the scripted model."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from durable_subagents.errors import InvalidRequest
from durable_subagents.providers import (
    SCRIPTS,
    ScriptedProvider,
    clear_provider_cache,
    parse_model,
    resolve_provider,
)
from durable_subagents.providers._errors import retry_after
from durable_subagents.testing import FakeOpenAIServer
from durable_subagents.types import Message, ModelRequest


def user(text: str) -> Message:
    return Message(role="user", content=text)


@pytest.fixture(params=["aiohttp", "httpx"])
def clean_env(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """No provider variables; the SDKs' HTTP transport is each of the two choices."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SUBAGENTS_MODEL_HTTP", request.param)
    clear_provider_cache()


# ------------------------------------------------------------------- resolve_provider


def test_resolve_forms(clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_model("openai:gpt-4.1-mini") == ("openai", "openai:gpt-4.1-mini", "gpt-4.1-mini")
    assert parse_model("default") == ("scripted", "scripted", "")
    assert parse_model("default", default_model="anthropic:claude-haiku-4-5") == (
        "anthropic",
        "anthropic:claude-haiku-4-5",
        "claude-haiku-4-5",
    )
    provider, full, name = resolve_provider("scripted:demo-plan")
    assert isinstance(provider, ScriptedProvider)
    assert (full, name) == ("scripted:demo-plan", "demo-plan")
    assert resolve_provider("scripted")[0] is provider


@pytest.mark.parametrize(
    "model", ["gpt-4.1-mini", "gemini:pro", "openai:", "scripted:no-such-script", "scripted:[{"]
)
def test_resolve_rejects_bad_names(clean_env: None, model: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        resolve_provider(model)
    message = str(info.value)
    assert "openai:<model>" in message or "script" in message or "names no model" in message


def test_resolve_unknown_prefix_lists_valid_forms(clean_env: None) -> None:
    forms = (
        r"openai:<model>, openai-responses:<model>, anthropic:<model>, bedrock:<model id>, "
        r"vertex:<model>, scripted"
    )
    with pytest.raises(InvalidRequest, match=forms):
        resolve_provider("gpt-4")


def test_retry_after_header_forms() -> None:
    assert retry_after({"retry-after": "2.5"}) == timedelta(seconds=2.5)
    assert retry_after({"retry-after-ms": "250", "retry-after": "9"}) == timedelta(seconds=0.25)
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None
    assert retry_after({"retry-after": "soon"}) is None
    assert retry_after({}) is None


def test_bad_default_model_names_its_origin(clean_env: None) -> None:
    with pytest.raises(InvalidRequest, match="SUBAGENTS_MODEL"):
        resolve_provider("default", default_model="gpt-4.1-mini")


def test_missing_keys_are_non_retryable(clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    for model, env in (
        ("openai:gpt", "OPENAI_API_KEY"),
        ("openai-responses:gpt-5", "OPENAI_API_KEY"),
        ("anthropic:claude", "ANTHROPIC_API_KEY"),
    ):
        with pytest.raises(ApplicationError) as info:
            resolve_provider(model)
        assert info.value.non_retryable is True
        assert info.value.type == "ModelRequestError"
        assert env in info.value.message
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    assert resolve_provider("openai:llama3")[0].name == "openai"
    responses = resolve_provider("openai-responses:gpt-5")[0]
    assert responses.name == "openai-responses"
    assert resolve_provider("openai-responses:gpt-5-mini")[0] is responses
    assert resolve_provider("openai:gpt-5")[0] is not responses  # Chat Completions stays


def test_providers_are_cached_per_key(clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-one-0000000000")
    first = resolve_provider("openai:a")[0]
    assert resolve_provider("openai:b")[0] is first
    monkeypatch.setenv("OPENAI_API_KEY", "sk-two-0000000000")
    assert resolve_provider("openai:a")[0] is not first


# --------------------------------------------------------------------------- scripted


async def play(
    model: str, prompt: str = "explain", max_turns: int = 20, script_files: bool = False
) -> list[Any]:
    """Run a scripted conversation, feeding back a fake tool result per call."""
    provider, _, name = resolve_provider(model, script_files=script_files)
    messages = [user(prompt)]
    responses = []
    for _ in range(max_turns):
        response = await provider.complete(ModelRequest(model=name, messages=messages))
        responses.append(response)
        messages.append(
            Message(role="assistant", content=response.text, tool_calls=response.tool_calls)
        )
        if not response.tool_calls:
            break
        for call in response.tool_calls:
            messages.append(
                Message(role="tool", content=f"result of {call.name}", tool_call_id=call.id)
            )
    return responses


async def test_scripted_default_script() -> None:
    responses = await play("scripted")
    assert [[(c.name, c.arguments) for c in r.tool_calls] for r in responses] == [
        [("list_files", {"pattern": "**/*"})],
        [("grep", {"pattern": "def "})],
        [],
    ]
    assert [c.id for c in responses[0].tool_calls] == ["call_0_0"]
    assert [c.id for c in responses[1].tool_calls] == ["call_1_0"]
    final = responses[-1]
    assert final.text.startswith("Offline scripted model (no LLM was called).")
    assert "result of grep" in final.text
    assert final.model == "scripted"
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0


@pytest.mark.parametrize("name", ["demo-explore", "demo-plan", "demo-research"])
async def test_scripted_demo_scripts(name: str) -> None:
    responses = await play(f"scripted:{name}", prompt="how is it built?")
    assert 2 <= len(responses) <= 4
    tools = {c.name for r in responses for c in r.tool_calls}
    assert tools <= {"list_files", "read_file", "grep"}
    assert responses[-1].text.startswith("Offline scripted model (no LLM was called).")
    assert name in responses[-1].text
    assert "how is it built?" in responses[-1].text
    assert "{" not in responses[-1].text


async def test_scripted_inline_list_with_usage_and_exhaustion() -> None:
    script = json.dumps(
        [
            {"tool_calls": [{"name": "grep", "arguments": {"pattern": "x"}}]},
            {"text": "saw: {last_tool_result}", "usage": {"input_tokens": 5, "output_tokens": 6}},
        ]
    )
    responses = await play(f"scripted:{script}", max_turns=2)
    assert responses[1].text == "saw: result of grep"
    assert (responses[1].usage.input_tokens, responses[1].usage.output_tokens) == (5, 6)
    provider = ScriptedProvider()
    history = [user("x"), Message(role="assistant"), Message(role="assistant")]
    exhausted = await provider.complete(ModelRequest(model=script, messages=history))
    assert exhausted.text == "Script finished after 2 turns."
    assert exhausted.tool_calls == []


async def test_scripted_repeat_and_final_from_file(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps(
            {
                "turns": [{"tool_calls": [{"name": "grep", "arguments": {"pattern": "a"}}]}],
                "repeat": 200,
                "final": "all done",
            }
        )
    )
    with pytest.raises(ApplicationError, match="SUBAGENTS_SCRIPT_FILES=1"):
        await play(f"scripted:@{path}")  # off unless the worker turns it on
    responses = await play(f"scripted:@{path}", max_turns=300, script_files=True)
    assert len(responses) == 201
    assert all(r.tool_calls[0].name == "grep" for r in responses[:200])
    assert responses[199].tool_calls[0].id == "call_199_0"
    assert responses[200].text == "all done"


async def test_scripted_is_deterministic() -> None:
    provider = ScriptedProvider()
    request = ModelRequest(model="demo-explore", messages=[user("q"), Message(role="assistant")])
    first, second = await provider.complete(request), await provider.complete(request)
    assert first == second
    assert [c.id for c in first.tool_calls] == ["call_1_0", "call_1_1"]


async def test_scripted_delay_is_cancellable() -> None:
    provider = ScriptedProvider()
    script = json.dumps([{"text": "slow", "delay": 60}])
    task = asyncio.create_task(provider.complete(ModelRequest(model=script, messages=[user("x")])))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2)


async def test_scripted_bad_file_is_a_non_retryable_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"turns": [{"txt": "typo"}]}')
    provider = ScriptedProvider()
    for model in (f"@{bad}", f"@{tmp_path / 'missing.json'}"):
        with pytest.raises(ApplicationError) as info:
            await provider.complete(ModelRequest(model=model, messages=[user("x")]))
        assert info.value.non_retryable is True
        assert info.value.type == "ModelRequestError"


def test_builtin_scripts_are_valid() -> None:
    assert {"default", "demo-explore", "demo-plan", "demo-research"} <= set(SCRIPTS)
    for name in SCRIPTS:
        assert parse_model(f"scripted:{name}")[0] == "scripted"


def test_fault_api_rejects_unknown_faults() -> None:
    srv = FakeOpenAIServer()
    with pytest.raises(ValueError, match="reset, truncate, hang"):
        srv.add_fault("explode")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fail_rate"):
        FakeOpenAIServer(fail_rate=1.5)
