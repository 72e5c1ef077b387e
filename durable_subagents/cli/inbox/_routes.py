"""The inbox's HTTP API, declared once: its routes, their errors, its OpenAPI document.

The router (``_api``) and the OpenAPI document are both made from ``ROUTES``, so the
document cannot drift from what is served. Errors are the client's typed errors under
HTTP statuses (``ERROR_STATUS``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from durable_subagents.cli.inbox._inbox import (
    CancelRequest,
    DecisionRequest,
    DecisionResult,
    EventPage,
    InboxView,
    InputRequest,
    PauseView,
    RejectRequest,
    TaskList,
)
from durable_subagents.errors import (
    BlobNotFound,
    BlobStoreUnavailable,
    InvalidRequest,
    PayloadTooLarge,
    SubagentError,
    TaskNotFound,
    TemporalUnavailable,
    UnknownCallId,
    WrongTaskState,
)
from durable_subagents.types import TaskInfo

__all__ = [
    "ERROR_STATUS",
    "MAX_WAIT",
    "ROUTES",
    "ErrorBody",
    "Param",
    "Route",
    "openapi",
    "status_of",
]

MAX_WAIT = 60.0
"""Longest long poll of ``/api/inbox`` (seconds)."""

_ERROR_TEXT = {
    400: "The request is malformed or cannot be done (the message says why)",
    401: "No token, or not one of the server's",
    403: "The token may not do this (a viewer's cannot decide), or the origin is not allowed",
    404: "No such task, or not one the token reaches",
    408: "The body did not arrive in time (the server's body deadline, 30 s by default)",
    409: "The task is not in a state for it: not paused, or the pause or a call changed "
    "since it was read (nothing was decided)",
    413: "The body or a text in it is too large",
    503: "Temporal or the blob store does not answer",
}


ERROR_STATUS: list[tuple[type[SubagentError], int]] = [
    (TaskNotFound, 404),
    (UnknownCallId, 409),
    (WrongTaskState, 409),
    (PayloadTooLarge, 413),
    (InvalidRequest, 400),
    (BlobNotFound, 404),
    (BlobStoreUnavailable, 503),
    (TemporalUnavailable, 503),
]
"""The client's typed errors and their HTTP statuses, first match wins (others: 500)."""


class ErrorBody(BaseModel):
    """An error: the client's one-line message, and the error's type."""

    error: str
    type: str
    status: str | None = None
    """For ``WrongTaskState``: the state the task is in."""


@dataclass(frozen=True)
class Param:
    """A query parameter."""

    name: str
    schema: dict[str, Any]
    description: str


@dataclass(frozen=True)
class Route:
    """One operation of the API: what the router serves and the document describes."""

    method: str
    path: str
    operation: str
    summary: str
    response: type[BaseModel]
    request: type[BaseModel] | None = None
    decides: bool = False
    """Needs an approver token (a viewer's gets 403)."""
    query: tuple[Param, ...] = ()
    errors: tuple[int, ...] = field(default=(401,))


