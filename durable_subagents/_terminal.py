"""Text a model wrote, made safe to print on a person's terminal.

A subagent's answer, its live text and its tool arguments are chosen by a model that
reads untrusted input. Printed raw, an escape sequence could rewrite the screen (hide
a line, forge a prompt, set the clipboard), and a bidirectional override could make a
command awaiting approval read as another (``rm -rf ~`` shown as a harmless ``ls``).
Every such character is shown as its escape instead: visible, and, in JSON, the same
string once parsed.
"""

from __future__ import annotations

import re

__all__ = ["json_shown", "shown"]

_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f"  # C0 (but tab and newline), DEL, C1
    "\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]"  # bidi, zero-width, separators
)


def shown(text: str) -> str:
    """``text`` with control, bidi and invisible characters written as escapes."""
    return _UNSAFE.sub(_escape, text)


def json_shown(text: str) -> str:
    r"""JSON text with those characters as ``\uXXXX`` escapes: it parses to the same data.

    Only valid inside JSON strings, where ``json.dumps`` puts every such character.
    """
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
