r"""The inbox over HTTP: a JSON API, its OpenAPI document, and the page that uses it.

Every ``/api`` request needs ``Authorization: Bearer <token>``; nothing is read from
a cookie, so no other site can make a browser decide through it. Browsers may call it
from its own page and from the origins it is given, and from no other (403). Errors
are the client's typed errors with their one-line messages, under HTTP statuses
(``ERROR_STATUS``). What a model wrote leaves as JSON data, with control, bidi and
invisible characters as ``\uXXXX`` escapes, and the page shows it as text.

The routes are declared once, in ``_routes``: the router here and the OpenAPI document
are both made from that table, so the document cannot drift from what is served.
Every request has a deadline and every peer a share of the connections (``_connections``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from importlib import resources
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from pydantic import BaseModel, ValidationError
from temporalio.service import RPCError

from durable_subagents.cli._http import normal_origin, origin_of, plain_headers
from durable_subagents.cli.inbox._access import Grant, Tokens
from durable_subagents.cli.inbox._connections import (
    BODY_TIMEOUT,
    HEAD_TIMEOUT,
    MAX_PER_PEER,
    PeerConnections,
    listen,
)
from durable_subagents.cli.inbox._inbox import (
    CancelRequest,
    DecisionRequest,
    Inbox,
    InputRequest,
    RejectRequest,
    TaskList,
)
from durable_subagents.cli.inbox._routes import (
    MAX_WAIT,
    ROUTES,
    ErrorBody,
    Route,
    openapi,
    status_of,
)
from durable_subagents.errors import (
    InvalidRequest,
    SubagentError,
)
from durable_subagents.wording._error_wording import for_http
from durable_subagents.wording._terminal import UNSAFE, json_shown

__all__ = ["InboxServer", "build_app"]

log = logging.getLogger(__name__)

MAX_BODY = 1024 * 1024
"""Largest request body (a decision names at most a few thousand calls)."""
_PAGE = resources.files("durable_subagents.cli.inbox") / "page"
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_ALLOW_HEADERS = "Authorization, Content-Type"
_WHO: Any = web.RequestKey("who", str) if hasattr(web, "RequestKey") else "who"
"""The name of the token a request came with (its log line says who, never the token)."""


def _json(model: BaseModel | dict[str, Any], status: int = 200) -> web.Response:
    text = model.model_dump_json() if isinstance(model, BaseModel) else json.dumps(model)
    return web.Response(
        status=status, body=json_shown(text).encode(), content_type="application/json"
    )


def _error(status: int, message: str, kind: str, state: str | None = None) -> web.Response:
    response = _json(ErrorBody(error=message, type=kind, status=state), status)
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="subagents inbox"'
    return response


class _Api:
    """The handlers: each checks the token's role and scope, then asks the inbox."""

    def __init__(self, inbox: Inbox) -> None:
        self.inbox = inbox

    async def inbox_view(self, request: web.Request, grant: Grant, _: None) -> BaseModel:
        wait = _number(request.query.get("wait"), "wait", MAX_WAIT)
        since = request.query.get("since")
        if wait:
            return await self.inbox.wait(grant, since, wait)
        return await self.inbox.view(grant)

    async def list_tasks(self, request: web.Request, grant: Grant, _: None) -> BaseModel:
        query = request.query
        tasks = await self.inbox.tasks(grant, query.get("parent_id"), query.get("status"))
        return TaskList(tasks=tasks)

    async def check_task(self, request: web.Request, grant: Grant, _: None) -> BaseModel:
        return await self.inbox.task(grant, request.match_info["task_id"])

    async def pause(self, request: web.Request, grant: Grant, _: None) -> BaseModel:
        return await self.inbox.pause(grant, request.match_info["task_id"])

    async def events(self, request: web.Request, grant: Grant, _: None) -> BaseModel:
        query = request.query
        wait = _number(query.get("wait"), "wait", MAX_WAIT)
        tree = query.get("tree", "false").lower() in ("1", "true")
        after = _offset(query.get("after"))
        return await self.inbox.events(grant, request.match_info["task_id"], after, tree, wait)

    async def approve(self, request: web.Request, grant: Grant, body: DecisionRequest) -> BaseModel:
        task_id = request.match_info["task_id"]
        return await self.inbox.decide(grant, task_id, body, approved=True)

    async def reject(self, request: web.Request, grant: Grant, body: RejectRequest) -> BaseModel:
        task_id = request.match_info["task_id"]
        return await self.inbox.decide(grant, task_id, body, approved=False)

    async def send_input(self, request: web.Request, grant: Grant, body: InputRequest) -> BaseModel:
        task_id = request.match_info["task_id"]
        await self.inbox.task(grant, task_id)
        info = await self.inbox.client.send_input(task_id, body.text)
        self.inbox.changed()
        return info

    async def cancel_task(
        self, request: web.Request, grant: Grant, body: CancelRequest
    ) -> BaseModel:
        task_id = request.match_info["task_id"]
        await self.inbox.task(grant, task_id)
        info = await self.inbox.client.cancel_task(task_id, wait=body.wait, timeout=body.timeout)
        self.inbox.changed()
        return info


