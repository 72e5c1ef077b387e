"""Token counts and prompt caches of the fake model servers, by each API's documented rules.

Tokens are estimated, not counted: a token is 4 characters (rounded up) of the
request's JSON as the server renders it (each message, tool or content block with its
keys sorted). What matters for tests is that the numbers are deterministic, grow with
the request, and that the cache rules are the APIs':

- **OpenAI** caches automatically: a prompt of at least 1,024 tokens reads from the
  cache the longest prefix an earlier request of the same model (and the same
  ``prompt_cache_key``, which routes requests) already had, in steps of 128 tokens from
  1,024 on. ``usage.prompt_tokens`` includes ``prompt_tokens_details.cached_tokens``.
- **Anthropic** caches only what is marked: at most 4 ``cache_control`` breakpoints
  (a 5th is a 400). The prefix up to a breakpoint (tools, then system, then messages,
  block by block) is written when it has at least the model's minimum of tokens, and a
  breakpoint reads the longest cached prefix that ends at it or at one of the 20
  blocks before it. ``input_tokens`` counts only what was neither read from nor
  written to the cache (``cache_read_input_tokens``, ``cache_creation_input_tokens``).

Entries live ``ttl`` seconds after their last use (both APIs: 5 minutes by default).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

__all__ = [
    "ANTHROPIC_LOOKBACK",
    "ANTHROPIC_MAX_BREAKPOINTS",
    "OPENAI_MIN_TOKENS",
    "OPENAI_STEP_TOKENS",
    "AnthropicCache",
    "OpenAICache",
    "anthropic_min_tokens",
    "tokens",
]

CHARS_PER_TOKEN = 4
OPENAI_MIN_TOKENS = 1024
"""OpenAI caches prompts of at least this many tokens..."""
OPENAI_STEP_TOKENS = 128
"""...and reads them from the cache in steps of this many tokens."""
ANTHROPIC_MAX_BREAKPOINTS = 4
ANTHROPIC_LOOKBACK = 20
"""Blocks before a breakpoint where Anthropic looks for an earlier cached prefix."""
MAX_ENTRIES = 100_000
"""Cache entries a fake server keeps (the oldest go first)."""


def tokens(text: str) -> int:
    """The fake servers' token count of ``text``: 4 characters a token, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


IMAGE_TOKENS = 1600
"""What an image counts as: about what the APIs charge for a megapixel."""


def canonical(value: Any) -> str:
    """The JSON text a part of a request counts as (keys sorted).

    An image's base64 counts as ``IMAGE_TOKENS`` tokens of text naming its bytes' hash.
    """
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    if "base64" not in text:
        return text
    return json.dumps(_counted(value), sort_keys=True, ensure_ascii=False)


def _image_text(data: str) -> str:
    digest = hashlib.sha256(data.encode()).hexdigest()
    return digest.ljust(IMAGE_TOKENS * CHARS_PER_TOKEN, ".")


