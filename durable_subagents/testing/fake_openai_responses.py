"""A local server that speaks OpenAI's Responses API wire protocol.

Reasoning is played as the API plays it for a stateless client: a request that asks
for reasoning (``reasoning.effort``) gets reasoning items before the answer, each with
a summary and, when the request ``include``s ``reasoning.encrypted_content``, an
``encrypted_content`` bound to the item's id and to this server. What comes back is
checked with the API's own errors (400 unless said otherwise):

- a reasoning item whose ``encrypted_content`` was altered: ``invalid_encrypted_content``;
- one sent back without it (``store: false`` keeps nothing): 404, "Item with id ... not
  found";
- a reasoning item with no output item after it (the end of the input, a user
  message, a function call's output): "... was provided without its required
  following item";
- a function call this server made after reasoning, sent back without that reasoning
  before it: "Item 'fc_...' of type 'function_call' was provided without its required
  'reasoning' item". The API ties them by the call's item id; clients that send no
  item ids (this project's provider) are held to it by ``call_id``, which is stricter;
- a ``function_call_output`` whose ``call_id`` no earlier ``function_call`` has, a
  function call with no output, and an output image that is no PNG, JPEG, GIF or
  WebP base64 data URL;
- ``include: ["reasoning.encrypted_content"]`` or ``reasoning.effort`` for a model that
  does not reason (``gpt-4*``, ``gpt-3.5*``, ``chatgpt*``, ``*-chat*``).

Usage reports ``input_tokens_details.cached_tokens`` (OpenAI's automatic prompt
cache, see ``_prompt_cache``) and ``output_tokens_details.reasoning_tokens``; a prompt
over ``context_window`` gets ``context_length_exceeded``, a 429 OpenAI's rate-limit
body.

Example:
    >>> async with FakeOpenAIResponsesServer() as srv:  # doctest: +SKIP
    ...     srv.add_reply(tool_calls=[{"name": "grep", "arguments": {"pattern": "def "}}])
    ...     client = AsyncOpenAI(base_url=srv.base_url, api_key="test")
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import time
from collections.abc import Iterator
from typing import Any

from ._prompt_cache import OpenAICache, tokens
from ._wire_images import image_type
from .fake_openai import (
    REASONING_EFFORTS,
    REASONING_TOKENS,
    FakeModelServer,
    FakeReply,
    arguments_text,
    fragments,
    text_deltas,
)

__all__ = ["CONTEXT_MESSAGE", "FakeOpenAIResponsesServer"]

CONTEXT_MESSAGE = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)
_NON_REASONING = re.compile(r"(?:gpt-4|gpt-3\.5|chatgpt)|.*-chat", re.IGNORECASE)
"""Models that do not reason: they refuse ``reasoning.effort`` and encrypted reasoning."""
_FERNET_PREFIX = "gAAAAAB"
"""How OpenAI's encrypted content begins (a Fernet token)."""


def _error(message: str, *, param: str | None = "input", code: str | None = None) -> Any:
    return {
        "error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    }


def _output_problem(output: Any) -> str | None:
    """What the API refuses in a function call's output: a string, or a list of parts."""
    if isinstance(output, str):
        return None
    if not isinstance(output, list):
        return "expected a string or an array of content items"
    for part in output:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "input_file"):
            continue
        if kind != "input_image":
            return (
                f"Invalid value: '{kind}'. Supported values are: 'input_text', "
                "'input_image', and 'input_file'."
            )
        url = part.get("image_url")
        head, _, data = url.partition(",") if isinstance(url, str) else ("", "", "")
        if not head.startswith("data:") or not head.endswith(";base64"):
            return "Invalid image URL: expected a base64 data URL"
        try:
            decoded = base64.b64decode(data, validate=True)
        except ValueError:
            return "Invalid base64 image_url."
        if image_type(decoded) is None:
            return (
                "You uploaded an unsupported image. Please make sure your image has of one "
                "the following formats: ['png', 'jpeg', 'gif', 'webp']."
            )
    return None


def _short(text: str) -> str:
    """Encrypted content as the API's messages show it: ``gAAA...DQ==``."""
    return f"{text[:4]}...{text[-4:]}" if len(text) > 8 else text


