"""An error message in the words of whoever reads it: a shell user, or a model.

The library's messages name its Python API (``max_turns``, ``check_task``), which is
what a Python caller types. ``subagents`` prints them with the flag and command a
shell user types instead, and the orchestrator tools with the tool and argument names
the model calls.
"""

from __future__ import annotations

import re

__all__ = ["for_model", "for_shell"]

_SHELL = {
    "max_turns": "--max-turns",
    "permission_mode": "--permission-mode",
    "approval_timeout": "--approval-timeout",
    "time_limit": "--time-limit",
    "token_budget": "--token-budget",
    "disallowed_tools": "--disallow",
    "task_id": "--task-id",
    "call_ids": "the call ids",
    "check_task(wait=True)": "`subagents check --wait`",
    "check_task": "`subagents check`",
    "list_tasks()": "`subagents ls`",
    "send_input": "`subagents send`",
    "spawn_task": "`subagents spawn`",
}
_MODEL = {
    "check_task(wait=True)": "check_subagent",
    "check_task": "check_subagent",
    "list_tasks()": "list_subagents",
    "`subagents ls`": "list_subagents",
    "`subagents check`": "check_subagent",
    "send_input": "send_subagent_input",
    "spawn_task": "spawn_subagent",
}


def _translator(terms: dict[str, str]) -> re.Pattern[str]:
    names = sorted(terms, key=len, reverse=True)  # the longest name first
    return re.compile("|".join(rf"(?<![\w-]){re.escape(n)}(?![\w(])" for n in names))


_SHELL_RE, _MODEL_RE = _translator(_SHELL), _translator(_MODEL)


def for_shell(message: str) -> str:
    """The message with API names as ``subagents`` flags and commands."""
    return _SHELL_RE.sub(lambda m: _SHELL[m.group()], message)


def for_model(message: str) -> str:
    """The message with API names and shell commands as orchestrator tool names."""
    return _MODEL_RE.sub(lambda m: _MODEL[m.group()], message)
