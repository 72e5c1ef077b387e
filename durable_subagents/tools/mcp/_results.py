"""What an MCP server says, as the worker passes it on: tools listed, results of calls.

A server's tool descriptions and results are untrusted text, and a server may be
hostile: descriptions are cut at ``MAX_DESCRIPTION`` characters, a tool whose input
schema is larger than ``MAX_SCHEMA_BYTES`` is left out, and a result is truncated
like bash output (head and tail around a visible marker). Images a model may be shown
(``check_image``) go with the result, and its text names each where it was; other
images and audio become a note in the text saying why they were left out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from durable_subagents.tools._bash import MAX_OUTPUT_CHARS, truncate_middle
from durable_subagents.tools._images import CheckedImage, check_image

__all__ = [
    "MAX_DESCRIPTION",
    "MAX_SCHEMA_BYTES",
    "McpResult",
    "McpToolInfo",
    "result_from",
    "tool_info",
]

MAX_DESCRIPTION = 4_000
"""Characters of a tool's description kept; the rest is cut, with a note."""
MAX_TITLE = 200
"""Characters of a tool's title kept."""
MAX_SCHEMA_BYTES = 64 << 10
"""A tool whose input schema is longer than this, as JSON, is not offered."""
_MAX_NOTE = 300
"""Characters of a URI or name quoted in a note about a resource."""


@dataclass(frozen=True)
class McpToolInfo:
    """One tool a server lists, as the worker offers it.

    Attributes:
        server: The server's name in the worker's configuration.
        name: The tool's name on that server.
        description: What the server says it does (cut at ``MAX_DESCRIPTION``).
        input_schema: The JSON schema of its arguments, as the server gave it.
        read_only_hint: The server's ``annotations.readOnlyHint``: shown to a person
            deciding on a call, never trusted to decide.
        title: A display name the server gave, if any.
    """

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    read_only_hint: bool | None
    title: str | None


@dataclass
class McpResult:
    """What one call of a server's tool returned, as text for the model.

    Attributes:
        text: The text blocks joined, and ``structuredContent`` as JSON (alone where
            there is no text; after it, marked, unless a text block already says it),
            resources as short text, a line naming each image (or saying why it
            was left out) and each audio block; truncated past ``MAX_OUTPUT_CHARS``
            keeping head and tail.
        is_error: The server's ``isError``: the tool failed, and says why in ``text``.
        images: The images a model may be shown (none of an error result).
        left_out: Image and audio blocks only a note in ``text`` stands for.
    """

    text: str
    is_error: bool
    images: list[CheckedImage] = field(default_factory=list)
    left_out: int = 0


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit]


def tool_info(server: str, tool: types.Tool) -> McpToolInfo | str:
    """``tool`` as the worker offers it, or why it is left out."""
    try:
        schema_size = len(json.dumps(tool.input_schema, separators=(",", ":")))
    except (TypeError, ValueError):
        return f"tool {_cut(tool.name, 100)!r}: its input schema is not JSON"
    if schema_size > MAX_SCHEMA_BYTES:
        return (
            f"tool {_cut(tool.name, 100)!r}: its input schema is {schema_size:,} bytes, "
            f"over {MAX_SCHEMA_BYTES:,}"
        )
    description = tool.description or ""
    if len(description) > MAX_DESCRIPTION:
        description = (
            f"{description[:MAX_DESCRIPTION]}\n[... description cut at {MAX_DESCRIPTION:,} "
            "characters ...]"
        )
    title = tool.title or (tool.annotations.title if tool.annotations else None)
    return McpToolInfo(
        server=server,
        name=tool.name,
        description=description,
        input_schema=tool.input_schema,
        read_only_hint=tool.annotations.read_only_hint if tool.annotations else None,
        title=_cut(title, MAX_TITLE) if title else None,
    )


def _resource_text(block: types.EmbeddedResource) -> str:
    resource = block.resource
    uri = _cut(resource.uri, _MAX_NOTE)
    if isinstance(resource, types.TextResourceContents):
        return f"[resource {uri}]\n{resource.text}"
    kind = _cut(resource.mime_type or "binary", 100)
    return f"[resource {uri}: {kind} data, {len(resource.blob):,} base64 characters, left out]"


def _restated(content: list[Any], structured: Any) -> bool:
    """Whether a text block already says ``structured``.

    MCP asks a server to send its structured content's JSON as text too; the SDK wraps
    a value that is no object as ``{"result": value}`` and sends the value as text.
    """
    one = isinstance(structured, dict) and list(structured) == ["result"]
    wrapped = structured["result"] if one else ...
    for block in content:
        if not isinstance(block, types.TextContent):
            continue
        try:
            said = json.loads(block.text)
        except ValueError:
            said = ...
        if said == structured or (one and wrapped in (said, block.text)):
            return True
    return False


def result_from(result: types.CallToolResult) -> McpResult:
    """The model's view of one call's result: text, whether it failed, its images."""
    parts: list[str] = []
    images: list[CheckedImage] = []
    left_out = 0
    has_text = False
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
            has_text = True
        elif isinstance(block, types.ImageContent) and not result.is_error:
            image = check_image(block.mime_type, block.data, len(images))
            if isinstance(image, str):
                left_out += 1
                parts.append(f"[image ({_cut(block.mime_type, 100)}) left out: {image}]")
            else:
                images.append(image)
                parts.append(
                    f"[image {len(images)}: {image.media_type}, {len(image.data):,} bytes]"
                )
        elif isinstance(block, types.ImageContent | types.AudioContent):
            left_out += 1
            kind = "image" if isinstance(block, types.ImageContent) else "audio"
            parts.append(f"[{kind} ({_cut(block.mime_type, 100)}) left out: not shown as text]")
        elif isinstance(block, types.ResourceLink):
            parts.append(
                f"[resource link {_cut(block.name, _MAX_NOTE)}: {_cut(block.uri, _MAX_NOTE)}]"
            )
        elif isinstance(block, types.EmbeddedResource):
            parts.append(_resource_text(block))
    structured = result.structured_content
    if structured is not None:
        data = json.dumps(structured, separators=(",", ":"), ensure_ascii=False)
        if not has_text:
            parts.insert(0, data)
        elif not _restated(result.content, structured):
            parts.append(f"[structured content] {data}")
    text = truncate_middle("\n".join(parts), MAX_OUTPUT_CHARS)
    return McpResult(text=text, is_error=bool(result.is_error), images=images, left_out=left_out)
