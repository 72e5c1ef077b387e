"""One agent file being read: its fields typed, each problem with its line, warnings kept.

The fields both formats share are read here too: our own model settings
(``reasoning_effort``, ``temperature``, ``max_output_tokens``) and sandbox fields
(``network``, ``env``, ``limits``, ``context_window``, ``on_interrupted``,
``activity_options``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from durable_subagents.agents._activity_options import agent_activity_options
from durable_subagents.agents._front_matter import (
    FrontMatter,
)
from durable_subagents.agents._spec import (
    MAX_OUTPUT_TOKENS,
    REASONING_EFFORTS,
    ToolLimits,
)
from durable_subagents.errors import InvalidRequest

__all__ = [
    "AgentFile",
    "AgentFileError",
    "hand_over_warnings",
    "model_settings",
    "sandbox_fields",
    "warn",
    "warn_unused",
]

logger = logging.getLogger("durable_subagents.agents._files")


T = TypeVar("T")


class AgentFileError(InvalidRequest):
    """An agent file that cannot be loaded; the message names the file and line.

    ``agent`` is the name the file would have given its agent (its ``name`` field, or
    its stem when that cannot be read).
    """

    def __init__(
        self,
        message: str,
        *,
        path: Path,
        line: int | None,
        agent: str,
        detail: str | None = None,
    ) -> None:
        super().__init__(message)
        self.path = path
        self.line = line
        self.agent = agent
        self.detail = detail or message
        """The problem without the file and line (``'maxTurns' must be ...``)."""


@dataclass
class AgentFile:
    """One agent file being read: where problems are, and where warnings go."""

    path: Path
    front: FrontMatter
    warnings: list[str]
    agent: str
    """The agent's name as far as it is known (the stem until ``name`` is read)."""

    @property
    def meta(self) -> dict[str, Any]:
        return self.front.fields

    problems: list[AgentFileError] = field(default_factory=list)
    """What makes the file broken, every field's problem (see ``done``)."""

    def fail(self, key: str | None, message: str) -> AgentFileError:
        line = self.front.line(key) if key is not None else 1
        return AgentFileError(
            f"agent file {self.path}:{line}: {message}",
            path=self.path,
            line=line,
            agent=self.agent,
            detail=message,
        )

    def parse(self, read: Callable[[], T], default: T) -> T:
        """``read()``, or ``default`` with its problem kept, so every field is checked."""
        try:
            return read()
        except AgentFileError as err:
            self.problems.append(err)
            return default

    def done(self) -> None:
        """Raise the file's problems as one error, in line order (the first names the file).

        Raises:
            AgentFileError: A field could not be read; the message lists every such field.
        """
        if not self.problems:
            return
        first, *rest = sorted(self.problems, key=lambda err: err.line or 0)
        if not rest:
            raise first
        more = "; ".join(f"line {err.line}: {err.detail}" for err in rest)
        raise AgentFileError(
            f"{first}; {more}",
            path=self.path,
            line=first.line,
            agent=self.agent,
            detail=f"{first.detail}; {more}",
        )

    def warn(self, key: str, message: str) -> None:
        warn(self.warnings, f"{self.path}:{self.front.line(key)}: {message}")


SANDBOX_KEYS = {
    "network",
    "env",
    "limits",
    "context_window",
    "on_interrupted",
    "onInterrupted",
    "activity_options",
    "activityOptions",
}
"""Our own front matter (neither Claude Code nor OpenCode has it): the tool sandbox's,
the model's context window, what an interrupted call does and the activity options."""