def _offset(text: str | None) -> int | None:
    """The ``after`` query parameter: an offset (0 or more), or None when not given."""
    if text is None or text == "":
        return None
    if not text.isdecimal():
        raise InvalidRequest(f"after must be an offset (an integer, 0 or more), not {text!r}")
    return int(text)


def _number(text: str | None, name: str, most: float) -> float:
    if text is None or text == "":
        return 0.0
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= most:
        raise InvalidRequest(f"{name} must be a number of seconds from 0 to {most:g}")
    return value


Handler = Callable[[web.Request, Grant, Any], Awaitable[BaseModel]]


def _bearer(request: web.Request) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _endpoint(
    route: Route, handler: Handler, tokens: Tokens, body_timeout: float
) -> Callable[..., Any]:
    async def serve(request: web.Request) -> web.StreamResponse:
        token = _bearer(request)
        grant = tokens.find(token) if token is not None else None
        if grant is None:
            return _error(
                401,
                "send Authorization: Bearer <token>, a token this server was given "
                "(--tokens or SUBAGENTS_INBOX_TOKEN)"
                if token is None
                else "this token is not one of the server's",
                "Unauthorized",
            )
        request[_WHO] = grant.name
        if route.decides and not grant.may_decide:
            return _error(
                403,
                f"token {grant.name!r} is a viewer: it reads the inbox; deciding, sending "
                "input and cancelling need an approver token",
                "Forbidden",
            )
        body: BaseModel | None = None
        if route.request is not None:
            try:
                async with asyncio.timeout(body_timeout):
                    raw = await request.read()
            except TimeoutError:
                # A body trickled in would hold the connection for as long as it lasts.
                response = _error(
                    408,
                    f"the request body did not arrive within {body_timeout:g} s; send it at once",
                    "RequestTimeout",
                )
                response.force_close()
                return response
            try:
                body = route.request.model_validate_json(raw or b"{}")
            except ValidationError as err:
                first = err.errors()[0]
                where = ".".join(str(p) for p in first["loc"]) or "body"
                raise InvalidRequest(
                    f"the body is not a {route.request.__name__}: {where}: {first['msg']}"
                ) from None
        return _json(await handler(request, grant, body))

    return serve


