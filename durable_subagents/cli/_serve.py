"""``subagents serve``: the approval inbox, a page and a JSON API over HTTP.

The inbox itself (``inbox``) is imported only when the command runs.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Annotated

import typer

from durable_subagents.cli._common import (
    Address,
    Namespace,
    Profile,
    TaskQueue,
    console,
    fail,
    make_settings,
    run,
)
from durable_subagents.errors import SubagentError

__all__ = ["serve"]


def serve(
    address: Address = None,
    namespace: Namespace = None,
    profile: Profile = None,
    task_queue: TaskQueue = None,
    port: Annotated[int, typer.Option(help="Port to listen on", min=0, max=65535)] = 8090,
    host: Annotated[
        str,
        typer.Option(
            help="Address to listen on; other than 127.0.0.1, put TLS in front (tokens "
            "travel in each request)"
        ),
    ] = "127.0.0.1",
    tokens: Annotated[
        Path | None,
        typer.Option(
            "--tokens",
            envvar="SUBAGENTS_INBOX_TOKENS",
            show_envvar=False,
            help="TOML file of [[tokens]] (name, role viewer|approver, token or "
            "token_sha256, optional task_prefixes and parent_ids) [env SUBAGENTS_INBOX_TOKENS; "
            "SUBAGENTS_INBOX_TOKEN adds one unscoped approver token]",
        ),
    ] = None,
    origin: Annotated[
        list[str] | None,
        typer.Option(
            "--origin",
            help="Another browser origin (scheme://host:port) whose pages may call the API; "
            "repeat for several [default: the inbox's own page only]",
        ),
    ] = None,
    ui_url: Annotated[
        str | None,
        typer.Option(
            "--ui-url",
            envvar="SUBAGENTS_UI_URL",
            show_envvar=False,
            help="The Temporal Web UI's address, for links to the tasks [env SUBAGENTS_UI_URL]",
        ),
    ] = None,
    poll: Annotated[
        float,
        typer.Option(help="Seconds between two listings of paused tasks (shared by all pages)"),
    ] = 2.0,
    peer_connections: Annotated[
        int,
        typer.Option(
            help="Connections one client address may hold open at once; more are refused "
            "(429). Behind a proxy every client is the proxy's address: raise it there",
            min=1,
            max=100_000,
        ),
    ] = 64,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Log each request (who by token name, never a token)"),
    ] = False,
) -> None:
    """Serve the approval inbox: a JSON API and a page to approve paused calls.

    Lists the paused task trees of the task queue, shows each call's full arguments,
    and approves or rejects them bound to the pause and the arguments read. Needs the
    deployment's payload key and blob store like any client. A connection that sends
    no whole request head within 5 s, or no body within 30 s, is closed. Ctrl-C stops it.
    """
    import os

    from durable_subagents.cli.inbox import Inbox, InboxServer, load_tokens
    from durable_subagents.client import SubagentClient

    settings = make_settings(address, namespace, task_queue, profile=profile)
    try:
        grants = load_tokens(tokens, os.environ.get("SUBAGENTS_INBOX_TOKEN") or None)
    except SubagentError as err:
        fail(str(err))
    if not len(grants):
        fail(
            "no tokens: set SUBAGENTS_INBOX_TOKEN (one approver token), or give --tokens "
            "FILE with viewer and approver tokens; make a token with python -c "
            '"import secrets; print(secrets.token_urlsafe(32))"'
        )
    if verbose:
        logging.basicConfig(format="%(asctime)s %(message)s")
        logging.getLogger("aiohttp.access").setLevel(logging.INFO)

    async def main() -> None:
        client = await SubagentClient.connect(settings=settings, agents={})
        inbox = Inbox(client, task_queue=settings.task_queue, ui_url=ui_url, poll=poll)
        server = InboxServer(
            inbox,
            grants,
            host=host,
            port=port,
            origins=origin or (),
            max_per_peer=peer_connections,
        )
        async with server:
            console.print(
                f"inbox on {server.url} · Temporal {settings.address} namespace "
                f"{settings.namespace} task queue {settings.task_queue} · {len(grants)} "
                f"token(s) · API document {server.url}/api/openapi.json · Ctrl-C to stop",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
            await asyncio.Future()

    run(main())
