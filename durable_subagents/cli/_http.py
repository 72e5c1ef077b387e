"""What the project's HTTP servers share: browser origins, bearer tokens, headers.

The approval inbox (``subagents serve``) and the codec server answer only the browser
origins they are given, so that another web page cannot make a visitor's browser
call them, and set the same response headers. Both run on aiohttp, their
connections limited per peer with a deadline for each request head (``listen`` in
``inbox/_connections``).
"""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

from aiohttp import web

from durable_subagents.errors import InvalidRequest

__all__ = ["bearer_matches", "normal_origin", "origin_of", "plain_headers"]


def normal_origin(origin: str) -> str:
    """An origin as a browser sends it (``scheme://host[:port]``, lower case).

    Raises:
        InvalidRequest: it is not such an origin (a path, a query, no host...).
    """
    text = origin.strip().rstrip("/")
    parts = urlsplit(text)
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path
        or parts.query
        or parts.fragment
        or parts.username
    ):
        raise InvalidRequest(
            f"{origin!r} is not a browser origin; give scheme, host and port only, "
            "e.g. http://localhost:8233 (the address the Web UI is opened at)"
        )
    return text.lower()


def origin_of(
    request: web.BaseRequest, allowed: frozenset[str], *, own: bool = False
) -> tuple[str | None, bool]:
    """The request's ``Origin`` header and whether it may be answered.

    No header: not a browser's cross-origin call (a script, a CLI), answered. ``own``:
    the server's own pages' origin is allowed too.
    """
    origin = request.headers.get("Origin")
    if origin is None:
        return None, True
    normal = origin.strip().rstrip("/").lower()
    if own and normal == f"{request.scheme}://{request.host}".lower():
        return origin, True
    return origin, normal in allowed


def bearer_matches(request: web.BaseRequest, token: str) -> bool:
    """Whether ``Authorization: Bearer <token>`` is the request's, compared in constant time."""
    scheme, _, given = (request.headers.get("Authorization") or "").strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )


def plain_headers(response: web.StreamResponse) -> None:
    """Headers every answer carries: varies by origin, never cached, never sniffed."""
    response.headers["Vary"] = "Origin"
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Content-Type-Options"] = "nosniff"
