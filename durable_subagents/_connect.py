"""Connecting to Temporal with the project's data converter and clear errors."""

from __future__ import annotations

import atexit
import gc
from typing import Any

import temporalio.runtime
from temporalio.client import Client

from durable_subagents._codec import KeyRing, data_converter
from durable_subagents._telemetry import tracing_enabled, tracing_plugin
from durable_subagents.errors import InvalidRequest, TemporalUnavailable


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
            "localhost:7233 (--address or TEMPORAL_ADDRESS)"
        ) from None
    except RuntimeError as err:
        raise TemporalUnavailable(
            f"cannot reach Temporal at {address} (namespace {namespace!r}): {err}. "
            "Start a local server with `subagents dev`, or point TEMPORAL_ADDRESS / "
            "--address at a running one"
        ) from err


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
