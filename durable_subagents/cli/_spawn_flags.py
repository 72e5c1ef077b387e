"""What ``subagents spawn``'s flags hold, read into spawn options (checked by them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from durable_subagents.errors import InvalidRequest

__all__ = ["read_metadata", "read_schema", "rule_flags"]


def read_metadata(text: str) -> Any:
    """The JSON of ``--metadata`` (``spawn_task`` checks that it is a small object)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InvalidRequest(
            f"--metadata is not JSON ({err.msg} at character {err.pos}); give an object, "
            """e.g. '{"ticket": "PAY-12"}'"""
        ) from None


def read_schema(path: Path) -> Any:
    """The JSON in an ``--output-schema`` file (``spawn_task`` checks what it says)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidRequest(f"cannot read the output schema file {str(path)!r}: {err}") from None
    try:
        return json.loads(text)
    except ValueError as err:
        raise InvalidRequest(
            f"the output schema file {str(path)!r} is not JSON: {err}; write a JSON Schema "
            'such as {"type": "object", "properties": {"verdict": {"type": "string"}}}'
        ) from None


def rule_flags(specs: list[str] | None, action: str) -> list[dict[str, str]]:
    """``TOOL`` or ``TOOL:GLOB`` options as permission rules."""
    rules = []
    for spec in specs or []:
        tool_name, _, pattern = spec.partition(":")
        rules.append({"tool": tool_name or "*", "pattern": pattern or "*", "action": action})
    return rules
