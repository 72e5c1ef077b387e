"""Connecting to Temporal with the project's data converter and clear errors."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import logging
from typing import TYPE_CHECKING, Any

import temporalio.runtime
from temporalio.client import Client

from durable_subagents.connection._temporal_config import access_denied
from durable_subagents.errors import InvalidRequest, TemporalUnavailable
from durable_subagents.storage._sealing import KeyRing
from durable_subagents.telemetry._telemetry import tracing_enabled, tracing_plugin
from durable_subagents.wire._codec import data_converter

if TYPE_CHECKING:
    from durable_subagents.config import Settings


async def connect_client(
    address: str,
    namespace: str = "default",
    *,
    tracing: bool | None = None,
    keys: KeyRing | None = None,
    **kwargs: Any,
) -> Client:
    """Connect with the project's data converter; a clear error if nothing answers.

    Args:
        address: Temporal frontend ``host:port``.
        namespace: The namespace.
        keys: Payload keys (``Settings.payload_keys()``): every payload is encrypted
            with the current one. None: plain payloads (an encrypted one is refused with
            an error naming its key).
        tracing: Add Temporal's ``OpenTelemetryPlugin`` so task starts, workflow runs
            and activities are spans of one trace per task (workers built from this
            client inherit it). ``None``: on when the application set a global
            ``TracerProvider``.
        **kwargs: Passed to ``temporalio.client.Client.connect``.

    Raises:
        InvalidRequest: ``address`` is not a ``host:port``.
        TemporalUnavailable: the server did not answer on ``address``.
    """
    check_address(address)
    release_runtime_at_exit()
    if tracing_enabled(tracing):
        kwargs["plugins"] = [*kwargs.get("plugins", ()), tracing_plugin()]
    try:
        return await Client.connect(
            address, namespace=namespace, data_converter=data_converter(keys), **kwargs
        )
    except ValueError as err:
        raise InvalidRequest(
            f"{address!r} is not a Temporal address ({err}); give host:port, e.g. "
            f"localhost:7233 ({_WHERE})"
        ) from None
    except RuntimeError as err:
        words = plain_connection_error(str(err))
        web = not kwargs.get("tls") and words in _PROBED and await answers_http(address)
        unavailable = TemporalUnavailable(
            f"cannot reach Temporal at {address} (namespace {namespace!r}): "
            f"{f'{NOT_TEMPORAL} ({WEB_SERVER})' if web else words}. Start a local server "
            "with `subagents dev`, or point TEMPORAL_ADDRESS / --address at a running one",
            detail=str(err),
        )
        if web:
            # No cause: the transport's broken pipe would read as a TLS refusal to
            # ``access_denied``, and this server answered in plain text.
            raise unavailable from None
        raise unavailable from err


_WHERE = "--address or TEMPORAL_ADDRESS"


def check_address(address: str) -> None:
    """Refuse an address that is not ``host:port`` before anything tries to reach it.

    Temporal's client takes ``localhost`` to mean port 80, and takes ``http://...``
    with a warning printed from its own source.

    Raises:
        InvalidRequest: A scheme, no port, or a port that is not a number.
    """
    scheme, sep, rest = address.partition("://")
    if sep:
        raise InvalidRequest(
            f"{address!r} is a URL; give the Temporal address as host:port without "
            f"{scheme}://, e.g. {rest.rstrip('/') or 'localhost:7233'} ({_WHERE})"
        )
    host, port = _split(address)
    if port is None:
        raise InvalidRequest(
            f"{address!r} has no port; give host:port, e.g. {host or 'localhost'}:7233 ({_WHERE})"
        )
    if not port.isdecimal() or not 0 < int(port) < 65536:
        raise InvalidRequest(
            f"{address!r} has no valid port ({port!r}); give host:port, e.g. "
            f"{host or 'localhost'}:7233 ({_WHERE})"
        )


def _split(address: str) -> tuple[str, str | None]:
    """``(host, port)`` of ``host:port`` or ``[v6]:port``; no port: None."""
    if address.startswith("["):
        host, _, rest = address.partition("]")
        return host + "]", rest[1:] if rest.startswith(":") else None
    if address.count(":") == 1:
        host, _, port = address.partition(":")
        return host, port
    return address, None


NOT_TEMPORAL = "something answers there, but it is not a Temporal frontend"
WEB_SERVER = (
    "it answers HTTP/1, as a web server does: the Web UI's port, 8233 by default, is "
    "not the frontend's, 7233"
)
PROBE_SECONDS = 2.0
"""How long ``answers_http`` waits for a server's first bytes."""