class _AccessLog(AbstractAccessLogger):
    """One line per request: who (the token's name, never the token), what, the status."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.info(
            '%s %s "%s %s" %s %.3fs',
            request.remote,
            request.get(_WHO, "-"),
            request.method,
            request.path,
            response.status,
            time,
        )


def build_app(
    inbox: Inbox,
    tokens: Tokens,
    *,
    origins: Iterable[str] = (),
    body_timeout: float = BODY_TIMEOUT,
) -> web.Application:
    """The aiohttp application: the API, its document and the page.

    Args:
        inbox: What the API reads and decides through.
        tokens: Who may use it.
        origins: Browser origins besides the page's own that may call the API
            (``scheme://host:port``); any other origin's request gets 403.
        body_timeout: Seconds a request has to send its body once its head arrived
            (408 after).

    Raises:
        InvalidRequest: an origin is not ``scheme://host[:port]``.
    """
    allowed = frozenset(normal_origin(o) for o in origins)

    @web.middleware
    async def guard(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        origin, ok = origin_of(request, allowed, own=True)
        api = request.path.startswith("/api/")
        if not ok:
            response: web.StreamResponse = _error(
                403,
                f"origin {origin} may not call this server; start it with --origin {origin} "
                "to allow that page",
                "Forbidden",
            )
        elif request.method == "OPTIONS" and api:
            response = web.Response(status=204)
        else:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                response = _error(exc.status, exc.reason, type(exc).__name__)
            except SubagentError as err:
                message = for_http(str(err), request.match_info.get("task_id"))
                response = _error(
                    status_of(err), message, type(err).__name__, getattr(err, "status", None)
                )
            except RPCError as err:
                response = _error(
                    503, f"Temporal refused or did not answer: {err.message}", "RPCError"
                )
        if origin is not None and ok:
            response.headers["Access-Control-Allow-Origin"] = origin.strip().rstrip("/")
            response.headers["Access-Control-Allow-Headers"] = _ALLOW_HEADERS
            response.headers["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
            response.headers["Access-Control-Max-Age"] = "600"
        plain_headers(response)
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Content-Security-Policy"] = _CSP
        return response

    app = web.Application(middlewares=[guard], client_max_size=MAX_BODY)
    api = _Api(inbox)
    handlers: dict[str, Handler] = {
        "inbox": api.inbox_view,
        "list_tasks": api.list_tasks,
        "check_task": api.check_task,
        "pause": api.pause,
        "events": api.events,
        "approve": api.approve,
        "reject": api.reject,
        "send_input": api.send_input,
        "cancel_task": api.cancel_task,
    }
    for route in ROUTES:
        app.router.add_route(
            route.method,
            route.path,
            _endpoint(route, handlers[route.operation], tokens, body_timeout),
        )

    document = json.dumps(openapi(), indent=2)
    script = (_PAGE / "inbox.js").read_text().replace('"__UNSAFE__"', json.dumps(UNSAFE))
    page = {
        "/": ((_PAGE / "index.html").read_text(), "text/html"),
        "/inbox.js": (script, "text/javascript"),
        "/inbox.css": ((_PAGE / "inbox.css").read_text(), "text/css"),
    }

    async def openapi_document(request: web.Request) -> web.StreamResponse:
        return web.Response(text=document, content_type="application/json")

    def static(path: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        text, kind = page[path]

        async def serve(request: web.Request) -> web.StreamResponse:
            return web.Response(text=text, content_type=kind, charset="utf-8")

        return serve

    app.router.add_get("/api/openapi.json", openapi_document)
    for path in page:
        app.router.add_get(path, static(path))
    return app


class InboxServer:
    """``subagents serve``'s HTTP server: start it, read :attr:`url`, stop it.

    Args:
        inbox: What it serves.
        tokens: Who may use it.
        host: Address to listen on (127.0.0.1 keeps it to this machine).
        port: Port; 0 picks a free one.
        origins: Other browser origins allowed to call the API.
        max_per_peer: Connections one peer address may hold at once; more are
            answered 429 and closed (behind a proxy, every client is the proxy's address).
        head_timeout: Seconds a connection has to send a request head.
        body_timeout: Seconds a request has to send its body.
    """

    def __init__(
        self,
        inbox: Inbox,
        tokens: Tokens,
        *,
        host: str = "127.0.0.1",
        port: int = 8090,
        origins: Iterable[str] = (),
        max_per_peer: int = MAX_PER_PEER,
        head_timeout: float = HEAD_TIMEOUT,
        body_timeout: float = BODY_TIMEOUT,
    ) -> None:
        self.app = build_app(inbox, tokens, origins=origins, body_timeout=body_timeout)
        self.host = host
        self.port = port
        self.peers = PeerConnections(max_per_peer)
        self.head_timeout = head_timeout
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None

    @property
    def url(self) -> str:
        """Where the page is (127.0.0.1 for a server on every interface)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        """Listen.

        Raises:
            SubagentError: the address is taken or cannot be bound.
        """
        # Long polls would hold a stop up for their whole wait: a page polls again.
        runner = web.AppRunner(self.app, handler_cancellation=True, shutdown_timeout=1.0)
        await runner.setup()
        try:
            listener = await listen(
                runner,
                self.host,
                self.port,
                peers=self.peers,
                head_timeout=self.head_timeout,
                access_log_class=_AccessLog,
            )
        except OSError as err:
            await runner.cleanup()
            raise SubagentError(
                f"the inbox cannot listen on {self.host}:{self.port}: {err.strerror}; choose "
                "another port (--port) or stop what listens there"
            ) from None
        self._runner, self._listener = runner, listener
        if self.port == 0:
            self.port = int(listener.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Stop listening (idempotent)."""
        runner, self._runner = self._runner, None
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> InboxServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