def _counted(value: Any) -> Any:
    if isinstance(value, list):
        return [_counted(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _counted(v) for k, v in value.items()}
    if out.get("type") == "base64" and isinstance(out.get("data"), str):
        out["data"] = _image_text(out["data"])
    url = out.get("url")
    if isinstance(url, str) and url.startswith("data:"):
        out["url"] = _image_text(url)
    return out


def anthropic_min_tokens(model: str) -> int:
    """Anthropic's minimum cacheable prompt length for a model, as documented.

    4,096 for Claude Haiku 4.5 and Opus 4.5 and later; 2,048 for Haiku 3 and 3.5;
    1,024 for the others (Sonnet, Opus 4 and 4.1).
    """
    name = model.lower()
    if "haiku-4" in name or any(f"opus-4-{v}" in name for v in (5, 6, 7)):
        return 4096
    if "haiku" in name:
        return 2048
    return 1024


class _Entries:
    """Cache keys with their expiry, least recently used first out."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._entries: OrderedDict[bytes, float] = OrderedDict()

    def hit(self, key: bytes, now: float) -> bool:
        expiry = self._entries.get(key)
        if expiry is None or expiry < now:
            return False
        self.put(key, now)
        return True

    def put(self, key: bytes, now: float) -> None:
        self._entries[key] = now + self.ttl
        self._entries.move_to_end(key)
        while len(self._entries) > MAX_ENTRIES:
            self._entries.popitem(last=False)


class OpenAICache:
    """OpenAI's automatic prefix cache (see the module's docstring)."""

    def __init__(self, ttl: float = 300.0) -> None:
        self._entries = _Entries(ttl)

    @staticmethod
    def render(body: dict[str, Any]) -> tuple[str, int]:
        """The prompt as counted (tools first, then each message) and its tools' tokens."""
        tools = canonical(body["tools"]) if body.get("tools") else ""
        messages = "".join(canonical(m) for m in body.get("messages") or [])
        return tools + messages, tokens(tools)

    def use(self, body: dict[str, Any], now: float | None = None) -> tuple[int, int]:
        """``(prompt_tokens, cached_tokens)`` of a request, caching its prefixes."""
        now = time.monotonic() if now is None else now
        text, _ = self.render(body)
        total = tokens(text)
        if total < OPENAI_MIN_TOKENS:
            return total, 0
        space = canonical([body.get("model"), body.get("prompt_cache_key")]).encode()
        digest = hashlib.sha256(space)
        data = text.encode()
        cached, done = 0, 0
        size = OPENAI_MIN_TOKENS
        while size <= total:
            end = min(size * CHARS_PER_TOKEN, len(data))
            digest.update(data[done:end])
            done = end
            key = digest.copy().digest()
            if self._entries.hit(key, now):
                cached = size
            self._entries.put(key, now)
            size += OPENAI_STEP_TOKENS
        return total, cached


class AnthropicCache:
    """Anthropic's prompt cache behind ``cache_control`` breakpoints (see the module)."""

    def __init__(self, ttl: float = 300.0, min_tokens: int | None = None) -> None:
        self._entries = _Entries(ttl)
        self.min_tokens = min_tokens

    @staticmethod
    def blocks(body: dict[str, Any]) -> list[tuple[str, bool]]:
        """The request's blocks in cache order, as counted, and whether each is marked."""
        out: list[tuple[str, bool]] = []

        def add(kind: str, items: Iterable[Any]) -> None:
            for item in items:
                if isinstance(item, dict):
                    marked = "cache_control" in item
                    item = {k: v for k, v in item.items() if k != "cache_control"}
                else:
                    marked = False
                out.append((canonical([kind, item]), marked))

        add("tool", body.get("tools") or [])
        system = body.get("system")
        add(
            "system",
            [{"type": "text", "text": system}] if isinstance(system, str) else system or [],
        )
        for message in body.get("messages") or []:
            content = message.get("content")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            add(str(message.get("role")), content or [])
        return out

    def breakpoints(self, body: dict[str, Any]) -> int:
        """How many ``cache_control`` breakpoints a request has."""
        return sum(marked for _, marked in self.blocks(body))

    def use(self, body: dict[str, Any], now: float | None = None) -> dict[str, int]:
        """The request's input usage as the API reports it, caching its marked prefixes."""
        now = time.monotonic() if now is None else now
        minimum = self.min_tokens or anthropic_min_tokens(str(body.get("model") or ""))
        digest = hashlib.sha256(canonical(body.get("model")).encode())
        keys: list[bytes] = []
        ends: list[int] = []
        marks: list[int] = []
        total = 0
        for i, (text, marked) in enumerate(self.blocks(body)):
            digest.update(text.encode())
            keys.append(digest.copy().digest())
            total += tokens(text)
            ends.append(total)
            if marked:
                marks.append(i)
        read = 0
        for mark in marks:
            for j in range(mark, max(mark - ANTHROPIC_LOOKBACK, 0) - 1, -1):
                if ends[j] >= minimum and self._entries.hit(keys[j], now):
                    read = max(read, ends[j])
                    break
        written = [m for m in marks if ends[m] >= minimum]
        for mark in written:
            self._entries.put(keys[mark], now)
        created = max(ends[written[-1]] - read, 0) if written else 0
        return {
            "input_tokens": total - read - created,
            "cache_creation_input_tokens": created,
            "cache_read_input_tokens": read,
        }

    @staticmethod
    def prompt_tokens(body: dict[str, Any]) -> int:
        """Every input token of a request."""
        return sum(tokens(text) for text, _ in AnthropicCache.blocks(body))
