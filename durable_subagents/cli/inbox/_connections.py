"""The inbox's connections: a deadline for every request, a cap for every peer.

Each open connection holds one of the server's file descriptors until it closes. A
peer that opens connections and never finishes a request (slowloris) would hold
them all, and with them the server: 1,100 such connections made the inbox
unreachable, without any token. So:

- a request's head (request line and headers) must arrive within ``HEAD_TIMEOUT``
  seconds of the connection opening or of its previous answer, or the connection is
  closed (aiohttp's keep-alive timer, which runs from the connection's start and does
  not restart on partial data);
- a body, on the routes that read one, within ``BODY_TIMEOUT`` (408, see ``_api``);
- one peer address holds at most ``MAX_PER_PEER`` connections at once: another is
  answered 429 and closed at once, so a flood from one address leaves the server to
  everyone else. An IPv6 peer counts by its /64, the block one host usually holds.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections import Counter
from typing import Any

from aiohttp import web

__all__ = ["BODY_TIMEOUT", "HEAD_TIMEOUT", "MAX_PER_PEER", "PeerConnections", "listen"]

HEAD_TIMEOUT = 5.0
"""Seconds a connection has to send a whole request head, from its start or its
previous answer (an idle keep-alive connection is closed after as long)."""
BODY_TIMEOUT = 30.0
"""Seconds a request has to send its body (at most 1 MiB) once its head arrived."""
MAX_PER_PEER = 64
"""Connections one peer address may hold open at once (a browser uses about 6)."""


def peer_of(peername: Any) -> str:
    """The address a connection counts against: its IP, or the /64 of an IPv6 one."""
    host = peername[0] if isinstance(peername, tuple) and peername else str(peername)
    try:
        address = ipaddress.ip_address(str(host).partition("%")[0])
    except ValueError:
        return str(host)
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class PeerConnections:
    """How many connections each peer holds, and whether it may open another.

    Args:
        most: Connections one peer may hold at once.
    """

    def __init__(self, most: int = MAX_PER_PEER) -> None:
        self.most = most
        self._open: Counter[str] = Counter()

    def admit(self, peer: str) -> bool:
        """Count a new connection of ``peer``, unless it holds ``most`` already."""
        if self._open[peer] >= self.most:
            return False
        self._open[peer] += 1
        return True

    def release(self, peer: str) -> None:
        """A connection of ``peer`` closed."""
        self._open[peer] -= 1
        if self._open[peer] <= 0:
            del self._open[peer]

    def held(self, peer: str) -> int:
        """Connections ``peer`` holds now."""
        return self._open[peer]


def _too_many(most: int) -> bytes:
    body = json.dumps(
        {
            "error": f"too many connections from your address (at most {most} at once); "
            "close some and try again",
            "type": "TooManyConnections",
            "status": None,
        }
    ).encode()
    head = (
        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
    )
    return head.encode() + body


class _Connection(web.RequestHandler):
    """aiohttp's handler of one connection, opened only within its peer's share."""

    def __init__(self, peers: PeerConnections, manager: web.Server, **kwargs: Any) -> None:
        super().__init__(manager, loop=asyncio.get_running_loop(), **kwargs)
        self._peers = peers
        self._peer: str | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = peer_of(transport.get_extra_info("peername"))
        if not self._peers.admit(peer):
            # Never handed to aiohttp: written to and closed before a byte is read.
            self._refused = True
            assert isinstance(transport, asyncio.WriteTransport)
            transport.write(_too_many(self._peers.most))
            transport.close()
            return
        self._peer = peer
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._peer is not None:
            self._peers.release(self._peer)
            self._peer = None
        if not self._refused:
            super().connection_lost(exc)


async def listen(
    runner: web.AppRunner,
    host: str,
    port: int,
    *,
    peers: PeerConnections,
    head_timeout: float = HEAD_TIMEOUT,
    **handler_options: Any,
) -> asyncio.Server:
    """Serve ``runner``'s application on ``host:port``, connections limited as above.

    Args:
        runner: Set up (``await runner.setup()``); its server handles the requests.
        host: Address to listen on.
        port: Port; 0 picks a free one.
        peers: The connections each peer holds (and may hold).
        head_timeout: Seconds to send a request head.
        handler_options: aiohttp ``RequestHandler`` options (the access log class).

    Raises:
        OSError: The address cannot be bound.
    """
    server = runner.server
    assert server is not None, "set the runner up first"
    # An answer sent before its request's body ended (408, 401) reads what still comes
    # for a moment (so the client reads the answer, not a reset), then closes.
    options = {"keepalive_timeout": head_timeout, "lingering_time": 2.0, **handler_options}
    return await asyncio.get_running_loop().create_server(
        lambda: _Connection(peers, server, **options), host, port, reuse_address=True
    )