_TASK_ERRORS = (400, 401, 404, 503)
ROUTES = (
    Route(
        "GET",
        "/api/inbox",
        "inbox",
        "The paused task trees: each with its pause and every call that waits in it. "
        "With `wait`, a long poll: it answers once the inbox differs from `since`, or "
        "after `wait` seconds.",
        InboxView,
        query=(
            Param("wait", {"type": "number", "minimum": 0, "maximum": MAX_WAIT}, "Seconds to wait"),
            Param("since", {"type": "string"}, "The version the caller has"),
        ),
        errors=(400, 401, 503),
    ),
    Route(
        "GET",
        "/api/tasks",
        "list_tasks",
        "Tasks of the namespace, newest first (those the token reaches).",
        TaskList,
        query=(
            Param("parent_id", {"type": "string"}, "Only tasks spawned with this parent id"),
            Param("status", {"type": "string"}, "Only tasks in this status"),
        ),
        errors=(400, 401, 503),
    ),
    Route(
        "GET",
        "/api/tasks/{task_id}",
        "check_task",
        "A task's state.",
        TaskInfo,
        errors=_TASK_ERRORS,
    ),
    Route(
        "GET",
        "/api/tasks/{task_id}/pause",
        "pause",
        "The task's current pause, each call with its full arguments: read this before "
        "deciding, and send back the pause id and the calls as read.",
        PauseView,
        errors=(*_TASK_ERRORS, 409),
    ),
    Route(
        "GET",
        "/api/tasks/{task_id}/events",
        "events",
        "The task's events after an offset, each with its `offset` (the model's text as "
        "it streams, tool calls, status); with `tree`, its subagents' too. With `wait`, a "
        "long poll: it answers once events came, or after `wait` seconds.",
        EventPage,
        query=(
            Param("after", {"type": "integer", "minimum": 0}, "Only events after this offset"),
            Param("tree", {"type": "boolean"}, "Also the events of every task below it"),
            Param("wait", {"type": "number", "minimum": 0, "maximum": MAX_WAIT}, "Seconds to wait"),
        ),
        errors=_TASK_ERRORS,
    ),
    Route(
        "POST",
        "/api/tasks/{task_id}/approve",
        "approve",
        "Approve calls of the pause read, bound to the pause id and each call's argument "
        "hash: a pause that changed since it was read is refused (409), and nothing is "
        "decided.",
        DecisionResult,
        DecisionRequest,
        decides=True,
        errors=(*_TASK_ERRORS, 403, 408, 409, 413),
    ),
    Route(
        "POST",
        "/api/tasks/{task_id}/reject",
        "reject",
        "Reject calls of the pause read (bound as approve); the model reads the reason.",
        DecisionResult,
        RejectRequest,
        decides=True,
        errors=(*_TASK_ERRORS, 403, 408, 409, 413),
    ),
    Route(
        "POST",
        "/api/tasks/{task_id}/input",
        "send_input",
        "Send steering input to a running or paused task, or continue a completed one.",
        TaskInfo,
        InputRequest,
        decides=True,
        errors=(*_TASK_ERRORS, 403, 408, 409, 413),
    ),
    Route(
        "POST",
        "/api/tasks/{task_id}/cancel",
        "cancel_task",
        "Cancel a task (its model call and tool processes are stopped).",
        TaskInfo,
        CancelRequest,
        decides=True,
        errors=(*_TASK_ERRORS, 403, 408),
    ),
)
"""The API, in the order the document lists it."""


def status_of(err: SubagentError) -> int:
    for kind, status in ERROR_STATUS:
        if isinstance(err, kind):
            return status
    return 500


def openapi(server_url: str | None = None) -> dict[str, Any]:
    """The API's OpenAPI 3.1 document, made from ``ROUTES`` and the pydantic models."""
    models: list[type[BaseModel]] = [ErrorBody]
    for route in ROUTES:
        models += [route.response] + ([route.request] if route.request else [])
    unique = list(dict.fromkeys(models))
    _, defs = models_json_schema(
        [(m, "validation") for m in unique], ref_template="#/components/schemas/{model}"
    )
    schemas = defs.get("$defs", {})
    paths: dict[str, Any] = {}
    for route in ROUTES:
        operation: dict[str, Any] = {
            "operationId": route.operation,
            "summary": route.summary,
            "security": [{"bearer": []}],
            "responses": {
                "200": {
                    "description": "OK",
                    "content": {
                        "application/json": {
                            "schema": {"$ref": f"#/components/schemas/{route.response.__name__}"}
                        }
                    },
                },
                **{
                    str(code): {
                        "description": _ERROR_TEXT[code],
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/ErrorBody"}
                            }
                        },
                    }
                    for code in sorted(set(route.errors))
                },
            },
        }
        parameters = [
            {
                "name": p.name,
                "in": "query",
                "required": False,
                "schema": p.schema,
                "description": p.description,
            }
            for p in route.query
        ]
        if "{task_id}" in route.path:
            parameters.insert(
                0,
                {
                    "name": "task_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                    "description": "The task (the top task of a tree, to decide its calls)",
                },
            )
        if parameters:
            operation["parameters"] = parameters
        if route.request is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {"$ref": f"#/components/schemas/{route.request.__name__}"}
                    }
                },
            }
        if route.decides:
            operation["description"] = "Needs an approver token."
        paths.setdefault(route.path, {})[route.method.lower()] = operation
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "durable-subagents inbox",
            "version": "1",
            "description": "Paused subagent tasks and their decisions. Every operation "
            "needs a bearer token; approve, reject, input and cancel need an approver's.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
    if server_url:
        document["servers"] = [{"url": server_url}]
    return document
