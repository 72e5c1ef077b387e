"""Notification URLs: what a spawn may name, and what a worker agrees to post to.

A spawn's ``notify_url`` is recorded in the task's input, so it may come from anyone
who can spawn (an orchestrating model's caller, a script). The worker decides where
it posts: only to URLs under a prefix of its allowlist (``SUBAGENTS_NOTIFY_ALLOW`` and
``SUBAGENTS_NOTIFY_URL``), compared by scheme, host, port and whole path segments, so
``https://hooks.example.com/ci`` allows ``/ci`` and ``/ci/x``, never ``/ci-evil`` or
another host.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import SplitResult, urlsplit

from durable_subagents.errors import InvalidRequest

__all__ = ["MAX_URL_CHARS", "check_notify_url", "notify_url_allowed"]

MAX_URL_CHARS = 2048
"""Longest notification URL."""


def _parts(url: str) -> SplitResult:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as err:
        raise InvalidRequest(f"notify_url {url[:200]!r} is not a URL: {err}") from None
    return parts


def check_notify_url(url: str) -> str:
    """``url`` if it can be a notification URL: http(s), a host, no credentials.

    Credentials in a URL would be recorded in the task's history and shown in the
    Web UI: a receiver checks the signature instead.

    Raises:
        InvalidRequest: what is wrong with it.
    """
    if not isinstance(url, str) or not url.strip():
        raise InvalidRequest("notify_url is empty; give an http(s) URL or leave it out")
    url = url.strip()
    if len(url) > MAX_URL_CHARS or any(c.isspace() or ord(c) < 0x20 for c in url):
        raise InvalidRequest(
            f"notify_url must be one line of at most {MAX_URL_CHARS} characters without spaces"
        )
    parts = _parts(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequest(
            f"notify_url {url[:200]!r} is not an http(s) URL with a host, e.g. "
            "https://hooks.example.com/subagents"
        )
    if parts.username is not None or parts.password is not None:
        raise InvalidRequest(
            "notify_url holds credentials (user:password@): they would be recorded in the "
            "task's history; receivers check the notification's signature instead"
        )
    return url


def _origin(parts: SplitResult) -> tuple[str, str, int]:
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, (parts.hostname or "").lower().rstrip("."), port


def notify_url_allowed(url: str, allowed: Iterable[str]) -> bool:
    """Whether ``url`` lies under one of the ``allowed`` URL prefixes.

    Scheme, host and port must be equal; the path must be the prefix's or go on below
    it after a ``/``. A malformed URL or prefix allows nothing.
    """
    try:
        target = _parts(check_notify_url(url))
    except InvalidRequest:
        return False
    path = target.path or "/"
    for prefix in allowed:
        try:
            allow = _parts(check_notify_url(prefix))
        except InvalidRequest:
            continue
        if _origin(allow) != _origin(target):
            continue
        base = allow.path.rstrip("/")
        if not base or path == base or path.startswith(base + "/"):
            return True
    return False
