"""Notification URLs: what a spawn may name, and what a worker agrees to post to.

A spawn's ``notify_url`` is recorded in the task's input, so it may come from anyone
who can spawn (an orchestrating model's caller, a script). The worker decides where
it posts: only to URLs under a prefix of its allowlist (``SUBAGENTS_NOTIFY_ALLOW`` and
``SUBAGENTS_NOTIFY_URL``), compared by scheme, host, port and whole path segments, so
``https://hooks.example.com/ci`` allows ``/ci`` and ``/ci/x``, never ``/ci-evil`` or
another host.

The URL compared is the URL sent. HTTP clients resolve dot segments before they send
(aiohttp sends ``/ci/../admin`` and ``/ci/%2e%2e/admin`` as ``/admin``), so a raw
comparison would let a prefix allow its whole host. :func:`normal_notify_url` writes a
URL as it goes on the wire (RFC 3986: escapes of unreserved characters decoded, others
in upper case, dot segments removed, no fragment), the allowlist judges that, and the
worker posts exactly that. What receivers read in more than one way is refused: an
encoded slash or backslash (``%2F``, ``%5C``), a backslash, and a dot segment with
parameters (``..;`` or ``..%3B``, which servlet containers read as ``..``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import SplitResult, unquote, urlsplit

from durable_subagents.errors import InvalidRequest

__all__ = ["MAX_URL_CHARS", "check_notify_url", "normal_notify_url", "notify_url_allowed"]

MAX_URL_CHARS = 2048
"""Longest notification URL."""

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PATH_CHARS = _UNRESERVED | frozenset("!$&'()*+,;=:@/")
"""Characters a path holds as they are (RFC 3986 ``pchar`` and ``/``); others are escaped."""
_QUERY_CHARS = _PATH_CHARS | frozenset("?")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")


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


def _escaped(text: str, keep: frozenset[str], url: str, where: str) -> str:
    """``text`` with unreserved escapes decoded, others upper case, the rest escaped."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "%":
            escape = _ESCAPE.match(text, i)
            if escape is None:
                raise InvalidRequest(
                    f"notify_url {url[:200]!r} has a % that starts no %XX escape in its "
                    f"{where}; write a % as %25"
                )
            decoded = chr(int(escape.group(1), 16))
            out.append(decoded if decoded in _UNRESERVED else "%" + escape.group(1).upper())
            i += 3
            continue
        if char in keep:
            out.append(char)
        else:
            out.append("".join(f"%{b:02X}" for b in char.encode("utf-8", "surrogatepass")))
        i += 1
    return "".join(out)


def remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4: ``/a/b/../c/./d`` is ``/a/c/d``; ``..`` stops at the root."""
    output: list[str] = []
    rest = path
    while rest:
        if rest.startswith("../"):
            rest = rest[3:]
        elif rest.startswith("./") or rest.startswith("/./"):
            rest = rest[2:]
        elif rest == "/.":
            rest = "/"
        elif rest.startswith("/../") or rest == "/..":
            rest = "/" + rest[4:]
            if output:
                output.pop()
        elif rest in (".", ".."):
            rest = ""
        else:
            end = rest.find("/", 1)
            end = len(rest) if end == -1 else end
            output.append(rest[:end])
            rest = rest[end:]
    return "".join(output)


def _host(parts: SplitResult, url: str) -> str:
    host = parts.hostname or ""
    if "[" in parts.netloc:  # an IPv6 literal: urlsplit checked it
        return f"[{host}]"
    name = host.rstrip(".")
    if not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise InvalidRequest(
            f"notify_url {url[:200]!r} has a host that is no host name: use letters, "
            "digits, - and . only (a name in another script in its xn-- form)"
        )
    return name


def normal_notify_url(url: str) -> str:
    """``url`` as a worker sends it and its allowlist judges it (see the module's doc).

    ``https://H/hooks/./a/../%7Eb?x`` is ``https://h/hooks/~b?x``: host in lower case,
    no default port, no fragment, no dot segment.

    Raises:
        InvalidRequest: what is wrong with it: not a notification URL, or an encoded
            slash or backslash, a backslash, a dot segment with parameters, a broken
            escape, or a host that is no host name.
    """
    checked = check_notify_url(url)
    parts = _parts(checked)
    raw = parts.path or "/"
    if "\\" in raw or re.search(r"%(2f|5c)", raw, re.IGNORECASE):
        raise InvalidRequest(
            f"notify_url {url[:200]!r} has a backslash or an encoded slash (%2F, %5C) in "
            "its path, which receivers read as a path separator or not: write / as /"
        )
    path = _escaped(raw if raw.startswith("/") else "/" + raw, _PATH_CHARS, url, "path")
    for segment in path.split("/"):
        dots, params, _ = unquote(segment).partition(";")
        if params and dots in (".", ".."):
            raise InvalidRequest(
                f"notify_url {url[:200]!r} has a dot segment with parameters "
                f"({segment[:20]!r}), which some receivers read as {dots!r}"
            )
    path = remove_dot_segments(path)
    port = parts.port
    default = 443 if parts.scheme == "https" else 80
    netloc = _host(parts, url) + (f":{port}" if port is not None and port != default else "")
    query = _escaped(parts.query, _QUERY_CHARS, url, "query") if parts.query else ""
    return f"{parts.scheme}://{netloc}{path}" + (f"?{query}" if query else "")


def _origin(parts: SplitResult) -> tuple[str, str, int]:
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, (parts.hostname or "").lower().rstrip("."), port


def notify_url_allowed(url: str, allowed: Iterable[str]) -> bool:
    """Whether ``url``, as it would be sent, lies under one of the ``allowed`` prefixes.

    Both are compared as :func:`normal_notify_url` writes them. Scheme, host and port
    must be equal; the path must be the prefix's or go on below it after a ``/``. A
    malformed or refused URL or prefix allows nothing.
    """
    try:
        target = _parts(normal_notify_url(url))
    except InvalidRequest:
        return False
    path = target.path
    for prefix in allowed:
        try:
            allow = _parts(normal_notify_url(prefix))
        except InvalidRequest:
            continue
        if _origin(allow) != _origin(target):
            continue
        base = allow.path.rstrip("/")
        if not base or path == base or path.startswith(base + "/"):
            return True
    return False