async def answers_http(address: str) -> bool:
    """Whether a plain HTTP/1 server answers on ``address``: a web page's port.

    Temporal's client speaks HTTP/2 and reads an HTTP/1 server's answer as a broken
    frame, or writes into a connection the server already closed; both read as a
    failed connection. One ``HEAD /`` tells. A TLS port is not one: it says nothing to
    plain text, or says it wants HTTPS.
    """
    host, port = _split(address)
    try:
        async with asyncio.timeout(PROBE_SECONDS):
            reader, writer = await asyncio.open_connection(host.strip("[]"), int(port or ""))
            try:
                writer.write(f"HEAD / HTTP/1.1\r\nHost: {address}\r\n\r\n".encode())
                await writer.drain()
                head = await reader.read(1024)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (OSError, TimeoutError, ValueError):
        return False
    return head.startswith(b"HTTP/1.") and b"HTTPS" not in head


_PLAIN = (
    (("connection refused", "connectionrefused"), "connection refused"),
    (
        ("dns error", "failed to lookup address", "name or service not known", "nodename nor"),
        "no such host",
    ),
    (("timeout expired", "timed out", "deadline"), "timed out"),
    (("grpc-status header missing", "http status code"), NOT_TEMPORAL),
    (("certificate", "handshake"), "the TLS handshake failed"),
    (("connection reset", "broken pipe"), "the connection was reset"),
    (("tcp connect error", "transport error", "unavailable"), "the server does not answer"),
)


_PROBED = ("the connection failed", "the connection was reset", "timed out")
"""What a plain HTTP/1 server's answer reads as: ``answers_http`` then tells. A busy
web server may answer HTTP/2's preface too late: that reads as a timeout."""


def plain_connection_error(text: str) -> str:
    """What a transport error means, in words: ``connection refused``, ``no such host``...

    The transport's own text (``tonic::transport::Error(Transport, ConnectError(...
    Os { code: 111 ...}))``) is for ``-v``; people read the words.
    """
    lowered = text.lower()
    for needles, words in _PLAIN:
        if any(needle in lowered for needle in needles):
            return words
    return "the connection failed"


_registered = False


def release_runtime_at_exit() -> None:
    """Let go of Temporal's default runtime before the interpreter starts finalizing.

    A process that used a client and then ends can abort at exit (``PyGILState_Release:
    thread state ... must be current``, or a segfault; temporalio/sdk-python#300): the
    runtime's Rust threads, dropped during finalization, call into an interpreter that
    is going away. At ``atexit`` time the interpreter is still whole, so the runtime and
    the clients no longer referenced are dropped there instead. A process that keeps a
    client in a global keeps the runtime, as before.
    """
    global _registered
    if not _registered:
        _registered = True
        atexit.register(_drop_default_runtime)


def _drop_default_runtime() -> None:
    ref = getattr(temporalio.runtime, "_runtime_ref", None)
    if ref is not None and hasattr(ref, "_default_runtime"):
        ref._default_runtime = None
    gc.collect()


def no_connection_retries(record: logging.LogRecord) -> bool:
    """A log filter: drop Temporal core's lines about retrying a call to the server.

    A command that loses the server says so in one line of its own; the retries
    before it are ten lines of transport errors. Add it to the ``temporalio.core``
    logger (where ``subagents`` forwards core's log).
    """
    return "temporalio_client::retry" not in record.getMessage()


async def connect_temporal(
    settings: Settings, *, tracing: bool | None = None, **kwargs: Any
) -> Client:
    """Connect as the settings say: their address, namespace, profile and credentials.

    Args:
        settings: Address and namespace (already resolved against the profile and the
            environment), profile, configuration file and payload keys.
        tracing: See ``connect_client``.
        **kwargs: Passed to ``temporalio.client.Client.connect`` (``lazy``, ``runtime``).

    Raises:
        TemporalConfigError: The connection settings cannot be used.
        TemporalAccessDenied: The server refused the TLS handshake or the credentials.
        TemporalUnavailable: Nothing answered on the address.
    """
    conn = settings.temporal_connection()
    try:
        return await connect_client(
            conn.address,
            conn.namespace,
            tracing=tracing,
            keys=settings.payload_keys(),
            **conn.connect_kwargs(),
            **kwargs,
        )
    except TemporalUnavailable as err:
        denied = access_denied(err.__cause__ or err, conn)
        if denied is not None:
            raise denied from None
        raise
