"""A codec server: Temporal's Web UI and CLI decrypt payloads through it.

With ``SUBAGENTS_PAYLOAD_KEY`` set, Temporal holds only ciphertext, so its Web UI and
``temporal workflow show`` print unreadable bytes. Both can call a *remote codec*
instead: ``POST <endpoint>/decode`` (and ``/encode``) with ``{"payloads": [...]}``,
each payload in protobuf JSON (metadata values and data in base64), answered in the same
form. This module serves that protocol with the project's :class:`EncryptionCodec`, so
whoever can reach the server reads the tasks: it binds to 127.0.0.1 by default, answers
only the browser origins it is given (a random web page cannot use it as a decryption
oracle), and can require a bearer token.

It runs on aiohttp, as the approval inbox does, with the inbox's limits on
connections (a deadline for each request head, a share of the connections per peer)
and its origin checks (``_http``): in a thread of its own (:class:`CodecServer`), or in
the foreground (:func:`serve`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payloads

from durable_subagents.cli._http import bearer_matches, normal_origin, origin_of, plain_headers
from durable_subagents.cli.inbox._connections import PeerConnections, listen
from durable_subagents.errors import InvalidRequest, PayloadEncryptionError, SubagentError
from durable_subagents.storage._sealing import KeyRing
from durable_subagents.wire._codec import EncryptionCodec

__all__ = ["DEFAULT_ORIGINS", "CodecServer", "serve", "web_ui_origins"]

logger = logging.getLogger(__name__)

DEFAULT_ORIGINS = ("http://127.0.0.1:8233", "http://localhost:8233")
"""Browser origins answered by default: the Web UI of ``temporal server start-dev``."""

MAX_BODY = 64 * 1024 * 1024
"""The largest request accepted (bytes): far above what the Web UI sends at once."""

_ALLOW_HEADERS = "Content-Type, X-Namespace, Authorization"
_ALLOW_METHODS = "POST, OPTIONS"


def web_ui_origins(port: int, host: str = "127.0.0.1") -> list[str]:
    """The origins a browser gives a Web UI served on ``port`` of this machine.

    The same page is reached as 127.0.0.1 and as localhost, and the two are different
    origins to a browser: allow both, plus ``host`` when it is another name.
    """
    hosts = dict.fromkeys([host, "127.0.0.1", "localhost"])
    return [f"http://{h}:{port}" for h in hosts if h not in ("0.0.0.0", "::", "")]


class CodecServer:
    """Temporal's remote codec protocol over HTTP, serving from a background thread.

    Nothing listens before :meth:`start` (or entering the context); :meth:`stop` closes
    the socket. The thread runs an event loop of its own, so a slow client does not hold
    up the rest, and the caller's loop (if any) is not used. Usable from asyncio code:
    starting only binds a socket, and ``async with`` stops it off the event loop.

    Args:
        keys: The deployment's keys (the current one encodes; any of them decodes).
        host: Address to listen on. The default, 127.0.0.1, keeps it to this machine;
            anything wider should also set ``token``.
        port: Port to listen on; 0 picks a free one (read it back from :attr:`port`).
        token: When set, ``/encode`` and ``/decode`` need ``Authorization: Bearer
            <token>`` (the ``temporal`` CLI sends it with ``--codec-auth``).
        origins: Browser origins (``scheme://host:port``) allowed to call it: the
            addresses the Web UI is opened at. A request from any other origin gets
            403, so other web pages cannot make the browser decrypt through it.
            Requests without an ``Origin`` header (the CLI, scripts) are not browsers
            and are not restricted by it.
        namespaces: When given, only requests whose ``X-Namespace`` header names one of
            these are answered (403 otherwise).

    Raises:
        InvalidRequest: An origin is not ``scheme://host[:port]``, or the token is empty.

    Example:
        >>> with CodecServer(keys, port=0) as server:
        ...     print(server.endpoint)  # temporal workflow show --codec-endpoint ...
    """

    def __init__(
        self,
        keys: KeyRing,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        origins: Iterable[str] = DEFAULT_ORIGINS,
        namespaces: Iterable[str] | None = None,
    ) -> None:
        if token is not None and not token.strip():
            raise InvalidRequest("the codec server's token is empty; give one or none")
        self.host = host
        self._port = port
        self.codec = EncryptionCodec(keys)
        self.token = token
        self.origins = frozenset(normal_origin(o) for o in origins)
        self.namespaces = frozenset(namespaces) if namespaces is not None else None
        self.peers = PeerConnections()
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port it listens on: once started with port 0, the one picked (and kept)."""
        return self._port

    @property
    def endpoint(self) -> str:
        """The URL to give ``--codec-endpoint`` and the Web UI."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        host = "[::1]" if host == "::" else f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    async def _open(self) -> None:
        """Listen, on the running loop."""
        if self._runner is not None:
            raise SubagentError("this codec server is already started")
        runner = web.AppRunner(_app(self), handler_cancellation=True, shutdown_timeout=1.0)
        await runner.setup()
        try:
            listener = await listen(
                runner, self.host, self._port, peers=self.peers, access_log_class=_AccessLog
            )
        except OSError as err:
            await runner.cleanup()
            raise SubagentError(
                f"the codec server cannot listen on {self.host}:{self._port}: {err.strerror}; "
                "choose another port (--codec-port / --port) or stop what listens there"
            ) from None
        self._runner, self._listener = runner, listener
        self._port = int(listener.sockets[0].getsockname()[1])
        logger.debug("codec server listening on %s", self.endpoint)

    async def _close(self) -> None:
        runner, self._runner = self._runner, None
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if runner is not None:
            await runner.cleanup()

    def start(self) -> None:
        """Listen and serve from a daemon thread until :meth:`stop`.

        Raises:
            SubagentError: The address is taken or cannot be bound (the message says
                which), or the server is already started.
        """
        if self._thread is not None:
            raise SubagentError("this codec server is already started")
        loop = asyncio.new_event_loop()
        opened = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._open())
            except BaseException as err:
                failed.append(err)
                opened.set()
                loop.close()
                return
            opened.set()
            try:
                loop.run_forever()
                loop.run_until_complete(self._close())
            finally:
                loop.close()

        thread = threading.Thread(target=run, name="codec-server", daemon=True)
        thread.start()
        opened.wait()
        if failed:
            thread.join()
            raise failed[0]
        self._loop, self._thread = loop, thread

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        loop, self._loop = self._loop, None
        thread, self._thread = self._thread, None
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # its loop ended already
            loop.call_soon_threadsafe(loop.stop)
        thread.join()

    def __enter__(self) -> CodecServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> CodecServer:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.to_thread(self.stop)


def serve(
    keys: KeyRing,
    *,
    host: str = "127.0.0.1",
    port: int = 8081,
    token: str | None = None,
    origins: Iterable[str] = DEFAULT_ORIGINS,
    namespaces: Iterable[str] | None = None,
    on_ready: Callable[[CodecServer], None] | None = None,
) -> None:
    """Run a codec server in this thread until Ctrl-C (for ``subagents codec-server``).

    Args:
        keys: The deployment's keys.
        host: Address to listen on (see :class:`CodecServer`).
        port: Port to listen on.
        token: The bearer token ``/encode`` and ``/decode`` need, if any.
        origins: Browser origins allowed to call it.
        namespaces: Only these ``X-Namespace`` values are answered, when given.
        on_ready: Called once the socket listens (to print where).

    Raises:
        SubagentError: The address cannot be bound.
        InvalidRequest: An origin or the token is malformed.
    """
    server = CodecServer(
        keys, host=host, port=port, token=token, origins=origins, namespaces=namespaces
    )

    async def main() -> None:
        await server._open()
        try:
            if on_ready is not None:
                on_ready(server)
            await asyncio.Event().wait()
        finally:
            await server._close()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


class _AccessLog(AbstractAccessLogger):
    """One debug line per request.

    The request line, status and counts: never a payload or a header (the token is one).
    """

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        version = request.version
        logger.debug(
            'codec server: %s "%s %s HTTP/%d.%d" %s%s',
            request.remote,
            request.method,
            request.raw_path,
            version.major,
            version.minor,
            response.status,
            request.get(_NOTE, ""),
        )


_NOTE = web.RequestKey("codec.note", str)
"""What a request did (payload count, namespace), for its log line."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(body: dict[str, Any], status: int = 200, **headers: str) -> web.Response:
    data = json.dumps(body).encode()
    return web.Response(body=data, status=status, headers=headers, content_type="application/json")


def _error(status: int, message: str, **headers: str) -> web.Response:
    response = _json({"error": message}, status, **headers)
    # The body may be unread: end the connection rather than read it as a request.
    response.force_close()
    return response


def _app(server: CodecServer) -> web.Application:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin, allowed = origin_of(request, server.origins)
        if not allowed:
            response: web.StreamResponse = _error(
                403,
                f"origin {origin} is not allowed to use this codec server; allowed: "
                f"{', '.join(sorted(server.origins)) or 'none'} (add it with --origin)",
            )
        else:
            response = await handler(request)
        if origin is not None and allowed:
            response.headers["Access-Control-Allow-Origin"] = origin.strip().rstrip("/")
            response.headers["Access-Control-Allow-Credentials"] = "true"
            response.headers["Access-Control-Allow-Headers"] = _ALLOW_HEADERS
            response.headers["Access-Control-Allow-Methods"] = _ALLOW_METHODS
        plain_headers(response)
        response.headers["Server"] = "durable-subagents-codec"
        return response

    async def any_request(request: web.Request) -> web.StreamResponse:
        if request.method == "OPTIONS":
            return _preflight(request)
        if request.method == "POST":
            return await _codec(server, request)
        return _error(
            405,
            "this is a Temporal codec server: POST <endpoint>/encode or /decode with "
            '{"payloads": [...]}; give the endpoint to temporal --codec-endpoint or to the '
            "Web UI's codec server setting",
            Allow=_ALLOW_METHODS,
        )

    app = web.Application(middlewares=[guard], client_max_size=MAX_BODY)
    app.router.add_route("*", "/{path:.*}", any_request)
    return app


def _preflight(request: web.Request) -> web.Response:
    """CORS preflight: the browser asks before its cross-origin POST."""
    headers = {"Access-Control-Max-Age": "600", "Allow": _ALLOW_METHODS}
    if request.headers.get("Access-Control-Request-Private-Network") == "true":
        # Chrome asks before a public page (say the cloud UI) calls a local server.
        headers["Access-Control-Allow-Private-Network"] = "true"
    return web.Response(status=204, headers=headers)


async def _codec(server: CodecServer, request: web.Request) -> web.StreamResponse:
    """``/encode`` or ``/decode``: ``{"payloads": [...]}`` in and out."""
    started = time.monotonic()
    namespace = request.headers.get("X-Namespace")
    # The protocol: only the URL's last part says which; a prefix is allowed so that
    # one host can serve several codecs under different paths.
    operation = request.path.rstrip("/").rsplit("/", 1)[-1]
    if operation not in ("encode", "decode"):
        return _error(
            404,
            f"no such endpoint {request.path}: POST <endpoint>/encode or <endpoint>/decode",
        )
    if server.token is not None and not bearer_matches(request, server.token):
        return _error(
            401,
            "this codec server needs the header Authorization: Bearer <token> with its "
            "token (temporal CLI: --codec-auth 'Bearer <token>')",
            **{"WWW-Authenticate": 'Bearer realm="codec"'},
        )
    if server.namespaces is not None and namespace not in server.namespaces:
        return _error(
            403,
            f"namespace {namespace or '(no X-Namespace header)'} is not served here; "
            f"served: {', '.join(sorted(server.namespaces))}",
        )
    payloads = await _read_payloads(request)
    if isinstance(payloads, web.Response):
        return payloads
    work = server.codec.encode_sync if operation == "encode" else server.codec.decode_sync
    try:
        out = await asyncio.to_thread(work, payloads.payloads)
    except PayloadEncryptionError as err:
        return _error(422, str(err), **{"X-Key-Id": err.key_id})
    except DecodeError as err:  # opened, but not a Payload message inside
        return _error(400, f"a decrypted payload does not parse: {err}")
    request[_NOTE] = (
        f" {len(out)} payload(s), namespace {namespace or '-'}, "
        f"{1000 * (time.monotonic() - started):.1f} ms"
    )
    return _json(MessageToDict(Payloads(payloads=out)))


async def _read_payloads(request: web.Request) -> Payloads | web.Response:
    if request.headers.get("Transfer-Encoding") or request.content_length is None:
        return _error(411, 'send the body with a Content-Length: {"payloads": [...]}')
    if not 0 <= request.content_length <= MAX_BODY:
        return _error(413, f"the body must be 0 to {MAX_BODY} bytes (send fewer payloads at once)")
    raw = await request.read()
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        return _error(400, f"the body is not JSON: {err}")
    items = body.get("payloads") if isinstance(body, dict) else None
    if not isinstance(items, list) or not all(isinstance(p, dict) for p in items):
        return _error(
            400,
            'the body must be {"payloads": [...]}: each payload in protobuf JSON, its '
            "metadata values and data in base64",
        )
    try:
        return ParseDict(body, Payloads(), ignore_unknown_fields=True)
    except ParseError as err:
        return _error(
            400,
            "a payload is not a temporal.api.common.v1.Payload in protobuf JSON (metadata "
            f"values and data in base64): {err}",
        )
