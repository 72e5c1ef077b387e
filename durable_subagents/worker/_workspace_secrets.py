"""A warning at start when the workspace holds the worker's own secrets.

``subagents keygen >> .env`` in a project directory, then ``subagents dev`` there,
puts the payload key (and whatever else the ``.env`` holds: API keys) inside the
workspace, where every task's file tools and commands can read it. The worker cannot
tell which file a person meant to keep; it can tell that a file at the top of the
workspace holds one of its secrets, and say so once, naming the file and the
variable, never the value.

The look is bounded, so a large workspace starts as fast: the top level only, regular
files only (a symlink is not followed, a FIFO not opened for long), at most
``MAX_FILES`` of them (``.env`` files first) and ``MAX_BYTES`` each.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

import platformdirs

from durable_subagents.config import SECRET_ENV_NAME, Settings

__all__ = ["MAX_BYTES", "MAX_FILES", "files_holding", "warn_secrets_in_workspace", "worker_secrets"]

log = logging.getLogger("durable_subagents.worker")

MAX_FILES = 100
"""Files of the workspace's top level read, ``.env`` files first."""
MAX_BYTES = 1024 * 1024
"""Largest file read; a larger one is left unread."""
MAX_ENTRIES = 10_000
"""Entries of the top level listed to choose the files from."""
MIN_SECRET_CHARS = 8
"""Shorter values are not looked for (as ``_telemetry.scrub``): they match by chance."""


def worker_secrets(
    settings: Settings, env: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """The worker's secrets, each with the name it is set under, as spans scrub them.

    Every environment variable whose name looks secret (``SECRET_ENV_NAME``: API keys,
    ``SUBAGENTS_PAYLOAD_KEY``, ``TEMPORAL_API_KEY``, tokens, passwords...), and the
    settings' own keys when they were given in code; a list of keys
    (``SUBAGENTS_PAYLOAD_OLD_KEYS``) counts key by key too.
    """
    env = os.environ if env is None else env
    named = [(name, value) for name, value in env.items() if SECRET_ENV_NAME.search(name)]
    given = {
        "SUBAGENTS_PAYLOAD_KEY": settings.payload_key,
        "SUBAGENTS_PAYLOAD_OLD_KEYS": settings.payload_old_keys,
        "SUBAGENTS_NOTIFY_SECRET": settings.notify_secret,
    }
    named += [(n, s.get_secret_value()) for n, s in given.items() if s is not None]
    found: dict[tuple[str, str], None] = {}
    for name, value in named:
        for part in {value, *value.split(",")}:
            if len(part.strip()) >= MIN_SECRET_CHARS:
                found[(name, part.strip())] = None
    return list(found)


def _candidates(root_fd: int) -> list[str]:
    names: list[str] = []
    with os.scandir(root_fd) as entries:
        for entry in entries:
            names.append(entry.name)
            if len(names) >= MAX_ENTRIES:
                break
    # .env, .env.local, prod.env first: where secrets are kept on purpose
    names.sort(key=lambda n: (not (n.startswith(".env") or n.endswith(".env")), n))
    return names[:MAX_FILES]


def _read(root_fd: int, name: str) -> bytes | None:
    """The file's bytes, if it is a regular file of at most ``MAX_BYTES`` (no symlink)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=root_fd)
    except OSError:  # a symlink (ELOOP), gone, or not ours to read
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
            return None
        chunks = []
        left = MAX_BYTES
        while left > 0:
            chunk = os.read(fd, min(left, 256 * 1024))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def files_holding(root: Path, secrets: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """Files at the top of ``root`` that hold a secret: their names, and its names.

    Args:
        root: The workspace root.
        secrets: ``(name it is set under, value)`` pairs (``worker_secrets``).

    Returns:
        ``{file name: [variable names]}``, in the order the files were read.
    """
    wanted = [(name, value.encode()) for name, value in secrets if value]
    if not wanted:
        return {}
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return {}
    found: dict[str, list[str]] = {}
    try:
        try:
            names = _candidates(root_fd)
        except OSError:  # not ours to list: the worker says so when a task needs it
            names = []
        for name in names:
            data = _read(root_fd, name)
            if data is None:
                continue
            held = list(dict.fromkeys(n for n, value in wanted if value in data))
            if held:
                found[name] = held
    finally:
        os.close(root_fd)
    return found


def warn_secrets_in_workspace(
    settings: Settings, env: Mapping[str, str] | None = None
) -> dict[str, list[str]]:
    """Log one warning if the workspace's top level holds a secret of this worker.

    Returns:
        What was found (see ``files_holding``).
    """
    root = settings.resolved_workspace
    found = files_holding(root, worker_secrets(settings, env))
    if found:
        files = ", ".join(f"{name} ({', '.join(names)})" for name, names in found.items())
        config = Path(platformdirs.user_config_dir("durable-subagents"))
        log.warning(
            "the workspace %s holds this worker's secrets in %s: every task can read them "
            "there. Keep them outside the workspace (e.g. in %s, which no tool reads) and "
            "give them to the worker in its environment",
            root,
            files,
            config,
        )
    return found
