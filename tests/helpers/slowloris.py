"""Slowloris: connections that send half a request head and never finish it.

Every loopback address is this machine on Linux, so connections bound to
``127.0.0.2`` come from another peer than the real client's ``127.0.0.1``.
"""

from __future__ import annotations

import asyncio
import contextlib

ATTACKER = "127.0.0.2"
HALF_A_HEAD = b"GET /api/inbox HTTP/1.1\r\nHost: inbox\r\nAuthoriz"
"""A request line and a header and a half: never a whole head."""


class HalfOpen(asyncio.Protocol):
    """One connection that sends ``HALF_A_HEAD`` and waits; records what comes back."""

    def __init__(self) -> None:
        self.received = b""
        self.closed = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(HALF_A_HEAD)

    def data_received(self, data: bytes) -> None:
        self.received += data

    def eof_received(self) -> None:
        self._close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._close()

    def _close(self) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    @property
    def refused(self) -> bool:
        """The server answered 429 (too many connections from this address)."""
        return self.received.startswith(b"HTTP/1.1 429 ")

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


async def half_open(port: int, count: int, patience: float = 5.0) -> list[HalfOpen]:
    """``count`` half-open connections from ``ATTACKER`` to ``127.0.0.1:port``.

    An attacker does not wait for a server that no longer accepts: a connection not
    made within ``patience`` seconds is given up (and not returned).
    """
    loop = asyncio.get_running_loop()

    async def one() -> HalfOpen | None:
        with contextlib.suppress(OSError, TimeoutError):
            _, protocol = await asyncio.wait_for(
                loop.create_connection(HalfOpen, "127.0.0.1", port, local_addr=(ATTACKER, 0)),
                patience,
            )
            return protocol
        return None

    made = await asyncio.gather(*(one() for _ in range(count)))
    return [m for m in made if m is not None]
