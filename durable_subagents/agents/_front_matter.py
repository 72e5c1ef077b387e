"""Front matter as Claude Code reads it: YAML when it parses, else field by field.

Agent files in the wild often are not valid YAML: an unquoted description holding
``Examples: <example>Context: ... user: "..."`` has colons YAML reads as nested keys,
and Claude Code loads such files anyway. So a block strict YAML rejects is read again
one top-level field at a time: a field starts at a line ``key: value`` in the first
column and runs until the next such line, continuation lines included (indented or
not, as long as they do not look like a field). Each field is then parsed as YAML on
its own, so a broken description spoils neither ``tools`` nor a ``permission`` map;
a field YAML still rejects is taken as text (a ``- item`` block as a list).

Lines that start a field are lowercase keys (``name``, ``permissionMode``, ``x-y``);
``Context:``, ``user:`` and ``assistant:`` in a description's dialogue examples are
text, not fields.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from durable_subagents.runtime._lazy import imported

__all__ = ["FrontMatter", "FrontMatterError", "parse_front_matter"]

_OPEN = re.compile(r"^---[ \t]*$")
_CLOSE = re.compile(r"^-{3,}[ \t]*$")  # some files close with a longer rule of dashes
_KEY = re.compile(r"^([a-z_][A-Za-z0-9_.-]*)[ \t]*:(?:[ \t]+(.*))?$")
_KEY_ANYWHERE = re.compile(r"^[\"']?([^\s\"':#][^:]*?)[\"']?[ \t]*:(?:[ \t]|$)")
_DIALOGUE = {
    "user", "assistant", "human", "ai", "claude", "system", "context", "commentary",
    "example", "examples",
}  # fmt: skip
"""Labels of example dialogues in descriptions: text there, never fields."""
_BLOCK_INDICATOR = re.compile(r"^[|>][+-]?[0-9]?$")


class FrontMatterError(Exception):
    """The file cannot be read as front matter and body; ``line`` is where (1-based)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


@dataclass
class FrontMatter:
    """The fields of a file's front matter, the line each is on, and the body."""

    fields: dict[str, Any]
    body: str
    lines: dict[str, int] = field(default_factory=dict)
    """File line (1-based) of each top-level field."""
    end_line: int = 1
    """Line of the closing ``---``."""
    strict: bool = True
    """Whether the block was valid YAML (False: it was read field by field)."""

    def line(self, key: str) -> int:
        """The line of ``key``, or of the opening ``---`` when the field is absent."""
        return self.lines.get(key, 1)


def parse_front_matter(data: bytes) -> FrontMatter:
    """Split a Markdown file into its front matter fields and its body.

    Args:
        data: The file's bytes (UTF-8, with or without a byte order mark; LF or CRLF).

    Returns:
        The fields, their lines and the body (stripped).

    Raises:
        FrontMatterError: Not UTF-8 text, no ``---`` block at the top, a block never
            closed, or one with no ``key: value`` field; ``line`` says where.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise FrontMatterError(
            line, f"is not UTF-8 text (byte {err.start}); save it as UTF-8"
        ) from None
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise FrontMatterError(1, "is empty; an agent file starts with front matter")
    lines = text.split("\n")
    if not _OPEN.match(lines[0]):
        raise FrontMatterError(
            1,
            "has no front matter; start the file with a '---' line, the fields "
            "(name, description, ...), then another '---' line",
        )
    end = next((i for i in range(1, len(lines)) if _CLOSE.match(lines[i])), None)
    if end is None:
        raise FrontMatterError(
            1, "opens its front matter with '---' but never closes it; add a '---' line"
        )
    block = lines[1:end]
    body = "\n".join(lines[end + 1 :]).strip()
    # PyYAML is imported with the first agent file read (see ``_lazy``), not by every
    # client.
    yaml = imported("yaml")
    try:
        parsed = yaml.safe_load("\n".join(block))
    except yaml.YAMLError:
        parsed = _UNPARSED
    if parsed is None and not any(s.strip() and not s.lstrip().startswith("#") for s in block):
        return FrontMatter({}, body, {}, end + 1)
    if isinstance(parsed, dict):
        fields = {str(k): v for k, v in parsed.items()}
        return FrontMatter(fields, body, _key_lines(block), end + 1)
    fields, key_lines = _field_by_field(block)
    return FrontMatter(fields, body, key_lines, end + 1, strict=False)


_UNPARSED = object()


def _key_lines(block: list[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for i, line in enumerate(block):
        match = _KEY_ANYWHERE.match(line)
        if match:
            found.setdefault(match.group(1), i + 2)
    return found


def _field_by_field(block: list[str]) -> tuple[dict[str, Any], dict[str, int]]:
    """Fields of a block YAML rejected, each parsed on its own (see module docstring)."""
    chunks: list[tuple[str, int, list[str]]] = []
    for i, line in enumerate(block):
        match = _KEY.match(line)
        if match and match.group(1).lower() not in _DIALOGUE:
            chunks.append((match.group(1), i + 2, [line]))
        elif chunks:
            chunks[-1][2].append(line)
        elif line.strip() and not line.lstrip().startswith("#"):
            raise FrontMatterError(
                i + 2,
                f"front matter line {line.strip()[:40]!r} is not a 'key: value' field",
            )
    if not chunks:
        raise FrontMatterError(2, "front matter has no 'key: value' fields")
    fields: dict[str, Any] = {}
    lines: dict[str, int] = {}
    for key, line_no, chunk in chunks:
        fields[key] = _field_value(key, chunk)
        lines.setdefault(key, line_no)
    return fields, lines


def _field_value(key: str, chunk: list[str]) -> Any:
    yaml = imported("yaml")
    try:
        parsed = yaml.safe_load("\n".join(chunk))
    except yaml.YAMLError:
        parsed = None
    if isinstance(parsed, dict) and list(parsed) == [key]:
        return parsed[key]
    first = chunk[0].split(":", 1)[1].strip()
    rest = _dedent(chunk[1:])
    items = [s.strip() for s in rest if s.strip()]
    if not first and items and all(s.startswith("- ") or s == "-" for s in items):
        return [_unquote(s[1:].strip()) for s in items]
    if _BLOCK_INDICATOR.match(first):
        first = ""
    text = "\n".join(([first] if first else []) + rest).strip()
    return _unquote(text)


def _dedent(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    indents = [len(s) - len(s.lstrip()) for s in lines if s.strip()]
    cut = min(indents, default=0)
    return [s[cut:].rstrip() for s in lines]


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text
