"""The Responses API's stream read without a server: failures inside the stream, usage,
and which reasoning each wire sends back."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from openai import APIError
from temporalio.exceptions import ApplicationError

from durable_subagents.providers._errors import CONTEXT_LENGTH_ERROR, to_application_error
from durable_subagents.providers._responses_events import ResponsesAccumulator, responses_usage
from durable_subagents.providers._windows import known_window
from durable_subagents.providers.anthropic import to_anthropic_messages
from durable_subagents.providers.openai_responses import to_responses_input
from durable_subagents.types import Message, ModelRequest, ReasoningBlock, ToolCall


def failed(code: str, message: str) -> dict[str, Any]:
    error = {"code": code, "message": message}
    return {"type": "response.failed", "response": {"status": "failed", "error": error}}


@pytest.mark.parametrize(
    ("event", "kind", "retried"),
    [
        (
            failed("context_length_exceeded", "Your input exceeds the context window"),
            CONTEXT_LENGTH_ERROR,
            False,
        ),
        (failed("server_error", "The server had an error"), "ModelUnavailable", True),
        (failed("rate_limit_exceeded", "Rate limit reached"), "ModelUnavailable", True),
        (failed("invalid_prompt", "Invalid prompt"), "ModelRequestError", False),
        (
            {"type": "error", "code": "context_length_exceeded", "message": "too long"},
            CONTEXT_LENGTH_ERROR,
            False,
        ),
        ({"type": "error", "code": None, "message": "boom"}, "ModelUnavailable", True),
    ],
)
def test_a_failure_inside_the_stream_is_typed_like_an_http_one(
    event: dict[str, Any], kind: str, retried: bool
) -> None:
    accumulator = ResponsesAccumulator(model="gpt-5")
    accumulator.add({"type": "response.created", "response": {"status": "in_progress"}})
    with pytest.raises(ApplicationError) as info:
        accumulator.add(event)
    assert (info.value.type, info.value.non_retryable) == (kind, not retried)
    assert "openai-responses API" in info.value.message


def test_usage_counts_cached_and_reasoning_tokens() -> None:
    usage = responses_usage(
        {
            "input_tokens": 2000,
            "input_tokens_details": {"cached_tokens": 1536},
            "output_tokens": 300,
            "output_tokens_details": {"reasoning_tokens": 256},
            "total_tokens": 2300,
        }
    )
    assert (usage.input_tokens, usage.cache_read_tokens) == (2000, 1536)
    assert (usage.output_tokens, usage.reasoning_tokens) == (300, 256)
    assert responses_usage({}).input_tokens == 0


def test_an_incomplete_response_stops_for_length_with_its_output() -> None:
    accumulator = ResponsesAccumulator(model="gpt-5")
    item = {"type": "message", "content": [{"type": "output_text", "text": "partial"}]}
    accumulator.add(
        {
            "type": "response.incomplete",
            "response": {
                "status": "incomplete",
                "incomplete_details": {"reason": "max_output_tokens"},
                "output": [item],
                "model": "gpt-5-2025",
            },
        }
    )
    response = accumulator.response()
    assert accumulator.finished and response.stop_reason == "length"
    assert (response.text, response.model) == ("partial", "gpt-5-2025")


def test_each_wire_sends_back_only_its_own_reasoning() -> None:
    item = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAAAABx"}
    answer = Message(
        role="assistant",
        content="Reading.",
        tool_calls=[ToolCall(id="call_1", name="read_file", arguments={"path": "a"})],
        reasoning=[
            ReasoningBlock(type="reasoning", data=json.dumps(item)),
            ReasoningBlock(thinking="claude's", signature="sig"),
        ],
    )
    messages = [Message(role="user", content="go"), answer]
    request = ModelRequest(model="m", messages=messages)
    inputs = to_responses_input(request)
    assert [i["type"] for i in inputs] == ["message", "reasoning", "message", "function_call"]
    assert inputs[1] == item
    _, turns = to_anthropic_messages(request)
    assert [b["type"] for b in turns[1]["content"]] == ["thinking", "text", "tool_use"]
    # an item without its encrypted content cannot be found again: it stays behind
    unsealed = {**item, "encrypted_content": None}
    blocks = [ReasoningBlock(type="reasoning", data=json.dumps(unsealed))]
    plain = answer.model_copy(update={"reasoning": blocks})
    sent = to_responses_input(request.model_copy(update={"messages": [plain]}))
    assert [i["type"] for i in sent] == ["message", "function_call"]
    # an answer with neither text nor calls has nothing its reasoning could precede
    bare = answer.model_copy(update={"content": "", "tool_calls": []})
    assert to_responses_input(request.model_copy(update={"messages": [bare]})) == []


def test_a_responses_model_has_its_chat_completions_window() -> None:
    assert known_window("openai-responses:gpt-5-mini") == known_window("openai:gpt-5-mini")
    assert known_window("openai-responses:gpt-4.1") == 1_047_576
    assert known_window("openai-responses:unknown") is None


def test_an_error_event_with_a_context_length_error_inside_is_one_too() -> None:
    """``{"type": "error", "error": {...}}`` as the API streams it: the SDK's ``APIError``
    with the inner error as its body."""
    request = httpx2.Request("POST", "https://api.openai.com/v1/responses")
    inner = {
        "type": "invalid_request_error",
        "code": "context_length_exceeded",
        "message": "Your input exceeds the context window of this model.",
        "param": "input",
    }
    error = to_application_error(
        APIError(inner["message"], request, body=inner), provider="openai-responses", key_env="K"
    )
    assert (error.type, error.non_retryable) == (CONTEXT_LENGTH_ERROR, True)
    other = {**inner, "code": "server_error", "message": "oops"}
    retried = to_application_error(
        APIError("oops", request, body=other), provider="openai-responses", key_env="K"
    )
    assert (retried.type, retried.non_retryable) == ("ModelUnavailable", False)
