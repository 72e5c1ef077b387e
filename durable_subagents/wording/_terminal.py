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

__all__ = ["UNSAFE", "json_shown", "shown"]

UNSAFE = (
    "[\x00-\x08\x0b-\x1f\x7f-\x9f"  # C0 (but tab and newline), DEL, C1
    "\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff"  # bidi, zero-width, separators
    # invisible fillers and format characters: a soft hyphen, Hangul fillers, Mongolian
    # selectors, interlinear annotations; tags and variation selectors past the BMP
    # (text hidden in them reads as nothing)
    "\u00ad\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\uffa0\ufff9-\ufffb"
    "\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
)
"""The characters shown as escapes, as a regular expression's character class (the
inbox page's script applies the same class)."""
_UNSAFE = re.compile(UNSAFE)


def shown(text: str) -> str:
    """``text`` with control, bidi and invisible characters written as escapes."""
    return _UNSAFE.sub(_escape, text)


def json_shown(text: str) -> str:
    r"""JSON text with those characters as ``\uXXXX`` escapes: it parses to the same data.

    Only valid inside JSON strings, where ``json.dumps`` puts every such character.
    """
    return _UNSAFE.sub(_json_escape, text)


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON writes a character past the BMP as its UTF-16 pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
