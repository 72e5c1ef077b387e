"""``subagents codec-server`` and ``subagents keygen``: the payload keys' commands.

The server itself is ``_codec_server``, imported only when the command runs.
"""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from durable_subagents.cli._common import (
    console,
    err_console,
    fail,
    make_settings,
)
from durable_subagents.errors import SubagentError

__all__ = ["codec_server", "keygen"]


def codec_server(
    port: Annotated[int, typer.Option(help="Port to listen on", min=0, max=65535)] = 8081,
    host: Annotated[
        str,
        typer.Option(
            help="Address to listen on; other than 127.0.0.1, set a token too "
            "(whoever reaches it reads every task)"
        ),
    ] = "127.0.0.1",
    token: Annotated[
        str | None,
        typer.Option(
            envvar="SUBAGENTS_CODEC_TOKEN",
            show_envvar=False,
            help="Require Authorization: Bearer TOKEN on /encode and /decode "
            "[env SUBAGENTS_CODEC_TOKEN, which keeps it out of the process list]",
        ),
    ] = None,
    origin: Annotated[
        list[str] | None,
        typer.Option(
            "--origin",
            help="Browser origin (scheme://host:port) of a Web UI allowed to call it; "
            "repeat for several [default: http://127.0.0.1:8233 and http://localhost:8233]",
        ),
    ] = None,
    namespace: Annotated[
        list[str] | None,
        typer.Option(
            "--namespace",
            help="Only answer requests for this namespace (their X-Namespace header); "
            "repeat for several [default: any]",
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log each request (never its payloads)")
    ] = False,
) -> None:
    """Decrypt tasks for the Temporal Web UI and temporal CLI (needs the payload key).

    Serves Temporal's remote codec protocol (POST /encode, /decode) with the
    deployment's payload keys, so `temporal workflow show --codec-endpoint` and the Web
    UI show tasks decrypted. Ctrl-C stops it.
    """
    from durable_subagents.cli._codec_server import DEFAULT_ORIGINS, CodecServer, serve

    try:
        keys = make_settings().payload_keys()
    except SubagentError as err:
        fail(str(err))
    if keys is None:
        fail(
            "no payload key: set SUBAGENTS_PAYLOAD_KEY to the key the deployment's workers "
            "and clients use (SUBAGENTS_PAYLOAD_OLD_KEYS too, for data written before a "
            "rotation); for a new deployment, make one with `subagents keygen`"
        )
    if verbose:
        logging.basicConfig(format="%(asctime)s %(message)s")
        logging.getLogger("durable_subagents.cli._codec_server").setLevel(logging.DEBUG)

    def ready(server: CodecServer) -> None:
        endpoint = server.endpoint
        auth = ' --codec-auth "Bearer $SUBAGENTS_CODEC_TOKEN"' if token else ""
        held = ", ".join(keys.ids)
        origins = ", ".join(sorted(server.origins)) or "none"
        lines = [
            f"codec server on {endpoint} · key(s) {held} · "
            + ("bearer token required" if token else "no token"),
            "Decrypted task histories with the temporal CLI:",
            f"  temporal workflow show --workflow-id ID --codec-endpoint {endpoint}{auth}",
            f"  (or export TEMPORAL_CODEC_ENDPOINT={endpoint}"
            + (' TEMPORAL_CODEC_AUTH="Bearer $SUBAGENTS_CODEC_TOKEN")' if token else ")"),
            f"In the Web UI (allowed origins: {origins}): enter {endpoint} in its Codec "
            f"Server setting, or start the server with --ui-codec-endpoint {endpoint}",
            "Ctrl-C to stop.",
        ]
        if host not in ("127.0.0.1", "localhost", "::1") and not token:
            lines.insert(
                1,
                f"warning: listening on {host} without a token: anyone who reaches this "
                "port can decrypt every task; set SUBAGENTS_CODEC_TOKEN",
            )
        for line in lines:
            console.print(line, markup=False, highlight=False, soft_wrap=True)

    try:
        serve(
            keys,
            host=host,
            port=port,
            token=token,
            origins=origin or DEFAULT_ORIGINS,
            namespaces=namespace or None,
            on_ready=ready,
        )
    except SubagentError as err:
        fail(str(err))
    console.print("Stopped.")


def keygen() -> None:
    """Print a new payload key as SUBAGENTS_PAYLOAD_KEY=... for an environment file.

    Give the same key to every worker and client of the deployment. Keep the file
    outside the workspace (e.g. `subagents keygen >> ~/.config/durable-subagents/env`):
    tasks read what the workspace holds. To rotate, make a new one current and keep the
    old one in SUBAGENTS_PAYLOAD_OLD_KEYS.
    """
    import base64

    from durable_subagents.storage._sealing import key_id, new_key

    key = new_key()
    print(f"# payload key id {key_id(base64.b64decode(key))} (subagents keygen)")
    print(f"SUBAGENTS_PAYLOAD_KEY={key}")
    err_console.print(
        "Set it on every worker and client (and the codec server); keep it secret, and out "
        "of the workspace (tasks read what it holds). When rotating, move the previous key "
        "to SUBAGENTS_PAYLOAD_OLD_KEYS.",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
