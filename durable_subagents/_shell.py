"""What a bash command line will run: its simple commands, with quotes removed.

Permission rules for ``bash`` must judge what runs, not the raw string: ``git status;
rm -rf x`` is two commands, ``r''m`` is ``rm``, and ``$(printf rm)`` is a command
nobody can name before it runs. The line is parsed with tree-sitter's bash grammar
(the one Claude Code uses) into every simple command of its lists, pipelines,
subshells, substitutions, loops and functions. A command whose words cannot all be
known statically (an expansion, a substitution, ``eval``, ``bash -c``, a parse error)
is marked unknown: a rule can deny it or ask for it, never allow it.

Pure and deterministic: workflow code calls it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import tree_sitter
import tree_sitter_bash

__all__ = ["SimpleCommand", "split_commands"]

_UNKNOWN = "\x00"
"""Stands for a word nobody can know before the command runs."""

_RUNS_ITS_ARGUMENTS = {"eval", "source", ".", "exec", "xargs", "command", "builtin", "trap"}
"""Builtins and programs whose arguments become a command: what they run is unknown."""
_SHELLS = {"bash", "sh", "zsh", "dash", "ksh", "fish", "busybox"}
_WRAPPERS = {"env", "nohup", "nice", "time", "timeout", "stdbuf", "setsid", "sudo", "doas"}
"""Prefixes that run the rest of their words as a command: that command is judged too."""
_DOUBLE_QUOTED_ESCAPES = '$`"\\\n'
"""What a backslash escapes inside double quotes."""
_SKIP_WORD_NODES = {"comment", "heredoc_body", "heredoc_end", "heredoc_start", "file_redirect"}


@dataclass(frozen=True)
class SimpleCommand:
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


def split_commands(line: str) -> list[SimpleCommand]:
    """Every simple command ``line`` can run, in source order.

    A line that does not parse yields one unknown command (the whole line), so a
    rule can never allow what could not be read.
    """
    return list(_split(line))


@functools.lru_cache(maxsize=64)
def _split(line: str) -> tuple[SimpleCommand, ...]:
    """Cached: one call is judged against the agent's rules and the spawn's."""
    data = line.encode("utf-8", errors="surrogateescape")
    tree = _parser().parse(data)
    root = tree.root_node
    unknown = (SimpleCommand(words=(line,), known=False),)
    if root.has_error:
        return unknown
    found: list[SimpleCommand] = []
    try:
        _walk(root, found)
    except RecursionError:  # substitutions nested hundreds deep: nobody can judge that
        return unknown
    return tuple(found)


def _walk(node: tree_sitter.Node, found: list[SimpleCommand]) -> None:
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


def _declaration(node: tree_sitter.Node, found: list[SimpleCommand]) -> None:
    words: list[str] = []
    known = True
    for child in node.named_children:
        word, ok = _word(child, found)
        words.append(word)
        known = known and ok
    first = (node.children[0].text or b"").decode(errors="replace") if node.children else ""
    found.append(SimpleCommand(words=(first, *words), known=known))


def _walk_inner(node: tree_sitter.Node, found: list[SimpleCommand]) -> None:
    for child in node.named_children:
        _walk(child, found)


def _command(node: tree_sitter.Node, found: list[SimpleCommand]) -> None:
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
    if not words:
        return
    name = words[0].rsplit("/", 1)[-1]
    if name in _RUNS_ITS_ARGUMENTS or (name in _SHELLS and "-c" in words[1:]):
        known = False
    found.append(SimpleCommand(words=tuple(words), known=known))
    inner = _unwrap(words)
    if inner:
        found.append(SimpleCommand(words=tuple(inner), known=known and _UNKNOWN not in inner))


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


def _word(node: tree_sitter.Node, found: list[SimpleCommand]) -> tuple[str, bool]:
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


def _concat(nodes: list[tree_sitter.Node], found: list[SimpleCommand]) -> tuple[str, bool]:
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