class FakeOpenAIResponsesServer(FakeModelServer):
    """Speaks ``POST /v1/responses``, streamed (SSE events) and not.

    ``base_url`` ends in ``/v1``, as ``AsyncOpenAI(base_url=...)`` expects. A reply's
    ``thinking`` is its reasoning items' summaries (one item per entry; None: an item
    with no summary; None for the whole list: ``default_thinking``), sent only to a
    request that asks for reasoning.
    """

    route = "/v1/responses"

    def __init__(
        self,
        *,
        default_thinking: str = "**Planning** I should look at the files first.",
        verified: bool = True,
        **options: Any,
    ) -> None:
        """Options as ``FakeModelServer``'s; ``default_thinking`` as the class says.

        ``verified=False`` plays an organization that OpenAI has not verified: a request
        for reasoning summaries gets the API's 400, and reasoning items carry none.
        """
        super().__init__(**options)
        self.verified = verified
        self.default_thinking = default_thinking
        self._cache = OpenAICache(self.cache_ttl)
        self._key = os.urandom(32)
        self._outputs: dict[int, tuple[str, list[dict[str, Any]]]] = {}
        self.issued_reasoning: dict[str, dict[str, Any]] = {}
        """Every reasoning item sent, by id, as ``response.output_item.done`` sent it."""
        self._call_reasoning: dict[str, tuple[str, list[str]]] = {}
        """Per call id: the function call's item id and the reasoning item ids before it."""

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        return f"{self.url}/v1"

    def error_body(self, status: int) -> Any:
        """OpenAI's error shape (a 429 as its rate limiter words it)."""
        if status == 429:
            message = (
                "Rate limit reached for fake-model in organization org-fake on tokens per "
                "min (TPM): Limit 30000, Used 29500, Requested 1200. Please try again in "
                "1.4s. Visit https://platform.openai.com/account/rate-limits to learn more."
            )
            return {
                "error": {
                    "message": message,
                    "type": "tokens",
                    "param": None,
                    "code": "rate_limit_exceeded",
                }
            }
        kind = {401: "invalid_request_error"}.get(status, "server_error")
        return {
            "error": {"message": f"fake error {status}", "type": kind, "param": None, "code": None}
        }

    # ------------------------------------------------------------ what comes back

    def _sign(self, item_id: str, sealed: bytes) -> bytes:
        message = b"reasoning\0" + item_id.encode() + b"\0" + sealed
        return hmac.new(self._key, message, hashlib.sha256).digest()

    def _encrypt(self, item_id: str) -> str:
        """Opaque content bound to the item's id; every byte of it is checked."""
        sealed = os.urandom(72)
        raw = sealed + self._sign(item_id, sealed)
        return _FERNET_PREFIX + base64.urlsafe_b64encode(raw).decode()

    def _verifies(self, item_id: str, content: str) -> bool:
        if not content.startswith(_FERNET_PREFIX):
            return False
        try:
            raw = base64.urlsafe_b64decode(content[len(_FERNET_PREFIX) :].encode())
        except ValueError:
            return False
        sealed, mac = raw[:-32], raw[-32:]
        return len(raw) > 32 and hmac.compare_digest(mac, self._sign(item_id, sealed))

    def refusal(self, body: dict[str, Any]) -> tuple[int, Any] | None:
        """The API's errors for what came back (see the module's docstring)."""
        effort = (body.get("reasoning") or {}).get("effort")
        if _NON_REASONING.match(str(body.get("model") or "")):
            if "reasoning.encrypted_content" in (body.get("include") or []):
                message = "Encrypted content is not supported with this model."
                return 400, _error(message, param="include")
            if effort is not None:
                message = (
                    "Unsupported parameter: 'reasoning.effort' is not supported with this model."
                )
                return 400, _error(message, param="reasoning.effort", code="unsupported_parameter")
        if effort is not None and effort not in REASONING_EFFORTS:
            supported = ", ".join(f"'{e}'" for e in REASONING_EFFORTS)
            message = f"Invalid value: '{effort}'. Supported values are: {supported}."
            return 400, _error(message, param="reasoning.effort", code="invalid_value")
        if not self.verified and (body.get("reasoning") or {}).get("summary") is not None:
            message = (
                "Your organization must be verified to generate reasoning summaries. Please "
                "go to: https://platform.openai.com/settings/organization/general and click "
                "on Verify Organization. If you just verified, it can take up to 15 minutes "
                "for access to propagate."
            )
            return 400, _error(message, param="reasoning.summary", code="unsupported_value")
        items = body.get("input")
        if not isinstance(items, list):
            return None
        calls: list[str] = []
        answered: set[str] = set()
        seen_reasoning: set[str] = set()
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if kind == "reasoning":
                refused = self._reasoning_problem(item, items[i + 1 : i + 2], body)
                if refused is not None:
                    return refused
                seen_reasoning.add(str(item.get("id")))
            elif kind == "function_call":
                call_id = str(item.get("call_id"))
                issued = self._call_reasoning.get(call_id)
                if issued is not None:
                    missing = [r for r in issued[1] if r not in seen_reasoning]
                    if missing:
                        message = (
                            f"Item '{issued[0]}' of type 'function_call' was provided without "
                            f"its required 'reasoning' item: '{missing[0]}'."
                        )
                        return 400, _error(message)
                calls.append(call_id)
            elif kind == "function_call_output":
                call_id = str(item.get("call_id"))
                wrong = _output_problem(item.get("output"))
                if wrong is not None:
                    return 400, _error(f"input[{i}].output: {wrong}")
                if call_id not in calls:
                    message = f"No tool call found for function call output with call_id {call_id}."
                    return 400, _error(message)
                answered.add(call_id)
        for call_id in calls:
            if call_id not in answered:
                return 400, _error(f"No tool output found for function call {call_id}.")
        return None

    def _reasoning_problem(
        self, item: dict[str, Any], after: list[Any], body: dict[str, Any]
    ) -> tuple[int, Any] | None:
        item_id = str(item.get("id"))
        content = item.get("encrypted_content")
        if not content:
            if body.get("store") is False or item_id not in self.issued_reasoning:
                message = (
                    f"Item with id '{item_id}' not found. Items are not persisted when `store` "
                    "is set to false. Try again with `store` set to true, or remove this item "
                    "from your input."
                )
                return 404, _error(message)
        elif not self._verifies(item_id, str(content)):
            message = f"The encrypted content {_short(str(content))} could not be verified."
            return 400, _error(message, param=None, code="invalid_encrypted_content")
        following = after[0] if after and isinstance(after[0], dict) else {}
        if following.get("type") not in ("reasoning", "message", "function_call") or (
            following.get("type") == "message" and following.get("role") != "assistant"
        ):
            message = (
                f"Item '{item_id}' of type 'reasoning' was provided without its required "
                "following item."
            )
            return 400, _error(message)
        return None

    # ------------------------------------------------------------ counting

    @staticmethod
    def _as_messages(body: dict[str, Any]) -> dict[str, Any]:
        """The request as the prompt cache counts it: instructions, then each item."""
        instructions = body.get("instructions")
        messages = [{"role": "system", "content": instructions}] if instructions else []
        items = body.get("input")
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        return {
            "model": body.get("model"),
            "prompt_cache_key": body.get("prompt_cache_key"),
            "tools": body.get("tools"),
            "messages": [*messages, *(items or [])],
        }

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        """Every input token of a request: tools, instructions and input items."""
        text, _ = OpenAICache.render(self._as_messages(body))
        return tokens(text)

    def too_long(self, body: dict[str, Any], tokens: int) -> tuple[int, Any]:
        """The Responses API's ``context_length_exceeded``."""
        return 400, _error(CONTEXT_MESSAGE, code="context_length_exceeded")

    def usage(self, reply: FakeReply, body: dict[str, Any]) -> dict[str, Any]:
        """Responses usage: ``input_tokens`` and ``output_tokens`` include the details."""
        _, output = self._output(reply, body)
        thinking = [i for i in output if i["type"] == "reasoning"]
        if reply.usage is not None:
            prompt, completion, cached = *reply.usage, 0
        else:
            prompt, cached = self._cache.use(self._as_messages(body))
            completion = self.output_tokens(reply)
        reasoning = reply.reasoning_tokens
        if reasoning is None:
            effort = str((body.get("reasoning") or {}).get("effort"))
            reasoning = REASONING_TOKENS.get(effort, 0) if thinking else 0
        completion += reasoning
        return {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": prompt + completion,
        }

    # ------------------------------------------------------------ what goes out

    def _summaries(self, reply: FakeReply, body: dict[str, Any]) -> list[str | None]:
        if (body.get("reasoning") or {}).get("effort") in (None, "none"):
            return []
        return [self.default_thinking] if reply.thinking is None else list(reply.thinking)

    def _output(self, reply: FakeReply, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        """The response id and output items of a reply to ``body`` (made once)."""
        if id(body) in self._outputs:
            return self._outputs[id(body)]
        encrypted = "reasoning.encrypted_content" in (body.get("include") or [])
        items: list[dict[str, Any]] = []
        reasoning_ids: list[str] = []
        for summary in self._summaries(reply, body):
            item_id = self.next_id("rs_fake_")
            shown = summary is not None and (body.get("reasoning") or {}).get("summary")
            parts = [{"type": "summary_text", "text": summary}] if shown else []
            item: dict[str, Any] = {"id": item_id, "type": "reasoning", "summary": parts}
            if encrypted:
                item["encrypted_content"] = self._encrypt(item_id)
            items.append(item)
            reasoning_ids.append(item_id)
            self.issued_reasoning[item_id] = item
        if reply.text:
            items.append(
                {
                    "id": self.next_id("msg_fake_"),
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                }
            )
        for call in reply.tool_calls:
            call_id = call.get("id") or self.next_id("call_fake_")
            fc_id = self.next_id("fc_fake_")
            items.append(
                {
                    "id": fc_id,
                    "type": "function_call",
                    "status": "completed",
                    "call_id": call_id,
                    "name": call["name"],
                    "arguments": arguments_text(call.get("arguments", {})),
                }
            )
            if reasoning_ids and encrypted:  # reasoning that could come back
                self._call_reasoning[call_id] = (fc_id, list(reasoning_ids))
        self._outputs[id(body)] = (self.next_id("resp_fake_"), items)
        return self._outputs[id(body)]

    def _response(self, reply: FakeReply, body: dict[str, Any], *, done: bool) -> dict[str, Any]:
        response_id, output = self._output(reply, body)
        incomplete = reply.stop_reason in ("length", "max_output_tokens")
        status = ("incomplete" if incomplete else "completed") if done else "in_progress"
        return {
            "id": response_id,
            "object": "response",
            "created_at": int(time.time()),
            "status": status,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if done and incomplete else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": body.get("model", "fake"),
            "output": output if done else [],
            "parallel_tool_calls": True,
            "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": body.get("text") or {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": body.get("tools") or [],
            "usage": reply.reported if done else None,
        }

    def render(self, reply: FakeReply, body: dict[str, Any]) -> dict[str, Any]:
        """A ``response`` object."""
        return self._response(reply, body, done=True)

    def events(self, reply: FakeReply, body: dict[str, Any]) -> Iterator[bytes]:
        """The Responses API stream events, each with its ``sequence_number``."""
        sequence = 0

        def event(kind: str, data: dict[str, Any]) -> bytes:
            nonlocal sequence
            payload = {"type": kind, "sequence_number": sequence, **data}
            sequence += 1
            return f"event: {kind}\ndata: {json.dumps(payload)}\n\n".encode()

        yield event("response.created", {"response": self._response(reply, body, done=False)})
        yield event("response.in_progress", {"response": self._response(reply, body, done=False)})
        _, output = self._output(reply, body)
        for index, item in enumerate(output):
            at = {"output_index": index}
            ids = {"item_id": item["id"], **at}
            if item["type"] == "reasoning":
                yield event("response.output_item.added", {**at, "item": {**item, "summary": []}})
                for s, part in enumerate(item["summary"]):
                    empty = {"type": "summary_text", "text": ""}
                    where = {**ids, "summary_index": s}
                    yield event("response.reasoning_summary_part.added", {**where, "part": empty})
                    for piece in text_deltas(FakeReply(text=part["text"])):
                        yield event(
                            "response.reasoning_summary_text.delta", {**where, "delta": piece}
                        )
                    yield event(
                        "response.reasoning_summary_text.done", {**where, "text": part["text"]}
                    )
                    yield event("response.reasoning_summary_part.done", {**where, "part": part})
            elif item["type"] == "message":
                start = {**item, "status": "in_progress", "content": []}
                yield event("response.output_item.added", {**at, "item": start})
                part = {"type": "output_text", "text": "", "annotations": []}
                where = {**ids, "content_index": 0}
                yield event("response.content_part.added", {**where, "part": part})
                for piece in text_deltas(reply):
                    yield event(
                        "response.output_text.delta", {**where, "delta": piece, "logprobs": []}
                    )
                text = item["content"][0]["text"]
                yield event("response.output_text.done", {**where, "text": text, "logprobs": []})
                yield event("response.content_part.done", {**where, "part": item["content"][0]})
            else:
                start = {**item, "status": "in_progress", "arguments": ""}
                yield event("response.output_item.added", {**at, "item": start})
                for piece in fragments(item["arguments"]):
                    yield event("response.function_call_arguments.delta", {**ids, "delta": piece})
                done = {**ids, "arguments": item["arguments"]}
                yield event("response.function_call_arguments.done", done)
            yield event("response.output_item.done", {**at, "item": item})
        final = self._response(reply, body, done=True)
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        yield event(kind, {"response": final})
