"""The worker's settings of tool processes: who runs them, in what, seeing what.

Part of ``Settings`` (its base class), read with it from the environment; kept apart
because they are one concern: the sandbox, the tool user, the environment and host
paths a tool sees, the protected paths and each call's resource limits.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings

from durable_subagents.agents._protected import extended_protected_paths, parse_protected_paths
from durable_subagents.agents._spec import DEFAULT_LIMITS, ToolLimits
from durable_subagents.connection._setting_values import parse_tool_user
from durable_subagents.connection._temporal_config import is_credential_env

__all__ = ["ToolSettings"]


def _default_limit(name: str) -> int:
    value = getattr(DEFAULT_LIMITS, name)
    assert isinstance(value, int)
    return value


class ToolSettings(BaseSettings):
    """What tool processes run as and in, and what each call may use (see ``Settings``)."""

    tool_sandbox: str = Field(
        "auto", validation_alias=AliasChoices("SUBAGENTS_TOOL_SANDBOX", "tool_sandbox")
    )
    """How tool processes are isolated: ``auto``/``bwrap`` (the bubblewrap sandbox; commands
    are refused where it cannot start) or ``none`` (on the host, unsafe: logged at start
    and shown on every task)."""
    tool_user: str = Field(
        "auto", validation_alias=AliasChoices("SUBAGENTS_TOOL_USER", "tool_user")
    )
    """Who tool commands run as when the worker runs as root: ``auto`` (the owner of the
    task's workspace; ``nobody`` where root owns it), or ``UID[:GID]`` or ``NAME[:GROUP]``,
    never root. A worker that is not root runs commands as itself and ignores it."""
    tool_env: str = Field("", validation_alias=AliasChoices("SUBAGENTS_TOOL_ENV", "tool_env"))
    """Comma-separated names of worker environment variables tool processes may see
    (besides PATH, HOME, LANG, LC_ALL, LC_CTYPE, TERM, TZ); agents may pick fewer."""
    tool_read_paths: str = Field(
        "", validation_alias=AliasChoices("SUBAGENTS_TOOL_READ_PATHS", "tool_read_paths")
    )
    """Extra host directories tool processes see read-only (``os.pathsep``-separated),
    e.g. a toolchain outside /usr and /opt."""
    protected_paths: str = Field(
        "", validation_alias=AliasChoices("SUBAGENTS_PROTECTED_PATHS", "protected_paths")
    )
    """Comma-separated paths to protect besides the built-in ``PROTECTED_PATHS``: names
    (``.tool-config``) or relative paths (``deploy/hooks``), each matched anywhere under
    the workspace, ignoring case, whether it exists or not. A file tool's change there
    asks a person in every mode, ``bash`` sees them read-only, and no spawn's workspace
    may be or lie in one. Built-in entries cannot be removed (an agent opts out with
    ``write_protected_paths``)."""
    tool_max_processes: int = Field(
        _default_limit("processes"),
        ge=1,
        validation_alias=AliasChoices("SUBAGENTS_TOOL_MAX_PROCESSES", "tool_max_processes"),
    )
    """Processes (and threads) one tool call may have at once."""
    tool_max_memory_mb: int = Field(
        _default_limit("memory_mb"),
        ge=16,
        validation_alias=AliasChoices("SUBAGENTS_TOOL_MAX_MEMORY_MB", "tool_max_memory_mb"),
    )
    """Memory of one tool call, in MiB (per process where no cgroup can be made)."""
    tool_max_file_mb: int = Field(
        _default_limit("file_size_mb"),
        ge=1,
        validation_alias=AliasChoices("SUBAGENTS_TOOL_MAX_FILE_MB", "tool_max_file_mb"),
    )
    """Largest file a tool call may write, in MiB."""
    tool_max_cpu_seconds: int = Field(
        _default_limit("cpu_seconds"),
        ge=1,
        validation_alias=AliasChoices("SUBAGENTS_TOOL_MAX_CPU_SECONDS", "tool_max_cpu_seconds"),
    )
    """CPU seconds each process of a tool call may use."""

    @field_validator("tool_env")
    @classmethod
    def _no_payload_key_for_tools(cls, value: str) -> str:
        for name in value.split(","):
            if name.strip().upper().startswith("SUBAGENTS_PAYLOAD_"):
                raise ValueError(
                    f"SUBAGENTS_TOOL_ENV names {name.strip()}: the payload keys decrypt every "
                    "task and never reach a tool; remove it from the list"
                )
            if is_credential_env(name):
                raise ValueError(
                    f"SUBAGENTS_TOOL_ENV names {name.strip()}: Temporal credentials would "
                    "let a tool decide, cancel or read any task, and never reach one; "
                    "remove it from the list"
                )
        return value

    @field_validator("tool_user")
    @classmethod
    def _valid_tool_user(cls, value: str) -> str:
        parse_tool_user(value)
        return value

    @property
    def tool_user_ids(self) -> tuple[int, int] | None:
        """The configured tool user as (uid, gid); None for ``auto``."""
        return parse_tool_user(self.tool_user)

    @field_validator("protected_paths")
    @classmethod
    def _plain_protected_paths(cls, value: str) -> str:
        parse_protected_paths(value)
        return value

    @field_validator("tool_sandbox")
    @classmethod
    def _known_sandbox(cls, value: str) -> str:
        if value not in ("auto", "bwrap", "none"):
            hint = (
                " (the unshare fallback was removed: it could not hide files or the network)"
                if value == "unshare"
                else ""
            )
            raise ValueError(
                f"SUBAGENTS_TOOL_SANDBOX must be auto, bwrap or none, got {value!r}{hint}"
            )
        return value

    @property
    def tool_limits(self) -> ToolLimits:
        """The worker's ceiling for every tool call's resources."""
        return ToolLimits(
            processes=self.tool_max_processes,
            memory_mb=self.tool_max_memory_mb,
            file_size_mb=self.tool_max_file_mb,
            cpu_seconds=self.tool_max_cpu_seconds,
            open_files=DEFAULT_LIMITS.open_files,
        )

    @property
    def protected_path_list(self) -> tuple[str, ...]:
        """``PROTECTED_PATHS`` and the entries of ``protected_paths`` after them."""
        return extended_protected_paths(parse_protected_paths(self.protected_paths))

    @property
    def tool_env_names(self) -> list[str]:
        """``tool_env`` as a list of names."""
        return [n.strip() for n in self.tool_env.split(",") if n.strip()]

    @property
    def tool_read_path_list(self) -> list[Path]:
        """``tool_read_paths`` as resolved paths."""
        return [Path(p).resolve() for p in self.tool_read_paths.split(os.pathsep) if p.strip()]
