"""What a bash command line will run: its simple commands, with quotes removed.

Permission rules for ``bash`` must judge what runs, not the raw string: ``git status;
rm -rf x`` is two commands, ``r''m`` is ``rm``, and ``$(printf rm)`` is a command
nobody can name before it runs. The line is parsed with tree-sitter's bash grammar
(the one Claude Code uses) into every simple command of its lists, pipelines,
subshells, substitutions, loops and functions. A command whose words cannot all be
known statically (an expansion, a substitution, ``eval``, ``bash -c``, a parse error)
is marked unknown: a rule can deny it or ask for it, never allow it.

Most lines a model writes are plain, and are split with string methods instead
(``_bash_plain``, ten times faster); what a wrapper or a shell runs is read by
``_bash_wrappers``.

Pure and deterministic: workflow code calls it.
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import re
from typing import TYPE_CHECKING, NamedTuple

from durable_subagents.policy._bash_plain import plain_commands
from durable_subagents.policy._bash_quoting import (
    DOUBLE_QUOTED_ESCAPES,
    bare_newline,
    runs_code,
    unescape,
)
from durable_subagents.policy._bash_wrappers import (
    CALLBACK_OPTIONS,
    MAX_UNWRAPPED,
    RUNS_A_LINE,
    RUNS_ITS_ARGUMENTS,
    SHELLS,
    expands,
    unwrap,
)
from durable_subagents.runtime._lazy import imported

if TYPE_CHECKING:
    import tree_sitter

__all__ = [
    "Command",
    "SimpleCommand",
    "command_words",
    "split_commands",
]

_UNKNOWN = "\x00"
"""Stands for a word nobody can know before the command runs."""

_SKIP_WORD_NODES = {"comment", "heredoc_body", "heredoc_end", "heredoc_start", "file_redirect"}
_BEYOND_BMP = re.compile("[\U00010000-\U0010ffff]")
"""With a ``{`` anywhere before it, a character beyond the BMP (four bytes in UTF-8):
tree-sitter-bash 0.25 reads past its buffer on such lines and the process dies with
SIGSEGV (tree-sitter/tree-sitter-bash#337, open). The parser never sees them; they are
unknown, as a line that does not parse is."""


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
    # Imported at the first line that needs the parser (see ``_lazy``): a client never does.
    tree_sitter = imported("tree_sitter")
    return tree_sitter.Parser(tree_sitter.Language(imported("tree_sitter_bash").language()))


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


def _split_plain(line: str) -> tuple[Command, ...] | None:
    """The commands of a plain line (see ``_bash_plain``), or None if not plain."""
    plain = plain_commands(line)
    if plain is None:
        return None
    commands, special = plain
    found: list[Command] = []
    for words in commands:
        if words[0] in special:
            _emit(words, True, found)
        else:
            found.append((tuple(words), True))
    return tuple(found)


def _parse(line: str) -> tuple[Command, ...]:
    unknown: tuple[Command, ...] = (((line,), False),)
    if not line.isascii() and "{" in line and _BEYOND_BMP.search(line, line.index("{")):
        return unknown
    if "\v" in line or "\f" in line or "\r" in line:
        return unknown  # blanks to the grammar, parts of a word to bash
    source = line.encode("utf-8", errors="surrogateescape")
    for _ in range(_MAX_JOINS):
        tree = _parser().parse(source)
        root = tree.root_node
        if root.has_error:
            return unknown
        if b"#" in source and b"\\" in source and _word_comment(root, source):
            return unknown
        found: list[Command] = []
        try:
            _walk(root, found)
        except RecursionError:  # substitutions nested hundreds deep: nobody can judge that
            return unknown
        except _Joined as joined:
            # ``r\<newline>m`` is ``rm`` to bash, two words to the grammar: read it again
            # without that line continuation.
            source = source[: joined.at] + source[joined.at + 2 :]
            continue
        except _Misparsed:
            return unknown
        return tuple(found)
    return unknown


_MAX_JOINS = 8
_STARTS_A_WORD = frozenset(b" \t\n;&|()<>")


def _word_comment(root: tree_sitter.Node, source: bytes) -> bool:
    r"""Whether the grammar took a ``#`` inside a word for a comment.

    In ``ls; \ #;cmd`` the escaped blank starts a word, so ``#`` is no comment to bash,
    which runs ``cmd``; the grammar reads ``#;cmd`` as a comment.
    """
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "comment":
            start = node.start_byte
            before = source[start - 1] if start else ord("\n")
            if before not in _STARTS_A_WORD or source[max(start - 2, 0) : start - 1] == b"\\":
                return True
            continue
        stack.extend(node.children)
    return False


class _Misparsed(Exception):
    """The parser read a line break as a space between one command's words."""


class _Joined(_Misparsed):
    """A line continuation at byte ``at`` joins two words the parser read apart."""

    def __init__(self, at: int) -> None:
        super().__init__(at)
        self.at = at


def _check_one_line(node: tree_sitter.Node) -> None:
    r"""Raise _Misparsed if a line break (not escaped) separates two of a command's words.

    tree-sitter-bash reads ``a | b | c<newline>d && e`` with ``c d`` as one command; a
    rule allowing ``c *`` would then allow ``d``. No simple command spans lines in bash.
    A line continuation with no blank around it joins two words in bash (``r\<newline>m``
    is ``rm``), which the grammar reads apart: :class:`_Joined` says where.
    """
    text = node.text or b""
    if b"\n" not in text:
        return
    start = node.start_byte
    children = node.children
    for before, after in itertools.pairwise(children):
        gap = text[before.end_byte - start : after.start_byte - start]
        if b"\n" in gap.replace(b"\\\n", b""):
            raise _Misparsed
        if gap == b"\\\n":
            raise _Joined(before.end_byte)


def _walk(node: tree_sitter.Node, found: list[Command]) -> None:
    """Every command under ``node``, in source order (iterative: lists nest deeply)."""
    stack = [node]
    while stack:
        node = stack.pop()
        kind = node.type
        if kind == "command":
            _command(node, found)
            continue
        if kind in ("declaration_command", "unset_command"):
            _declaration(node, found)
            continue
        if kind == "redirected_statement":
            body = node.child_by_field_name("body")
            extra = [a for r in node.children_by_field_name("redirect") for a in _hidden(r)]
            if extra:
                # ``rm </dev/null -rf x``: the grammar gives ``-rf x`` to the
                # redirection; bash, to the command.
                if body is None or body.type != "command":
                    raise _Misparsed
                _command(body, found, extra)
                stack.extend(reversed([c for c in node.children if c != body]))
                continue
        if kind == "file_redirect":
            _redirect(node, found)
            continue
        if kind == "heredoc_redirect":
            _check_heredoc(node)
            hidden = _hidden(node)
            stack.extend(reversed([c for c in node.children if c not in hidden]))
            continue
        if kind == "variable_assignment":  # ``PATH=x`` alone: it changes what runs next
            word, ok = _assignment(node, found)
            found.append(((word,), ok))
            continue
        if kind == "test_command":
            _test(node, found)
            continue
        if kind == "compound_statement" and node.text == b"{}":
            found.append((("{}",), True))  # to bash, a command named ``{}``
            continue
        if kind == "c_style_for_statement" or (
            kind == "compound_statement" and node.children and node.children[0].type == "(("
        ):
            _arithmetic(node, found, stack)
            continue
        stack.extend(reversed(node.children))


_WRITES = {">", ">>", "&>", "&>>", ">|", ">&", "<>"}
_HARMLESS_TARGETS = {"/dev/null", "/dev/stdout", "/dev/stderr"}


def _check_heredoc(node: tree_sitter.Node) -> None:
    """Raise _Misparsed for a here-document whose body runs backquotes.

    Bash runs ```cmd``` in the body of ``<<EOF`` (not ``<<'EOF'``); the grammar reads
    it as text, where it does find ``$(cmd)``.
    """
    start = node.child(0)
    if start is not None and start.type in ("<<", "<<-"):
        start = node.child(1)
    delimiter = (start.text or b"") if start is not None else b""
    if any(c in delimiter for c in b"'\"\\"):
        return  # a quoted delimiter: the body is text
    for part in node.children:
        if part.type == "heredoc_body" and b"`" in (part.text or b""):
            raise _Misparsed


def _hidden(redirect: tree_sitter.Node) -> list[tree_sitter.Node]:
    """Words the grammar puts in a redirection that bash gives to the command.

    ``cmd <f a b`` and ``cmd <<EOF a b``: ``a b`` are ``cmd``'s arguments.
    """
    if redirect.type == "file_redirect":
        return redirect.children_by_field_name("destination")[1:]
    if redirect.type == "heredoc_redirect":
        return redirect.children_by_field_name("argument")
    return []


def _redirect(node: tree_sitter.Node, found: list[Command]) -> None:
    """An output redirection to a file, as a command of its own: ``> path``.

    A rule that allows ``git status*`` never allowed ``git status > src/main.py``.
    Duplicating or closing a descriptor (``2>&1``, ``>&-``) and ``/dev/null`` are not.
    """
    operator = next((c.type for c in node.children if not c.is_named), "")
    destinations = node.children_by_field_name("destination")
    target = destinations[0] if destinations else None
    if target is None:
        return
    word, known = _word(target, found)
    if operator not in _WRITES or target.type == "process_substitution":
        return
    if operator == ">&" and (word.rstrip("-").isdigit() or word == "-"):
        return
    if operator == ">&" and ("$" in word or "`" in word):
        known = False  # bash expands a ``>&`` target again: ``>&'$(cmd)'`` runs cmd
    if known and word in _HARMLESS_TARGETS:
        return
    found.append(((operator, word), known))


_ARITHMETIC_TESTS = {"-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-v"}
"""``[[ ]]`` operators that evaluate their operands as arithmetic: ``a[$(cmd)]``, even
quoted, or a variable holding it, runs ``cmd``."""


def _test(node: tree_sitter.Node, found: list[Command]) -> None:
    """``[[ ... ]]`` as a command of its own, as ``[ ... ]`` is."""
    words: list[str] = []
    known = True
    stack = [node]
    while stack:
        part = stack.pop()
        if part.type in ("test_command", "binary_expression", "unary_expression") or (
            part.type in ("parenthesized_expression", "negated_expression")
        ):
            stack.extend(reversed(part.children))
        elif part.is_named and part.type not in ("test_operator", "extglob_pattern", "regex"):
            word, ok = _word(part, found)
            words.append(word)
            known = known and ok and not runs_code(word)
        else:
            words.append((part.text or b"").decode("utf-8", errors="surrogateescape"))
    known = known and not _ARITHMETIC_TESTS.intersection(words)
    found.append((tuple(words), known))


def _arithmetic(
    node: tree_sitter.Node, found: list[Command], stack: list[tree_sitter.Node]
) -> None:
    """``(( ... ))`` and ``for (( ... ))`` as a command that is never known.

    Arithmetic runs what a variable's value holds (``x='a[$(cmd)]'; (( x ))``).
    """
    body = None
    if node.type == "c_style_for_statement":
        body = node.child_by_field_name("body")
    text = (node.text or b"").decode("utf-8", errors="surrogateescape")
    if body is not None:
        text = text[: body.start_byte - node.start_byte]
    found.append(((text.strip(),), False))
    _substitutions(node, found, skip=body)
    if body is not None:
        stack.append(body)


def _substitutions(
    node: tree_sitter.Node, found: list[Command], skip: tree_sitter.Node | None = None
) -> None:
    """The commands of every substitution under ``node`` (but ``skip``)."""
    stack = [node]
    while stack:
        part = stack.pop()
        if skip is not None and part == skip:
            continue
        if part.type in ("command_substitution", "process_substitution"):
            _walk_inner(part, found)
            continue
        stack.extend(reversed(part.children))


def _assignment(node: tree_sitter.Node, found: list[Command]) -> tuple[str, bool]:
    """``NAME=value`` with the value's quotes removed, and whether it is known.

    A value holding ``$(`` or a backtick, even quoted, is unknown: ``PS4``, arithmetic
    and prompt expansion run it later.
    """
    name = node.child_by_field_name("name")
    named = True
    if name is not None and name.type != "variable_name":
        _, named = _word(name, found)  # ``a[$(cmd)]=1``: the subscript runs
    value = node.child_by_field_name("value")
    text = (node.text or b"").decode("utf-8", errors="surrogateescape")
    if value is None or not named:
        return text, named
    word, ok = _word(value, found)
    if ok:
        raw = text[: value.start_byte - node.start_byte] + word
        return raw, "$(" not in word and "`" not in word
    return text, False


def _declaration(node: tree_sitter.Node, found: list[Command]) -> None:
    _check_one_line(node)
    words: list[str] = []
    known = True
    for child in node.named_children:
        if child.type == "variable_assignment":
            word, ok = _assignment(child, found)
        else:
            word, ok = _word(child, found)
            ok = ok and not runs_code(word)
        words.append(word)
        known = known and ok
    first = (node.children[0].text or b"").decode(errors="replace") if node.children else ""
    found.append(((first, *words), known))


def _walk_inner(node: tree_sitter.Node, found: list[Command]) -> None:
    for child in node.named_children:
        _walk(child, found)


def _command(
    node: tree_sitter.Node, found: list[Command], extra: list[tree_sitter.Node] | None = None
) -> None:
    """One simple command; ``extra``: its arguments the grammar put in a redirection."""
    _check_one_line(node)
    prefix: list[str] = []
    words: list[str] = []
    known = True
    children = node.named_children
    hidden = [a for child in children for a in _hidden(child)]
    if hidden or extra:
        # The arguments a redirection holds (``</dev/null rm -rf x`` is fine; the
        # grammar reads ``rm -rf </dev/null x`` with ``x`` in the redirection).
        children = [c for c in children if c not in hidden] + hidden + (extra or [])
    for child in children:
        if child.type == "variable_assignment":
            # ``X=1 cmd``: the assignment changes cmd's environment (``GIT_CONFIG_*``,
            # ``LD_PRELOAD``): a rule sees it as part of the command. Its value may run
            # substitutions, which are commands of their own.
            word, ok = _assignment(child, found)
            prefix.append(word)
            known = known and ok
            continue
        if child.type == "file_redirect":
            _redirect(child, found)
            continue
        if child.type == "heredoc_redirect":
            _check_heredoc(child)
            for part in child.named_children:
                if part.type not in _SKIP_WORD_NODES and part not in hidden:
                    _walk(part, found)
            continue
        if child.type == "herestring_redirect":
            for part in child.named_children:
                _word(part, found)  # substitutions inside still run
            continue
        if child.type == "command_name":
            child = child.named_children[0] if child.named_children else child
        word, ok = _word(child, found)
        words.append(word)
        known = known and ok
    if words:
        _emit(words, known, found, prefix)
    elif prefix:
        found.append((tuple(prefix), known))


def _emit(
    words: list[str], known: bool, found: list[Command], prefix: list[str] | None = None
) -> None:
    """Add the command ``words`` (after its assignments ``prefix``) and what it runs.

    A wrapper's command is judged too (``timeout -s KILL 5 cmd``: ``cmd``), read option
    by option; where an option is not understood, every later word may start it.
    """
    for _ in range(MAX_UNWRAPPED):
        name = words[0].rsplit("/", 1)[-1]
        if (
            name in RUNS_ITS_ARGUMENTS
            or (name in SHELLS and "-c" in words[1:])
            or (name in CALLBACK_OPTIONS and any(w.startswith("-") and "C" in w for w in words[1:]))
            or expands(words[0])
            or any("[" in w and runs_code(w) for w in words)
        ):
            known = False
        found.append(((*prefix, *words) if prefix else tuple(words), known))
        prefix = None
        if name in RUNS_A_LINE:
            _emit_lines(name, words, found)
        inner, certain = unwrap(name, words)
        if name == "find":
            depth = _DEPTH.get()
            token = _DEPTH.set(depth + 1)
            try:
                for command in inner:
                    if depth < 3:
                        _emit(command, known, found)
                    else:
                        found.append((tuple(command), False))
            finally:
                _DEPTH.reset(token)
            return
        if not inner:
            return
        if not certain:
            # Options this reading does not know: the command may start at any word.
            for start in range(min(len(words), MAX_UNWRAPPED)):
                if start and not words[start].startswith("-"):
                    found.append((tuple(words[start:]), False))
            return
        words = inner[0]
    found.append((tuple(words), False))  # wrappers nested deeper than anyone writes


def _emit_lines(name: str, words: list[str], found: list[Command]) -> None:
    """The commands of the line ``eval``, ``trap``, ``alias`` or ``bash -c`` runs.

    They are unknown, but a deny rule still sees ``rm`` in ``eval 'rm -rf x'``.
    """
    operands = [w for w in words[1:] if not w.startswith(("-", "+"))]
    if name == "eval":
        lines = [" ".join(words[2:] if words[1:2] == ["--"] else words[1:])]
    elif name == "trap":
        lines = operands[:1]
    elif name == "alias":
        lines = [w.partition("=")[2] for w in operands if "=" in w]
    elif "-c" in words[1:]:
        lines = operands[:4]  # the line, or an option's argument before it
    else:
        return
    depth = _DEPTH.get()
    if depth >= 3:
        return
    token = _DEPTH.set(depth + 1)
    try:
        for line in lines:
            plain = _split_plain(line)
            for inner_words, _ in plain if plain is not None else _parse(line):
                found.append((inner_words, False))
    finally:
        _DEPTH.reset(token)


_DEPTH = contextvars.ContextVar("bash_line_depth", default=0)


def _word(node: tree_sitter.Node, found: list[Command]) -> tuple[str, bool]:
    """The literal value of a word node, and whether it is known statically."""
    kind = node.type
    text = node.text.decode("utf-8", errors="surrogateescape") if node.text else ""
    if kind in ("word", "number", "command_name"):
        if "\n" in text and bare_newline(text):
            raise _Misparsed  # ``ls<newline>\\touch x``: the grammar's word, two lines
        if node.named_children:
            return _concat(node.named_children, found)
        return unescape(text), True
    if kind == "raw_string":
        return text[1:-1], True
    if kind == "string":
        parts = [c for c in node.named_children if c.type != "string_content"]
        if parts:
            for part in parts:
                _word(part, found)
            return _UNKNOWN, False
        return unescape(text[1:-1], DOUBLE_QUOTED_ESCAPES), True
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
