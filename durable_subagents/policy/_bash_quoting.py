"""Quoting in a word's text, as bash reads it: pure string work of the bash reader.

A backslash escapes the next character (inside double quotes, only a few), a line
continuation vanishes, a bare line break ends a command, and an array subscript can
hold a substitution that a builtin runs.
"""

from __future__ import annotations

__all__ = ["DOUBLE_QUOTED_ESCAPES", "bare_newline", "runs_code", "unescape"]

DOUBLE_QUOTED_ESCAPES = '$`"\\\n'
"""What a backslash escapes inside double quotes."""


def runs_code(word: str) -> bool:
    """Whether a word's value (quotes removed) is code some builtin may run.

    An array subscript holding a substitution (``a[$(cmd)]``): builtins that take a
    variable name (``test -v``, ``printf -v``, ``read``, ``declare``) evaluate it,
    quoted or not. (String methods, not a regular expression: linear on any word.)
    """
    if "[" not in word:
        return False
    for part in word.split("[")[1:]:
        subscript = part.partition("]")[0]
        if "$(" in subscript or "`" in subscript:
            return True
    return False


def bare_newline(text: str) -> bool:
    """Whether an unquoted word's text holds a line break that is not escaped."""
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "\n":
            return True
        i += 1
    return False


def unescape(text: str, escapable: str | None = None) -> str:
    """Remove quoting backslashes; a line continuation (backslash, newline) vanishes.

    Unquoted (``escapable`` None) a backslash keeps any next character literally;
    inside double quotes it escapes only the characters in ``escapable``.
    """
    if "\\" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        nxt = text[i + 1] if i + 1 < len(text) else ""
        if text[i] == "\\" and nxt and (escapable is None or nxt in escapable):
            if nxt != "\n":
                out.append(nxt)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)
