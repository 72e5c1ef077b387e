"""The fake model servers' checks of images in requests, as each API checks them.

A request whose image an API would refuse gets that API's 400 here too, so a test
through a fake server fails where the real API would: a tool message of Chat
Completions takes only text parts (images only in a user message, as ``image_url``
data URLs), the results of an assistant's tool calls must come right after it, and an
Anthropic image block must be base64 of a PNG, JPEG, GIF or WebP image of the type it
names, at most 5 MB of base64. The formats are told by the images' first bytes,
independently of the code under test.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

__all__ = ["ANTHROPIC_IMAGE_LIMIT", "anthropic_problem", "image_type", "openai_problem"]

ANTHROPIC_IMAGE_LIMIT = 5 * 1024 * 1024
"""Characters of base64 an Anthropic image block may hold."""
_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
_RESULT_BLOCKS = ("text", "search_result", "document", "tool_reference")
"""Blocks besides images a ``tool_result`` may hold (not checked further here)."""


def image_type(data: bytes) -> str | None:
    """The image type ``data`` is, by its first bytes (None: none the APIs take)."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "image/png"
    if data[:3] == b"\xff\xd8\xff":
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _decoded(data: Any) -> bytes | None:
    if not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def openai_problem(messages: list[Any]) -> str | None:
    """What Chat Completions would refuse in ``messages`` (images, call order), or None."""
    waiting: list[str] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"messages[{i}]: expected an object"
        role = message.get("role")
        if waiting and role != "tool":
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not "
                f"have response messages: {', '.join(waiting)}"
            )
        if role == "tool":
            if message.get("tool_call_id") in waiting:
                waiting.remove(message["tool_call_id"])
            content = message.get("content")
            if isinstance(content, list):
                for j, part in enumerate(content):
                    kind = part.get("type") if isinstance(part, dict) else None
                    if kind != "text":
                        return (
                            f"Invalid value: '{kind}'. Supported values are: 'text'. "
                            f"(messages[{i}].content[{j}].type)"
                        )
            elif not isinstance(content, str):
                return f"messages[{i}].content: expected a string or an array of text parts"
        elif role == "assistant":
            waiting = [c.get("id") for c in message.get("tool_calls") or []]
        elif role == "user" and isinstance(message.get("content"), list):
            for j, part in enumerate(message["content"]):
                problem = _openai_part(part)
                if problem is not None:
                    return f"messages[{i}].content[{j}]: {problem}"
    return None


def _openai_part(part: Any) -> str | None:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text":
        return None if isinstance(part.get("text"), str) else "text: expected a string"
    if kind in ("input_audio", "file"):
        return None
    if kind != "image_url":
        return (
            f"Invalid value: '{kind}'. Supported values are: 'text', 'image_url', "
            "'input_audio', and 'file'."
        )
    url = (part.get("image_url") or {}).get("url")
    if not isinstance(url, str) or not url.startswith("data:"):
        return "image_url.url: expected a URL or a data URL"
    head, _, data = url.partition(",")
    if not head.endswith(";base64"):
        return "Invalid image URL: expected a base64 data URL"
    mime = head.removeprefix("data:").removesuffix(";base64")
    if mime not in _TYPES:
        return "Invalid MIME type. Only image types are supported."
    decoded = _decoded(data)
    if decoded is None:
        return "Invalid base64 image_url."
    if image_type(decoded) is None:
        return (
            "You uploaded an unsupported image. Please make sure your image has of one "
            "the following formats: ['png', 'jpeg', 'gif', 'webp']."
        )
    return None


def anthropic_problem(messages: list[Any]) -> str | None:
    """What the Messages API would refuse in ``messages``' tool results, or None."""
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, block in enumerate(content):
            if not isinstance(block, dict):
                continue
            if block.get("type") == "image":
                problem = _anthropic_image(block)
            elif block.get("type") == "tool_result":
                problem = _tool_result(block)
            else:
                continue
            if problem is not None:
                return f"messages.{i}.content.{j}: {problem}"
    return None


def _tool_result(block: dict[str, Any]) -> str | None:
    content = block.get("content", "")
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        return "tool_result.content: Input should be a valid string or list"
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _RESULT_BLOCKS:
            continue
        if kind == "image":
            problem = _anthropic_image(part)
            if problem is not None:
                return f"content.{k}.image: {problem}"
            continue
        return (
            f"content.{k}: Input tag '{kind}' found using 'type' does not match any of "
            "the expected tags"
        )
    return None


def _anthropic_image(block: dict[str, Any]) -> str | None:
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") != "base64":
        return "source: expected a base64 source"
    media_type = source.get("media_type")
    if media_type not in _TYPES:
        return (
            "source.base64.media_type: Input should be 'image/jpeg', 'image/png', "
            "'image/gif' or 'image/webp'"
        )
    data = source.get("data")
    if isinstance(data, str) and len(data) > ANTHROPIC_IMAGE_LIMIT:
        return (
            f"source.base64: image exceeds 5 MB maximum: {len(data)} bytes > "
            f"{ANTHROPIC_IMAGE_LIMIT} bytes"
        )
    decoded = _decoded(data)
    if decoded is None:
        return "source.base64.data: invalid base64 data"
    if image_type(decoded) != media_type:
        return f"source.base64.data: Image does not match the provided media type {media_type}"
    return None