def sandbox_fields(f: AgentFile) -> dict[str, Any]:
    """Our own keys: ``network``, ``env``, ``limits``, ``context_window`` and the others.

    ``network: true``, ``env: [NAME, ...]``, ``limits: {memory_mb: 512, ...}``,
    ``context_window: 32000``, ``activity_options: {tool_call: {start_to_close: 30}}``.
    A value that cannot be read is kept among the file's problems (see
    ``AgentFile.done``).
    """
    meta = f.meta
    fields: dict[str, Any] = {}
    for key in ("on_interrupted", "onInterrupted"):
        if key in meta:
            value = meta[key]
            if value in ("report", "rerun", "ask"):
                fields["on_interrupted"] = value
            else:
                f.problems.append(
                    f.fail(key, f"'{key}' must be report, rerun or ask, got {value!r}")
                )
    for key in ("activity_options", "activityOptions"):
        if key in meta:
            try:
                fields["activity_options"] = agent_activity_options(meta[key])
            except InvalidRequest as err:
                f.problems.append(f.fail(key, str(err)))
    if "context_window" in meta:
        window = meta["context_window"]
        if isinstance(window, bool) or not isinstance(window, int) or window < 1024:
            f.problems.append(
                f.fail(
                    "context_window",
                    f"'context_window' must be a number of tokens (at least 1024), got {window!r}",
                )
            )
        else:
            fields["context_window"] = window
    if "network" in meta:
        if isinstance(meta["network"], bool):
            fields["network"] = meta["network"]
        else:
            f.problems.append(
                f.fail("network", f"'network' must be true or false, got {meta['network']!r}")
            )
    if "env" in meta:
        env = meta["env"]
        if isinstance(env, str):
            env = [n.strip() for n in env.split(",") if n.strip()]
        if isinstance(env, list) and all(isinstance(n, str) for n in env):
            fields["env"] = env
        else:
            f.problems.append(f.fail("env", f"'env' must be a list of variable names, got {env!r}"))
    if "limits" in meta:
        try:
            fields["limits"] = ToolLimits.model_validate(meta["limits"])
        except ValidationError as err:
            f.problems.append(
                f.fail(
                    "limits",
                    f"invalid 'limits' ({err.errors()[0]['msg']}); use processes, memory_mb, "
                    "file_size_mb, cpu_seconds, open_files",
                )
            )
    return fields


MODEL_KEYS = {"reasoning_effort", "reasoningEffort", "temperature", "max_output_tokens"}
"""Model settings: ``reasoning_effort`` (OpenCode's ``reasoningEffort``), ``temperature``
and ``max_output_tokens``, in either format."""


def model_settings(f: AgentFile) -> dict[str, Any]:
    """The model settings a file gives; a value we cannot use is dropped with a warning."""
    meta = f.meta
    fields: dict[str, Any] = {}
    key = "reasoning_effort" if "reasoning_effort" in meta else "reasoningEffort"
    effort = meta.get(key)
    if isinstance(effort, str) and effort.strip().lower() in REASONING_EFFORTS:
        fields["reasoning_effort"] = effort.strip().lower()
    elif effort is not None:
        f.warn(
            key,
            f"{key} {effort!r} is not one of {', '.join(REASONING_EFFORTS)}; ignored (the "
            "model's default effort is used)",
        )
    temperature = meta.get("temperature")
    if temperature is not None:
        if (
            isinstance(temperature, int | float)
            and not isinstance(temperature, bool)
            and (0 <= temperature <= 2)
        ):
            fields["temperature"] = float(temperature)
        else:
            f.warn(
                "temperature",
                f"temperature {temperature!r} is not a number from 0 to 2; ignored",
            )
    tokens = meta.get("max_output_tokens")
    if tokens is not None:
        if (
            isinstance(tokens, int)
            and not isinstance(tokens, bool)
            and (1 <= tokens <= MAX_OUTPUT_TOKENS)
        ):
            fields["max_output_tokens"] = tokens
        else:
            f.warn(
                "max_output_tokens",
                f"max_output_tokens {tokens!r} is not an integer from 1 to "
                f"{MAX_OUTPUT_TOKENS}; ignored",
            )
    return fields


def warn_unused(f: AgentFile, known: set[str]) -> None:
    for key in f.meta:
        if key not in known:
            f.warn(key, f"field {key!r} is not used; ignored")


def warn(warnings: list[str], message: str) -> None:
    warnings.append(message)


def hand_over_warnings(found: list[str], warnings: list[str] | None) -> None:
    """Warnings go to the caller's list if it gave one, else to the log: never lost."""
    if warnings is not None:
        warnings.extend(found)
    else:
        for message in found:
            logger.warning("%s", message)
