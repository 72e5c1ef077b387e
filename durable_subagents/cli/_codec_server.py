"""A codec server: Temporal's Web UI and CLI decrypt payloads through it.

With ``SUBAGENTS_PAYLOAD_KEY`` set, Temporal holds only ciphertext, so its Web UI and
``temporal workflow show`` print unreadable bytes. Both can call a *remote codec*
instead: ``POST <endpoint>/decode`` (and ``/encode``) with ``{"payloads": [...]}``,
each payload in protobuf JSON (metadata values and data in base64), answered in the same
form. This module serves that protocol with the project's :class:`EncryptionCodec`, so
whoever can reach the server reads the tasks: it binds to 127.0.0.1 by default, answers
only the browser origins it is given (a random web page cannot use it as a decryption
oracle), and can require a bearer token.

The codec is synchronous and fast, so the standard library's threading HTTP server is
enough; it runs in a thread (:class:`CodecServer`) or in the foreground (:func:`serve`).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payloads

from durable_subagents._codec import EncryptionCodec
from durable_subagents.errors import InvalidRequest, PayloadEncryptionError, SubagentError
from durable_subagents.storage._sealing import KeyRing

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


def _normal_origin(origin: str) -> str:
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


class CodecServer:
    """Temporal's remote codec protocol over HTTP, serving from a background thread.

    Nothing listens before :meth:`start` (or entering the context); :meth:`stop` closes
    the socket. Requests run in their own threads, so a slow client does not hold up
    the rest. Usable from asyncio code: starting only binds a socket, and ``async with``
    stops it off the event loop.

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
        self.origins = frozenset(_normal_origin(o) for o in origins)
        self.namespaces = frozenset(namespaces) if namespaces is not None else None
        self._httpd: _HTTPServer | None = None
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

    def _bind(self) -> _HTTPServer:
        if self._httpd is not None:
            raise SubagentError("this codec server is already started")
        try:
            self._httpd = _HTTPServer((self.host, self._port), self)
        except OSError as err:
            raise SubagentError(
                f"the codec server cannot listen on {self.host}:{self._port}: {err.strerror}; "
                "choose another port (--codec-port / --port) or stop what listens there"
            ) from None
        self._port = int(self._httpd.server_address[1])
        return self._httpd

    def start(self) -> None:
        """Listen and serve from a daemon thread until :meth:`stop`.

        Raises:
            SubagentError: The address is taken or cannot be bound (the message says
                which), or the server is already started.
        """
        httpd = self._bind()
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"codec-server:{self.port}",
            daemon=True,
        )
        self._thread.start()
        logger.debug("codec server listening on %s", self.endpoint)

    def stop(self) -> None:
        """Stop serving and close the socket (blocks up to ~0.1 s; idempotent)."""
        httpd, self._httpd = self._httpd, None
        thread, self._thread = self._thread, None
        if httpd is None:
            return
        if thread is not None:
            httpd.shutdown()
            thread.join()
        httpd.server_close()

    def __enter__(self) -> CodecServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> CodecServer:
        self.start()
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
    httpd = server._bind()
    try:
        if on_ready is not None:
            on_ready(server)
        httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server._httpd = None
        httpd.server_close()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], owner: CodecServer) -> None:
        self.owner = owner
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The default prints a traceback to stderr even for a client that hung up,
        # which is routine (a browser leaving the page); anything else is a bug.
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            logger.debug("codec server: %s went away: %s", client_address[0], error)
        else:
            logger.warning("codec server: a request failed", exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    """One request: CORS and token checks, then the codec."""

    server: _HTTPServer
    protocol_version = "HTTP/1.1"

    def version_string(self) -> str:
        return "durable-subagents-codec"

    note = ""
    """What the request did (payload count, namespace), for its log line."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        # One debug line per request: the request line, status and counts, never a
        # payload or a header (the token is one).
        code = code.value if isinstance(code, HTTPStatus) else code
        logger.debug(
            'codec server: %s "%s" %s%s', self.address_string(), self.requestline, code, self.note
        )
        self.note = ""  # a kept-alive connection's next request starts afresh

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("codec server: %s %s", self.address_string(), format % args)

    # ------------------------------------------------------------------ helpers

    def _origin(self) -> tuple[str | None, bool]:
        """The request's Origin header and whether it may be answered."""
        origin = self.headers.get("Origin")
        if origin is None:
            return None, True
        return origin, origin.strip().rstrip("/").lower() in self.server.owner.origins

    def _send(
        self, status: HTTPStatus, body: dict[str, Any] | None, extra: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        origin, allowed = self._origin()
        if origin is not None and allowed:
            self.send_header("Access-Control-Allow-Origin", origin.strip().rstrip("/"))
            self.send_header("Access-Control-Allow-Credentials", "true")
            self.send_header("Access-Control-Allow-Headers", _ALLOW_HEADERS)
            self.send_header("Access-Control-Allow-Methods", _ALLOW_METHODS)
        self.send_header("Vary", "Origin")
        self.send_header("Cache-Control", "no-store")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data and self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, status: HTTPStatus, message: str, **extra: str) -> None:
        # The body may be unread: end the connection rather than read it as a request.
        self._send(status, {"error": message}, {**extra, "Connection": "close"})

    def _refuse_origin(self) -> bool:
        origin, allowed = self._origin()
        if allowed:
            return False
        self._error(
            HTTPStatus.FORBIDDEN,
            f"origin {origin} is not allowed to use this codec server; allowed: "
            f"{', '.join(sorted(self.server.owner.origins)) or 'none'} (add it with --origin)",
        )
        return True

    def _operation(self) -> str | None:
        # The protocol: only the URL's last part says which; a prefix is allowed so
        # that one host can serve several codecs under different paths.
        last = urlsplit(self.path).path.rstrip("/").rsplit("/", 1)[-1]
        return last if last in ("encode", "decode") else None

    def _authorized(self) -> bool:
        token = self.server.owner.token
        if token is None:
            return True
        scheme, _, given = (self.headers.get("Authorization") or "").strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), token.encode()
        )

    def _read_payloads(self) -> Payloads | None:
        length_text = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding") or length_text is None:
            self._error(
                HTTPStatus.LENGTH_REQUIRED,
                'send the body with a Content-Length: {"payloads": [...]}',
            )
            return None
        try:
            length = int(length_text)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self._error(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"the body must be 0 to {MAX_BODY} bytes (send fewer payloads at once)",
            )
            return None
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as err:
            self._error(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {err}")
            return None
        items = body.get("payloads") if isinstance(body, dict) else None
        if not isinstance(items, list) or not all(isinstance(p, dict) for p in items):
            self._error(
                HTTPStatus.BAD_REQUEST,
                'the body must be {"payloads": [...]}: each payload in protobuf JSON, '
                "its metadata values and data in base64",
            )
            return None
        try:
            return ParseDict(body, Payloads(), ignore_unknown_fields=True)
        except ParseError as err:
            self._error(
                HTTPStatus.BAD_REQUEST,
                f"a payload is not a temporal.api.common.v1.Payload in protobuf JSON "
                f"(metadata values and data in base64): {err}",
            )
            return None

    # ------------------------------------------------------------------ methods

    def do_OPTIONS(self) -> None:
        """CORS preflight: the browser asks before its cross-origin POST."""
        if self._refuse_origin():
            return
        extra = {"Access-Control-Max-Age": "600", "Allow": _ALLOW_METHODS}
        if self.headers.get("Access-Control-Request-Private-Network") == "true":
            # Chrome asks before a public page (say the cloud UI) calls a local server.
            extra["Access-Control-Allow-Private-Network"] = "true"
        self._send(HTTPStatus.NO_CONTENT, None, extra)

    def do_POST(self) -> None:
        """``/encode`` or ``/decode``: ``{"payloads": [...]}`` in and out."""
        started = time.monotonic()
        owner = self.server.owner
        namespace = self.headers.get("X-Namespace")
        if self._refuse_origin():
            return
        operation = self._operation()
        if operation is None:
            self._error(
                HTTPStatus.NOT_FOUND,
                f"no such endpoint {urlsplit(self.path).path}: POST <endpoint>/encode or "
                "<endpoint>/decode",
            )
            return
        if not self._authorized():
            self._error(
                HTTPStatus.UNAUTHORIZED,
                "this codec server needs the header Authorization: Bearer <token> with "
                "its token (temporal CLI: --codec-auth 'Bearer <token>')",
                **{"WWW-Authenticate": 'Bearer realm="codec"'},
            )
            return
        if owner.namespaces is not None and namespace not in owner.namespaces:
            self._error(
                HTTPStatus.FORBIDDEN,
                f"namespace {namespace or '(no X-Namespace header)'} is not served here; "
                f"served: {', '.join(sorted(owner.namespaces))}",
            )
            return
        payloads = self._read_payloads()
        if payloads is None:
            return
        try:
            if operation == "encode":
                out = owner.codec.encode_sync(payloads.payloads)
            else:
                out = owner.codec.decode_sync(payloads.payloads)
        except PayloadEncryptionError as err:
            self._error(HTTPStatus.UNPROCESSABLE_ENTITY, str(err), **{"X-Key-Id": err.key_id})
            return
        except DecodeError as err:  # opened, but not a Payload message inside
            self._error(HTTPStatus.BAD_REQUEST, f"a decrypted payload does not parse: {err}")
            return
        self.note = (
            f" {len(out)} payload(s), namespace {namespace or '-'}, "
            f"{1000 * (time.monotonic() - started):.1f} ms"
        )
        self._send(HTTPStatus.OK, MessageToDict(Payloads(payloads=out)))

    def do_GET(self) -> None:
        """Say what this is, to someone who opens the URL in a browser."""
        if self._refuse_origin():
            return
        self._error(
            HTTPStatus.METHOD_NOT_ALLOWED,
            "this is a Temporal codec server: POST <endpoint>/encode or /decode with "
            '{"payloads": [...]}; give the endpoint to temporal --codec-endpoint or to the '
            "Web UI's codec server setting",
            Allow=_ALLOW_METHODS,
        )
