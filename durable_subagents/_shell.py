"""What a bash command line will run: its simple commands, with quotes removed.

Permission rules for ``bash`` must judge what runs, not the raw string: ``git status;
rm -rf x`` is two commands, ``r''m`` is ``rm``, and ``$(printf rm)`` is a command
nobody can name before it runs. The line is parsed with tree-sitter's bash grammar
(the one Claude Code uses) into every simple command of its lists, pipelines,
subshells, substitutions, loops and functions. A command whose words cannot all be
known statically (an expansion, a substitution, ``eval``, ``bash -c``, a parse error)
is marked unknown: a rule can deny it or ask for it, never allow it.

Most lines a model writes are plain: words, quotes without expansions, and ``;``,
``&&``, ``||``, ``|`` or newlines between commands. Such a line is split with string
methods instead (a 10 KB line of 324 commands in about a millisecond, where the parser
and the walk of its tree take ten); anything else, down to one ``$``, backslash,
bracket, redirection or reserved word, goes to the parser. A test checks on generated
lines that both ways agree wherever the fast one applies.

Pure and deterministic: workflow code calls it.
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import re
from typing import NamedTuple

import tree_sitter
import tree_sitter_bash

__all__ = ["Command", "SimpleCommand", "command_words", "command_words_v1", "split_commands"]

_UNKNOWN = "\x00"
"""Stands for a word nobody can know before the command runs."""

_RUNS_ITS_ARGUMENTS = {"eval", "source", ".", "exec", "xargs", "command", "builtin", "trap"}
"""Builtins and programs whose arguments become a command: what they run is unknown."""
_SHELLS = {"bash", "sh", "zsh", "dash", "ksh", "fish", "busybox"}
_WRAPPERS = {"env", "nohup", "nice", "time", "timeout", "stdbuf", "setsid", "sudo", "doas"}
"""Prefixes that run the rest of their words as a command: that command is judged too."""
_SPECIAL_NAMES = _RUNS_ITS_ARGUMENTS | _SHELLS | _WRAPPERS
_DOUBLE_QUOTED_ESCAPES = '$`"\\\n'
"""What a backslash escapes inside double quotes."""
_SKIP_WORD_NODES = {"comment", "heredoc_body", "heredoc_end", "heredoc_start", "file_redirect"}
_BEYOND_BMP = re.compile("[\U00010000-\U0010ffff]")
"""With a ``{`` anywhere before it, a character beyond the BMP (four bytes in UTF-8):
tree-sitter-bash 0.25 reads past its buffer on such lines and the process dies with
SIGSEGV (tree-sitter/tree-sitter-bash#337, open). The parser never sees them; they are
unknown, as a line that does not parse is."""

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


class SimpleCommand(NamedTuple):
    """One command of a line, as a rule sees it.

    Attributes:
        words: The command's words with quotes and escapes removed; a word that cannot
            be known statically is a NUL character.
        known: Whether every word (and so what runs) is known before running.
    """

    words: tuple[str, ...]
    known: bool

    @property
    def text(self) -> str:
        """The words joined by spaces: what rule patterns are matched against."""
        return " ".join(self.words)


@functools.cache
def _parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


Command = tuple[tuple[str, ...], bool]
"""A simple command as ``(words, known)``: a :class:`SimpleCommand` without its names."""


def split_commands(line: str) -> list[SimpleCommand]:
    """Every simple command ``line`` can run, in source order.

    A line that does not parse yields one unknown command (the whole line), so a
    rule can never allow what could not be read.
    """
    return [SimpleCommand(*command) for command in command_words(line)]


@functools.lru_cache(maxsize=64)
def command_words(line: str) -> tuple[Command, ...]:
    """:func:`split_commands` as plain tuples (what rules read, many times a call).

    Cached: one call is judged against the agent's rules and the spawn's.
    """
    plain = _split_plain(line)
    return plain if plain is not None else _parse(line)


def command_words_v1(line: str) -> tuple[Command, ...]:
    """What :func:`command_words` gave before lines were checked to be read apart.

    For replaying runs that started then: the parser alone, which reads
    ``a | b | c<newline>d`` with ``c d`` as one command.
    """
    token = _ONE_COMMAND_PER_LINE.set(False)
    try:
        return _parse(line)
    finally:
        _ONE_COMMAND_PER_LINE.reset(token)


def _split_plain(line: str) -> tuple[Command, ...] | None:
    """The commands of a plain line (see the module docstring), or None if not plain.

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
    found: list[Command] = []
    special = {w for w in firsts if w.rpartition("/")[2] in _SPECIAL_NAMES}
    for words in commands:
        if words[0] in special:
            _emit(words, True, found)
        else:
            found.append((tuple(words), True))
    return tuple(found)


def _keep_quoted(match: re.Match[str]) -> str:
    return match.group(1) or ""


def _parse(line: str) -> tuple[Command, ...]:
    unknown: tuple[Command, ...] = (((line,), False),)
    if not line.isascii() and "{" in line and _BEYOND_BMP.search(line, line.index("{")):
        return unknown
    tree = _parser().parse(line.encode("utf-8", errors="surrogateescape"))
    root = tree.root_node
    if root.has_error:
        return unknown
    found: list[Command] = []
    try:
        _walk(root, found)
    except RecursionError:  # substitutions nested hundreds deep: nobody can judge that
        return unknown
    except _Misparsed:
        return unknown
    return tuple(found)


_ONE_COMMAND_PER_LINE = contextvars.ContextVar("one_command_per_line", default=True)


class _Misparsed(Exception):
    """The parser read a line break as a space between one command's words."""


def _check_one_line(node: tree_sitter.Node) -> None:
    """Raise _Misparsed if a line break (not escaped) separates two of a command's words.

    tree-sitter-bash reads ``a | b | c<newline>d && e`` with ``c d`` as one command; a
    rule allowing ``c *`` would then allow ``d``. No simple command spans lines in bash.
    """
    text = node.text or b""
    if b"\n" not in text or not _ONE_COMMAND_PER_LINE.get():
        return
    start = node.start_byte
    children = node.children
    for before, after in itertools.pairwise(children):
        gap = text[before.end_byte - start : after.start_byte - start]
        if b"\n" in gap.replace(b"\\\n", b""):
            raise _Misparsed


def _walk(node: tree_sitter.Node, found: list[Command]) -> None:
    """Every command under ``node``, in source order (iterative: lists nest deeply)."""
    stack = [node]
    while stack:
        node = stack.pop()
        if node.type == "command":
            _command(node, found)
            continue
        if node.type in ("declaration_command", "unset_command"):
            _declaration(node, found)
            continue
        stack.extend(reversed(node.children))


def _declaration(node: tree_sitter.Node, found: list[Command]) -> None:
    _check_one_line(node)
    words: list[str] = []
    known = True
    for child in node.named_children:
        word, ok = _word(child, found)
        words.append(word)
        known = known and ok
    first = (node.children[0].text or b"").decode(errors="replace") if node.children else ""
    found.append(((first, *words), known))


def _walk_inner(node: tree_sitter.Node, found: list[Command]) -> None:
    for child in node.named_children:
        _walk(child, found)


def _command(node: tree_sitter.Node, found: list[Command]) -> None:
    _check_one_line(node)
    words: list[str] = []
    known = True
    for child in node.named_children:
        if child.type == "variable_assignment":
            # ``X=1 cmd``: the assignment changes cmd's environment; its value may run
            # substitutions, which are commands of their own.
            _, ok = _word(child, found)
            known = known and ok
            continue
        if child.type in ("file_redirect", "herestring_redirect", "heredoc_redirect"):
            for part in child.named_children:
                _word(part, found)  # substitutions inside still run
            continue
        if child.type == "command_name":
            child = child.named_children[0] if child.named_children else child
        word, ok = _word(child, found)
        words.append(word)
        known = known and ok
    if words:
        _emit(words, known, found)


def _emit(words: list[str], known: bool, found: list[Command]) -> None:
    """Add the command ``words`` and, for a wrapper, the command it runs."""
    name = words[0].rsplit("/", 1)[-1]
    if name in _RUNS_ITS_ARGUMENTS or (name in _SHELLS and "-c" in words[1:]):
        known = False
    found.append((tuple(words), known))
    if name in _WRAPPERS:
        inner = _unwrap(words)
        if inner:
            found.append((tuple(inner), known and _UNKNOWN not in inner))


def _unwrap(words: list[str]) -> list[str]:
    """The command a wrapper (``env X=1 cmd``, ``timeout 5 cmd``) runs, else []."""
    rest = list(words)
    unwrapped = False
    while rest and rest[0].rsplit("/", 1)[-1] in _WRAPPERS:
        wrapper = rest.pop(0).rsplit("/", 1)[-1]
        unwrapped = True
        while rest and (rest[0].startswith("-") or (wrapper == "env" and "=" in rest[0])):
            rest.pop(0)
        if wrapper == "timeout" and rest:
            rest.pop(0)  # the duration
    return rest if unwrapped else []


def _word(node: tree_sitter.Node, found: list[Command]) -> tuple[str, bool]:
    """The literal value of a word node, and whether it is known statically."""
    kind = node.type
    text = node.text.decode("utf-8", errors="surrogateescape") if node.text else ""
    if kind in ("word", "number", "command_name"):
        if node.named_children:
            return _concat(node.named_children, found)
        return _unescape(text), True
    if kind == "raw_string":
        return text[1:-1], True
    if kind == "string":
        parts = [c for c in node.named_children if c.type != "string_content"]
        if parts:
            for part in parts:
                _word(part, found)
            return _UNKNOWN, False
        return _unescape(text[1:-1], _DOUBLE_QUOTED_ESCAPES), True
    if kind == "ansi_c_string":
        return _UNKNOWN, False
    if kind == "concatenation":
        return _concat(node.named_children, found)
    if kind in ("command_substitution", "process_substitution"):
        _walk_inner(node, found)
        return _UNKNOWN, False
    if kind == "variable_assignment":
        ok = True
        for child in node.named_children[1:]:
            _, child_ok = _word(child, found)
            ok = ok and child_ok
        return text, ok
    if kind in _SKIP_WORD_NODES:
        return "", True
    # Expansions ($X, ${X}, $((1+1))), arithmetic, brace expressions, globs in
    # extglob syntax: nothing a rule can rely on. Substitutions inside still run.
    for child in node.named_children:
        _word(child, found)
    return _UNKNOWN, False


def _concat(nodes: list[tree_sitter.Node], found: list[Command]) -> tuple[str, bool]:
    out, known = [], True
    for child in nodes:
        word, ok = _word(child, found)
        out.append(word)
        known = known and ok
    return ("".join(out) if known else _UNKNOWN), known


def _unescape(text: str, escapable: str | None = None) -> str:
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
