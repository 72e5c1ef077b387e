"""Who may use the inbox: bearer tokens, their roles and the tasks they reach.

Tokens are configured on the server, never chosen by a request: a TOML file of
``[[tokens]]`` entries, or one approver token from ``SUBAGENTS_INBOX_TOKEN``. The file
may hold a token's SHA-256 instead of the token. A request's token is hashed and
compared with every entry's hash in constant time, so neither timing nor the order of
the file tells which entries a guess came close to.

A ``viewer`` reads; an ``approver`` also decides, sends input and cancels. A token
with ``task_prefixes`` or ``parent_ids`` reaches only the trees they name: a task
whose id starts with a prefix, whose ``parent_id`` is one of the ids, or whose parent
(or its parent...) is reached. Any other task does not exist for it (404).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import tomllib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from durable_subagents.errors import InvalidRequest
from durable_subagents.types import TaskInfo

__all__ = ["Grant", "Role", "Tokens", "load_tokens"]

MAX_DEPTH = 8
"""Parents followed up a tree to find whether a scope reaches a task."""
MIN_TOKEN_CHARS = 16
"""Shortest token accepted: guessing one must not be practical."""


class Role(enum.StrEnum):
    """What a token may do."""

    VIEWER = "viewer"
    APPROVER = "approver"


@dataclass(frozen=True)
class Grant:
    """One configured token (never the token itself): its name, role and scope.

    Attributes:
        name: Shown in the server's log lines instead of the token.
        role: ``viewer`` or ``approver``.
        task_prefixes: Task-id prefixes it reaches (with ``parent_ids``; both empty:
            every task).
        parent_ids: Parent ids whose trees it reaches.
    """

    name: str
    role: Role
    task_prefixes: tuple[str, ...] = ()
    parent_ids: tuple[str, ...] = ()

    @property
    def scoped(self) -> bool:
        """Whether it reaches only some trees."""
        return bool(self.task_prefixes or self.parent_ids)

    @property
    def may_decide(self) -> bool:
        """Whether it may approve, reject, send input and cancel."""
        return self.role == Role.APPROVER

    def names(self, info: TaskInfo) -> bool:
        """Whether the scope names the task itself (not through its parent)."""
        return info.id.startswith(self.task_prefixes) or (
            info.parent_id is not None and info.parent_id in self.parent_ids
        )

    async def reaches(
        self, info: TaskInfo, parent: Callable[[str], Awaitable[TaskInfo | None]]
    ) -> bool:
        """Whether the task is in the scope, looking up its parents with ``parent``."""
        if not self.scoped:
            return True
        seen: set[str] = set()
        current: TaskInfo | None = info
        for _ in range(MAX_DEPTH):
            if current is None or current.id in seen:
                return False
            if self.names(current):
                return True
            seen.add(current.id)
            if current.parent_id is None:
                return False
            current = await parent(current.parent_id)
        return False


@dataclass(frozen=True)
class _Entry:
    digest: bytes
    grant: Grant


class Tokens:
    """The server's tokens; :meth:`find` matches a request's bearer token."""

    def __init__(self, entries: Iterable[tuple[str | bytes, Grant]]) -> None:
        """Take ``(token or its SHA-256 digest, grant)`` pairs.

        Raises:
            InvalidRequest: two entries have the same token, or a token is too short.
        """
        self._entries: list[_Entry] = []
        for token, grant in entries:
            if isinstance(token, str):
                if len(token) < MIN_TOKEN_CHARS:
                    raise InvalidRequest(
                        f"the inbox token {grant.name!r} is shorter than {MIN_TOKEN_CHARS} "
                        "characters; make one with: python -c "
                        '"import secrets; print(secrets.token_urlsafe(32))"'
                    )
                token = hashlib.sha256(token.encode()).digest()
            if any(hmac.compare_digest(e.digest, token) for e in self._entries):
                raise InvalidRequest(
                    f"the inbox token {grant.name!r} is the same as another; give each its own"
                )
            self._entries.append(_Entry(token, grant))

    def __len__(self) -> int:
        return len(self._entries)

    def find(self, token: str) -> Grant | None:
        """The grant of ``token``, or None; every entry is compared, in constant time."""
        digest = hashlib.sha256(token.encode("utf-8", "replace")).digest()
        found: Grant | None = None
        for entry in self._entries:
            if hmac.compare_digest(entry.digest, digest):
                found = entry.grant
        return found


def _strings(entry: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise InvalidRequest(f"{where}: {key} must be a list of non-empty strings")
    return tuple(value)


def load_tokens(path: Path | None = None, token: str | None = None) -> Tokens:
    """The tokens of a TOML file and/or one unscoped approver token.

    The file holds ``[[tokens]]`` tables::

        [[tokens]]
        name = "ci-bot"                # in log lines instead of the token
        role = "viewer"                # or "approver"
        token_sha256 = "9f86d08..."    # or token = "..." (16 characters at least)
        task_prefixes = ["ci-"]        # optional scope
        parent_ids = ["release-42"]    # optional scope

    Raises:
        InvalidRequest: the file cannot be read or an entry is malformed (the message
            says which and what is wrong).
    """
    pairs: list[tuple[str | bytes, Grant]] = []
    if token is not None:
        pairs.append((token.strip(), Grant(name="SUBAGENTS_INBOX_TOKEN", role=Role.APPROVER)))
    if path is not None:
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
            raise InvalidRequest(f"cannot read the inbox tokens file {path}: {err}") from None
        entries = data.get("tokens")
        if not isinstance(entries, list) or not entries:
            raise InvalidRequest(f"{path}: no [[tokens]] entries; see `subagents serve --help`")
        for number, entry in enumerate(entries, 1):
            where = f"{path}: token {number}"
            if not isinstance(entry, dict):
                raise InvalidRequest(f"{where} is not a table")
            unknown = set(entry) - {
                "name",
                "role",
                "token",
                "token_sha256",
                "task_prefixes",
                "parent_ids",
            }
            if unknown:
                raise InvalidRequest(f"{where}: unknown keys {', '.join(sorted(unknown))}")
            name = entry.get("name") or f"token {number}"
            try:
                role = Role(entry.get("role", ""))
            except ValueError:
                raise InvalidRequest(f"{where}: role must be viewer or approver") from None
            grant = Grant(
                name=str(name),
                role=role,
                task_prefixes=_strings(entry, "task_prefixes", where),
                parent_ids=_strings(entry, "parent_ids", where),
            )
            secret, digest = entry.get("token"), entry.get("token_sha256")
            if (secret is None) == (digest is None):
                raise InvalidRequest(f"{where}: give one of token and token_sha256")
            if secret is not None:
                if not isinstance(secret, str):
                    raise InvalidRequest(f"{where}: token must be a string")
                pairs.append((secret, grant))
                continue
            try:
                raw = bytes.fromhex(str(digest))
            except ValueError:
                raw = b""
            if len(raw) != 32:
                raise InvalidRequest(f"{where}: token_sha256 must be 64 hex digits")
            pairs.append((raw, grant))
    return Tokens(pairs)
