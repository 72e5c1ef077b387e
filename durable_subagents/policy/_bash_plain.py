"""The fast path of the bash reader: a plain line, split with string methods.

Most lines a model writes are plain: words, quotes without expansions, and ``;``,
``&&``, ``||``, ``|`` or newlines between commands. Such a line is split here (a 10 KB
line of 324 commands in about a millisecond, where the parser and the walk of its tree
take ten); anything else, down to one ``$``, backslash, bracket, redirection or
reserved word, is not plain and goes to the parser (``_shell``). A test checks on
generated lines that both ways agree wherever this one applies.
"""

from __future__ import annotations

import re

from durable_subagents.policy._bash_wrappers import SPECIAL_NAMES

__all__ = ["plain_commands"]

_MARK = "\x0e"
"""Where a quoted string starts and ends in a plain line."""
_HIDE = str.maketrans(" \t\n&|;", "\x02\x03\x04\x05\x06\x07")
_SHOW = str.maketrans("\x02\x03\x04\x05\x06\x07", " \t\n&|;")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x0e\x10-\x1f\x7f]")
"""Control characters but the separator ``\\x0f`` (counted apart): the fast path uses
them as marks, so a quoted string with one is the parser's (outside quotes, no plain
line has them)."""
_WIDE_BLANK = re.compile(r"[\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")
"""Blanks beyond ASCII that ``str.split()`` would split a quoted string on."""
_QUOTED = re.compile(r"""('[^']*+'|"[^"$`\\!]*+")""")
"""A quoted string with nothing inside that the shell expands (or a double quote that
starts another kind, which stays in the line and makes it not plain)."""
_FLAT_LINE = re.compile(r"[A-Za-z0-9_./,:=+%@^*\x20\t\n;|&-]*+")
"""What a plain line holds outside its quoted strings: inert characters, blanks and
the characters of ``;``, ``&&``, ``||``, ``|`` (a lone ``&`` is caught later)."""
_OPERATOR_MARKS = (
    ("&&", "\x00&"),
    ("||", "\x00o"),
    ("|", "\x00|"),
    (";", "\x00;"),
    ("\n", "\x00\n"),
)
"""Each operator of a plain line, and what marks it for one ``split``: NUL, then a
character that stands for it (``||`` before ``|``, so that it is one operator)."""
_COMMENTS = re.compile(r"""('[^']*'|"[^"]*")|(?<![^ \t\n;|&])#[^\n]*""")
_TEST_OPERATOR = re.compile(r"(?<![^ \t\n;|&])==")
_NOT_PLAIN_FIRST_WORDS = {
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case",
    "esac", "function", "select", "time", "coproc", "in",
}  # fmt: skip
"""Reserved words: the parser's to read."""
_NOT_PLAIN_FIRST = re.compile(
    "^-|^(?:export|declare|local|readonly|typeset|unset)|[=+%@" + _MARK + "]"
)
"""In a command's name: a declaration builtin (or a word the grammar reads as one, such
as ``unsetenv``), an assignment, a quoted string, or what the grammar misreads."""


def plain_commands(line: str) -> tuple[list[list[str]], set[str]] | None:
    """The commands of a plain line, and which of their names run other commands.

    None if the line is not plain (see the module docstring).

    Quoted strings are put back without their quotes, between two marks and with their
    blanks and operator characters hidden (as control characters no plain line holds):
    the line then holds only words, blanks and operators, and string methods split it.
    """
    if "==" in line and _TEST_OPERATOR.search(line):
        return None
    if "#" in line:
        line = _COMMENTS.sub(_keep_quoted, line)
    if "'" in line or '"' in line:
        parts = _QUOTED.split(line)
        strings = parts[1::2]
        if not _FLAT_LINE.fullmatch("".join(parts[0::2])):
            return None
        hidden = "\x0f".join([q[1:-1] for q in strings])
        if "$(" in hidden or "`" in hidden:
            return None  # code in a string: the parser's to judge
        if (
            _CONTROL.search(hidden)
            or hidden.count("\x0f") != len(strings) - 1
            or (not hidden.isascii() and _WIDE_BLANK.search(hidden))
        ):
            return None
        hidden = hidden.translate(_HIDE)
        parts[1::2] = (_MARK + hidden.replace("\x0f", _MARK + "\x0f" + _MARK) + _MARK).split("\x0f")
        line = "".join(parts)
    elif not _FLAT_LINE.fullmatch(line):
        return None
    for op, mark in _OPERATOR_MARKS:
        if op in line:
            line = line.replace(op, mark)
    pieces = line.split("\x00")  # each piece after the first: its operator, its command
    commands: list[list[str]] = []
    quoted: list[int] = []  # which commands have quoted strings
    for i, piece in enumerate(pieces):
        segment = piece[1:] if i else piece
        words = segment.split()
        if words:
            if "&" in segment:
                return None  # a background ``&`` or a ``|&``
            if _MARK in segment:
                quoted.append(len(commands))
            commands.append(words)
        elif (piece[0] if i else ";") not in ";\n" or (
            i + 1 < len(pieces) and pieces[i + 1][0] != "\n"
        ):
            return None  # an operator with no command before it, or a line ending in one
    firsts = {words[0] for words in commands}  # as written: a quoted one has its marks
    if any(_NOT_PLAIN_FIRST.search(w) or w in _NOT_PLAIN_FIRST_WORDS for w in firsts):
        return None
    if quoted:
        shown = "\x0f".join(["\x01".join(commands[k]) for k in quoted])
        shown = shown.translate(_SHOW).replace(_MARK, "")
        for k, text in zip(quoted, shown.split("\x0f"), strict=True):
            commands[k] = text.split("\x01")
    special = {w for w in firsts if w.rpartition("/")[2] in SPECIAL_NAMES or "*" in w}
    return commands, special


def _keep_quoted(match: re.Match[str]) -> str:
    return match.group(1) or ""
