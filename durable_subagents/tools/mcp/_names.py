"""MCP tools as a model is offered them: Claude Code's names, schemas both wires take.

A server's tool is offered as ``mcp__<server>__<tool>``, the name Claude Code gives it,
so agent files, permission rules and ``disallowedTools`` written for Claude Code mean
the same here; ``mcp__<server>`` in an agent's tools stands for all of that server's
tools. Both providers take tool names of ``[A-Za-z0-9_-]{1,64}``: a character outside
that becomes ``_`` (the server is still called with the tool's own name), and a tool
whose name is too long, or clashes with another once made so, is not offered.

Schemas come from the server: local ``$ref``s are resolved inline (recursion cut at a
depth, where the rest may be anything), the top level is an object, and a schema past
``MAX_SCHEMA_BYTES`` once resolved is not offered. What cannot be offered is said once,
when the worker starts; the rest of the server's tools are offered.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from typing import Any

from durable_subagents.agents._tool_names import (
    MCP_PREFIX,
    expand_tool_names,
    is_mcp,
    rule_names,
    server_of,
)

__all__ = [
    "MAX_SCHEMA_BYTES",
    "MCP_PREFIX",
    "expand_tool_names",
    "is_mcp",
    "matches",
    "offerable_schema",
    "offered_name",
    "server_of",
]

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_SCHEMA_BYTES = 32 * 1024
"""The largest input schema offered, once its references are resolved."""
_MAX_REF_DEPTH = 8


def offered_name(server: str, tool: str) -> str | None:
    """``mcp__<server>__<tool>`` with characters no wire takes made ``_``; None if too long."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", tool)
    name = f"{MCP_PREFIX}{server}__{safe}"
    return name if NAME.fullmatch(name) else None


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether one of the rules' tools (a glob, or a server's name) names tool ``name``."""
    return any(rule_names(p, name) for p in patterns)


def offerable_schema(schema: Any) -> dict[str, Any]:
    """``schema`` as both providers take it: resolved inline, an object at the top.

    Raises:
        ValueError: It is not a JSON object, or it is too large once resolved.
    """
    if not isinstance(schema, dict):
        raise ValueError("its input schema is not a JSON object")
    definitions: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        found = schema.get(key)
        if isinstance(found, dict):
            definitions.update({f"#/{key}/{name}": value for name, value in found.items()})
    resolved = _resolve(schema, definitions, 0)
    assert isinstance(resolved, dict)
    for key in ("$defs", "definitions", "$schema", "$id"):
        resolved.pop(key, None)
    if resolved.get("type") != "object":
        if "type" in resolved:
            raise ValueError(f"its input schema is of type {resolved['type']!r}, not an object")
        resolved["type"] = "object"
    resolved.setdefault("properties", {})
    size = len(json.dumps(resolved))
    if size > MAX_SCHEMA_BYTES:
        raise ValueError(
            f"its input schema is {size:,} bytes once resolved (at most {MAX_SCHEMA_BYTES:,})"
        )
    return resolved


def _resolve(node: Any, definitions: dict[str, Any], depth: int) -> Any:
    if isinstance(node, list):
        return [_resolve(item, definitions, depth) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = definitions.get(ref)
        if target is None or depth >= _MAX_REF_DEPTH:
            # Unknown (remote, or a path we do not follow) or too deep: anything goes,
            # as the server will check the arguments itself.
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return _resolve(rest, definitions, depth) if rest else {}
        merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
        return _resolve(merged, definitions, depth + 1)
    return {
        key: value if key in ("$defs", "definitions") else _resolve(value, definitions, depth)
        for key, value in node.items()
    }
