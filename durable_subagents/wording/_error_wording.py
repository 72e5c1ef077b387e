"""An error message in the words of whoever reads it: a shell user, a model, an HTTP client.

The library's messages name its Python API (``max_turns``, ``check_task``), which is
what a Python caller types. ``subagents`` prints them with the flag and command a
shell user types instead, the orchestrator tools with the tool and argument names
the model calls, and the inbox's API with its endpoints.
"""

from __future__ import annotations

import re
from urllib.parse import quote

__all__ = ["for_http", "for_model", "for_shell"]

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

_HTTP = {
    "check_task(task_id, wait=True)": "GET /api/tasks/{task_id}",
    "check_task(wait=True)": "GET /api/tasks/{task_id}",
    # what an inbox caller reads before deciding: the pause, each call in full
    "check_task": "GET /api/tasks/{task_id}/pause",
    "list_tasks()": "GET /api/tasks",
    "send_input": "POST /api/tasks/{task_id}/input",
}


def _translator(terms: dict[str, str]) -> re.Pattern[str]:
    names = sorted(terms, key=len, reverse=True)  # the longest name first
    return re.compile("|".join(rf"(?<![\w-]){re.escape(n)}(?![\w(])" for n in names))


_SHELL_RE, _MODEL_RE, _HTTP_RE = _translator(_SHELL), _translator(_MODEL), _translator(_HTTP)


def for_shell(message: str) -> str:
    """The message with API names as ``subagents`` flags and commands."""
    return _SHELL_RE.sub(lambda m: _SHELL[m.group()], message)


def for_model(message: str) -> str:
    """The message with API names and shell commands as orchestrator tool names."""
    return _MODEL_RE.sub(lambda m: _MODEL[m.group()], message)


def for_http(message: str, task_id: str | None = None) -> str:
    """The message with API names as the inbox's HTTP endpoints.

    Args:
        message: A library error's message.
        task_id: The task of the request, put into the endpoints' paths (URL-quoted);
            None leaves ``{task_id}`` in them.
    """
    translated = _HTTP_RE.sub(lambda m: _HTTP[m.group()], message)
    if task_id is None:
        return translated
    return translated.replace("{task_id}", quote(task_id, safe=""))
