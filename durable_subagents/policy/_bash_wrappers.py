"""What a command runs besides itself: wrappers, shells and builtins that run code.

``env X=1 timeout 5 cmd`` runs ``cmd``, and a rule must judge ``cmd`` too: each wrapper's
options are read as GNU and bash read them (those taking an argument, those that do not),
so the command is found where it starts; where an option is not understood, any later
word may start it. Pure data and string work: the bash reader (``_shell``) calls it.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "CALLBACK_OPTIONS",
    "MAX_UNWRAPPED",
    "RUNS_A_LINE",
    "RUNS_ITS_ARGUMENTS",
    "SHELLS",
    "SPECIAL_NAMES",
    "WRAPPERS",
    "expands",
    "unwrap",
]

RUNS_ITS_ARGUMENTS = {
    "eval", "source", ".", "exec", "xargs", "command", "builtin", "trap",
    "alias", "coproc", "hash", "let", "compgen", "enable",
}  # fmt: skip
"""Builtins and programs whose arguments become a command: what they run is unknown.
(``alias x=...`` and ``hash -p /bin/rm ls`` change what a later name runs, ``let`` and
``compgen -W`` evaluate their words, ``enable -f`` loads code.)"""
SHELLS = {"bash", "sh", "zsh", "dash", "ksh", "fish", "busybox"}
WRAPPERS = {"env", "nohup", "nice", "time", "timeout", "stdbuf", "setsid", "sudo", "doas"}
SPECIAL_NAMES = RUNS_ITS_ARGUMENTS | SHELLS | WRAPPERS | {"find", "mapfile", "readarray"}
"""Commands that run other commands (wrappers such as ``env X=1 timeout 5 cmd``, whose
command is judged too), or whose words are code: a plain line hands them to _emit."""
MAX_UNWRAPPED = 16
CALLBACK_OPTIONS = {"mapfile", "readarray"}
"""Builtins whose ``-C`` option names code to run."""
RUNS_A_LINE = {"eval", "trap", "alias", *SHELLS}
"""Commands whose argument is a line of bash: its commands are judged too (unknown)."""


def expands(name: str) -> bool:
    """Whether a command's name holds a glob or a brace expansion.

    ``/bin/r?`` runs ``/bin/rm``, ``{rm,-rf,x}`` runs ``rm -rf x``.
    """
    if "*" in name or "?" in name:
        return True
    for start, end in (("[", "]"), ("{", "}")):
        first = name.find(start)
        if first != -1:
            last = name.rfind(end)
            if last > first and (start == "[" or "," in name[first:last] or ".." in name):
                return True
    return False


class _Options(NamedTuple):
    """What a wrapper's options are: those taking an argument, those that do not."""

    short_arg: str = ""
    short_flag: str = ""
    long_arg: frozenset[str] = frozenset()
    long_flag: frozenset[str] = frozenset()
    operands: int = 0  # words before the command (``timeout``'s duration)
    attached: str = ""  # short options whose argument may only be attached (``-i{}``)


_OPTIONS: dict[str, _Options] = {
    "env": _Options(
        "uC", "i0v",
        frozenset({"--unset", "--chdir"}),
        frozenset({"--ignore-environment", "--null", "--debug", "--block-signal",
                   "--default-signal", "--ignore-signal", "--list-signal-handling"}),
    ),
    "nice": _Options("n", "", frozenset({"--adjustment"})),
    "timeout": _Options(
        "ks", "v", frozenset({"--kill-after", "--signal"}),
        frozenset({"--foreground", "--preserve-status", "--verbose"}), operands=1,
    ),
    "nohup": _Options(),
    "stdbuf": _Options("ioe", "", frozenset({"--input", "--output", "--error"})),
    "setsid": _Options("", "cfw", frozenset(), frozenset({"--ctty", "--fork", "--wait"})),
    "time": _Options(
        "fo", "apvq", frozenset({"--format", "--output"}),
        frozenset({"--append", "--portability", "--verbose", "--quiet"}),
    ),
    "sudo": _Options(
        "CDghpRrtTUu", "AbEHnPSBkN",
        frozenset({"--close-from", "--chdir", "--group", "--host", "--prompt", "--chroot",
                   "--role", "--type", "--command-timeout", "--other-user", "--user"}),
        frozenset({"--askpass", "--background", "--preserve-env", "--set-home",
                   "--non-interactive", "--preserve-groups", "--stdin", "--bell",
                   "--reset-timestamp", "--no-update"}),
    ),
    "doas": _Options("u", "n"),
    "command": _Options("", "pvV"),
    "exec": _Options("a", "cl"),
    "builtin": _Options(),
    "xargs": _Options(
        "adEILnPs", "0oprtx",
        frozenset({"--arg-file", "--delimiter", "--max-args", "--max-procs", "--max-chars",
                   "--process-slot-var"}),
        frozenset({"--null", "--open-tty", "--interactive", "--no-run-if-empty", "--verbose",
                   "--exit", "--show-limits", "--eof", "--replace", "--max-lines"}),
        attached="eil",
    ),
}  # fmt: skip
"""The options of each command that runs the rest of its words (GNU and bash's)."""


def unwrap(name: str, words: list[str]) -> tuple[list[list[str]], bool]:
    """The commands a wrapper runs, and whether its options were all understood.

    ``find``: the command of each ``-exec``, ``-execdir``, ``-ok`` and ``-okdir``.
    """
    if name == "find":
        found, i = [], 1
        while i < len(words):
            if words[i] in ("-exec", "-execdir", "-ok", "-okdir"):
                end = i + 1
                while end < len(words) and words[end] not in (";", "+"):
                    end += 1
                if end > i + 1:
                    found.append(words[i + 1 : end])
                i = end
            i += 1
        return found, True
    if name == "coproc":
        return [words[1:]] if len(words) > 1 else [], False  # ``coproc NAME cmd``
    spec = _OPTIONS.get(name)
    if spec is None:
        return [], True
    i = 1
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if name == "env" and (word == "-" or ("=" in word and not word.startswith("-"))):
            i += 1
            continue
        if word.startswith("--"):
            option, eq, _ = word.partition("=")
            if option in spec.long_flag:
                i += 1
            elif option in spec.long_arg:
                i += 1 if eq else 2
            else:
                return [words[i:]], False
            continue
        if not word.startswith("-") or word == "-":
            break
        if name == "nice" and word[1:].isdigit():
            i += 1
            continue
        for j, letter in enumerate(word[1:], start=2):
            if letter in spec.short_flag:
                continue
            if letter in spec.attached:
                break
            if letter in spec.short_arg:
                if j == len(word):
                    i += 1  # the next word is its argument
                break
            return [words[i:]], False
        i += 1
    i += spec.operands
    if spec.operands and i < len(words) and words[i] == "--":
        i += 1  # ``timeout 5 -- cmd`` fails to run ``--``; judging ``cmd`` is stricter
    if name == "xargs" and i >= len(words):
        return [], True  # ``echo``
    return ([words[i:]] if i < len(words) else []), True
