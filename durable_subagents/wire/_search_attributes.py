"""The four custom search attributes a namespace needs (never rename them)."""

from __future__ import annotations

import shlex
from urllib.parse import quote

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from durable_subagents.errors import SubagentError

STATUS = SearchAttributeKey.for_keyword("SubagentStatus")
AGENT = SearchAttributeKey.for_keyword("SubagentAgent")
PARENT = SearchAttributeKey.for_keyword("SubagentParent")
TURNS = SearchAttributeKey.for_int("SubagentTurns")

ALL = (STATUS, AGENT, PARENT, TURNS)
"""Every custom search attribute the workflow writes."""


def cli_flags() -> list[str]:
    """``--search-attribute NAME=Type`` flags for ``temporal server start-dev``."""
    out = []
    for key in ALL:
        out += ["--search-attribute", f"{key.name}={_type_name(key)}"]
    return out


def register_command(namespace: str = "default", address: str | None = None) -> str:
    """The ``temporal operator`` commands that register the attributes on any server.

    Args:
        namespace: The namespace.
        address: The server's ``host:port``, named in each command: without it the
            ``temporal`` CLI goes to its own default (``localhost:7233``).
    """
    at = f"--address {shlex.quote(address)} " if address else ""
    return "\n".join(
        f"temporal operator search-attribute create {at}--namespace {shlex.quote(namespace)} "
        f"--name {key.name} --type {_type_name(key)}"
        for key in ALL
    )


def tasks_query(*, status: str | None = None, agent: str | None = None) -> str:
    """A list filter on this library's search attributes, as the Web UI's query box takes it.

    Example:
        >>> tasks_query(status="paused")
        'SubagentStatus="paused"'
    """
    terms = [f'{key.name}="{value}"' for key, value in ((STATUS, status), (AGENT, agent)) if value]
    return " AND ".join(terms)


def web_ui_tasks_url(ui_url: str, namespace: str, query: str) -> str:
    """The Web UI's workflow list of ``namespace`` filtered by ``query``.

    A paused task is a running workflow to Temporal; ``SubagentStatus="paused"`` finds it.

    Example:
        >>> web_ui_tasks_url("http://127.0.0.1:8233", "default", 'SubagentStatus="paused"')
        'http://127.0.0.1:8233/namespaces/default/workflows?query=SubagentStatus%3D%22paused%22'
    """
    namespace_part = quote(namespace, safe="")
    return (
        f"{ui_url.rstrip('/')}/namespaces/{namespace_part}/workflows?query={quote(query, safe='')}"
    )


async def missing_search_attributes(client: Client, namespace: str) -> list[str]:
    """Names of this library's custom search attributes not registered in ``namespace``."""
    response = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    have = response.custom_attributes
    return [key.name for key in ALL if key.name not in have]


async def ensure_search_attributes(client: Client, namespace: str) -> None:
    """Register the custom search attributes ``namespace`` lacks; a no-op when none do.

    A server that cannot list them (Temporal's time-skipping test server) gets all four
    added, and the ones it has already are left as they are.
    """
    try:
        missing = set(await missing_search_attributes(client, namespace))
    except RPCError as err:
        if err.status != RPCStatusCode.UNIMPLEMENTED:
            raise
        missing = {key.name for key in ALL}
    if not missing:
        return
    attributes = {
        key.name: IndexedValueType.ValueType(key.indexed_value_type)
        for key in ALL
        if key.name in missing
    }
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=namespace, search_attributes=attributes)
        )
    except RPCError as err:
        if err.status != RPCStatusCode.ALREADY_EXISTS:
            raise SubagentError(
                f"could not register search attributes {sorted(missing)} in namespace "
                f"{namespace!r}: {err.message}; register them by hand:\n"
                + register_command(namespace, _address(client))
            ) from err


def _address(client: Client) -> str | None:
    target = client.service_client.config.target_host
    return target if isinstance(target, str) and target else None


def _type_name(key: SearchAttributeKey) -> str:
    return "Int" if key is TURNS else "Keyword"
