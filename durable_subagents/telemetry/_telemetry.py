"""OpenTelemetry traces of subagent tasks: opt-in, one trace per task, free when off.

Temporal's own ``OpenTelemetryPlugin`` (with ``add_temporal_spans=True``) makes the
client's ``StartWorkflow`` and the worker's ``RunWorkflow``, ``StartActivity`` and
``RunActivity`` spans, and carries the trace context in Temporal headers, so a task's
spans form one trace. This module adds spans of our own, children of the
``RunActivity`` span: ``subagent.model_turn``, ``subagent.tool`` and
``subagent.compaction``. Their attributes are names, numbers and sizes only: never
prompts, outputs or keys, and nothing a model chose. A model picks its call ids, may
name tools that do not exist and may pick a subagent's model name: a call id is always
a hash, an unknown tool's name is a hash, a model the worker was not configured with
is ``other``, and these hide in error messages too (a trace backend is read by more
people than a transcript, and must not be a channel out of the task).

The rule for turning it on:

* Library code (``connect_client(tracing=...)``): ``True`` on, ``False`` off, ``None``
  (the default) on when the application has set a global ``TracerProvider``.
* The edges (``subagents worker``, CLI, dev) call :func:`setup_tracing` first:
  ``SUBAGENTS_OTEL=0`` forces tracing off; ``SUBAGENTS_OTEL=1`` or a standard
  ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`` installs a global replay-safe provider that
  exports OTLP (needs ``opentelemetry-exporter-otlp-proto-http`` or ``-grpc``).

A worker's workflow spans need the global provider to be replay-safe (built by
``temporalio.contrib.opentelemetry.create_tracer_provider``): span ids inside a workflow
come from the workflow's deterministic random, and nothing is exported on replay.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import re
import sys
import traceback
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from durable_subagents.errors import SubagentError
from durable_subagents.types import Usage
from durable_subagents.wire._payloads import (
    CompactInput,
    CompactResult,
    ModelTurnInput,
    ModelTurnResult,
    ToolCallInput,
    ToolCallResult,
)

if TYPE_CHECKING:
    from temporalio.client import Client
    from temporalio.contrib.opentelemetry import OpenTelemetryPlugin

    from durable_subagents.config import Settings

log = logging.getLogger(__name__)

TRACER_NAME = "durable_subagents"
"""Instrumentation scope of the spans this package makes."""
MODEL_TURN_SPAN = "subagent.model_turn"
"""Name of the span around one model turn (inside ``RunActivity:model_turn``)."""
TOOL_SPAN = "subagent.tool"
"""Name of the span around one tool call (inside ``RunActivity:run_tool``)."""
UNKNOWN_TOOL = "unknown"
"""``subagent.tool.name`` of a call to a tool the worker does not have (the name the
model sent is only hashed, in ``subagent.tool.name_hash``)."""
OTHER = "other"
"""What an odd finish reason is reported as."""
COMPACTION_SPAN = "subagent.compaction"
"""Name of the span around one compaction (inside ``RunActivity:compact_context``)."""
DEFAULT_SERVICE_NAME = "durable-subagents"
"""``service.name`` of the provider :func:`setup_tracing` installs (``OTEL_SERVICE_NAME`` wins)."""

_OTEL_MODULE = "temporalio.contrib.opentelemetry"


# ---------------------------------------------------------------------- switching on


def tracer_provider_configured() -> bool:
    """Whether the application set a global ``TracerProvider`` (not the default proxy)."""
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def tracing_enabled(tracing: bool | None) -> bool:
    """Resolve a ``tracing=`` argument: ``None`` means "if a provider is configured"."""
    return tracer_provider_configured() if tracing is None else tracing


def tracing_plugin() -> OpenTelemetryPlugin:
    """Temporal's OpenTelemetry plugin, emitting Temporal's own spans.

    Imported lazily: ``temporalio.contrib.opentelemetry`` pulls in the OpenTelemetry
    SDK (~0.2 s), which an untraced process never needs.
    """
    from temporalio.contrib.opentelemetry import OpenTelemetryPlugin

    return OpenTelemetryPlugin(add_temporal_spans=True)


def client_traced(client: Client, extra: Sequence[object] = ()) -> bool:
    """Whether a client (plus a worker's own ``plugins``/``interceptors``) traces.

    Args:
        client: The client a worker is built from; its plugins and interceptors
            apply to the worker too.
        extra: Plugins and interceptors given to the worker itself.
    """
    module = sys.modules.get(_OTEL_MODULE)
    if module is None:  # nothing can be an instance of a class never imported
        return False
    config = client.config()
    kinds = (module.OpenTelemetryPlugin, module.OpenTelemetryInterceptor, module.TracingInterceptor)
    items = [*config.get("plugins", ()), *config.get("interceptors", ()), *extra]
    return any(isinstance(item, kinds) for item in items)


def check_worker_provider() -> None:
    """Refuse to build a traced worker whose global provider is not replay-safe.

    Temporal's plugin refuses too, with a less helpful message; this one says what to do.

    Raises:
        SubagentError: The global provider is not a ``ReplaySafeTracerProvider``.
    """
    from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider

    provider = trace.get_tracer_provider()
    if not isinstance(provider, ReplaySafeTracerProvider):
        raise SubagentError(
            "tracing is on for this worker, but the global TracerProvider "
            f"({type(provider).__name__}) is not replay-safe: workflow spans need one "
            "built by temporalio.contrib.opentelemetry.create_tracer_provider() and set "
            "with opentelemetry.trace.set_tracer_provider() before the worker starts "
            "(durable_subagents.telemetry._telemetry.setup_tracing() does both); or connect with "
            "tracing=False"
        )


def setup_tracing(settings: Settings, env: Mapping[str, str] | None = None) -> bool:
    """Decide whether an edge process traces, installing an OTLP provider if asked.

    Call once at start-up of a CLI command, worker or dev server, before connecting,
    and pass the result as ``connect_client(..., tracing=...)``.

    Args:
        settings: ``settings.otel`` (``SUBAGENTS_OTEL``): ``False`` forces tracing off,
            ``True`` asks for it.
        env: The environment (default ``os.environ``): a standard
            ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
            asks for tracing; ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL=grpc`` picks gRPC.

    Returns:
        Whether to trace. ``True`` when a global provider was already configured or one
        was installed here; ``False`` when off, or when asked for but no OTLP exporter
        package is installed (a warning names it).

    Example:
        >>> tracing = setup_tracing(settings)  # doctest: +SKIP
        >>> client = await connect_client(settings.address, tracing=tracing)  # doctest: +SKIP
    """
    env = os.environ if env is None else env
    if settings.otel is False:
        return False
    if tracer_provider_configured():
        return True
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not (settings.otel or endpoint):
        return False
    exporter = _otlp_exporter(env)
    if exporter is None:
        return False

    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from temporalio.contrib.opentelemetry import create_tracer_provider

    resource = Resource.create(
        {"service.name": env.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME}
    )
    provider = create_tracer_provider(resource=resource)
    # Batch: spans ended inside the workflow sandbox are exported from another thread.
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return True


def _otlp_exporter(env: Mapping[str, str]) -> Any:
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    package = "opentelemetry-exporter-otlp-proto-" + ("grpc" if protocol == "grpc" else "http")
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]
                OTLPSpanExporter,
            )
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]
                OTLPSpanExporter,
            )
    except ImportError:
        log.warning(
            "tracing was asked for (SUBAGENTS_OTEL / OTEL_EXPORTER_OTLP_ENDPOINT) but %s "
            "is not installed; tracing stays off. Install it with: pip install %s",
            package,
            package,
        )
        return None
    return OTLPSpanExporter()


# ---------------------------------------------------------------------- our spans


class ActivityTelemetry:
    """Where the activities' own spans go; ``tracer`` is ``None`` when tracing is off.

    Args:
        tracer_provider: The provider for ``subagent.*`` spans; default: the global
            one. Tests pass one explicitly (the global can be set once per process).
        enabled: ``False`` makes every span a no-op (a ``None`` check per activity).
    """

    def __init__(
        self, tracer_provider: trace.TracerProvider | None = None, *, enabled: bool = True
    ) -> None:
        self.tracer: trace.Tracer | None = None
        if enabled:
            provider = tracer_provider or trace.get_tracer_provider()
            self.tracer = provider.get_tracer(TRACER_NAME)

    @classmethod
    def off(cls) -> ActivityTelemetry:
        """Telemetry that makes no spans."""
        return cls(enabled=False)

    @classmethod
    def for_worker(
        cls,
        client: Client,
        tracer_provider: trace.TracerProvider | None = None,
        extra: Sequence[object] = (),
    ) -> ActivityTelemetry:
        """On when the worker's client (or the worker itself) has Temporal tracing.

        Raises:
            SubagentError: Traced, but the global provider is not replay-safe.
        """
        if not client_traced(client, extra):
            return cls.off()
        check_worker_provider()
        return cls(tracer_provider)


class _Tools(Protocol):
    def get(self, name: str) -> object | None: ...


class _Traced(Protocol):
    telemetry: ActivityTelemetry
    default_model: str | None

    @property
    def tools(self) -> _Tools:
        """The worker's tools: a name the worker has is no model's text."""
        ...


_S = TypeVar("_S", bound=_Traced)


_I = TypeVar("_I")
_R = TypeVar("_R")


def _traced(
    name: str,
    begin: Callable[[_Traced, _I], tuple[dict[str, Any], list[str]]],
    end: Callable[[_Traced, _R], dict[str, Any]],
    kind: SpanKind = SpanKind.INTERNAL,
) -> Callable[[Callable[[_S, _I], Awaitable[_R]]], Callable[[_S, _I], Awaitable[_R]]]:
    """Wrap an activity in a span ``name``.

    ``begin`` gives the span's attributes and the words its errors may not show, ``end``
    the attributes the result adds.
    """

    def decorate(fn: Callable[[_S, _I], Awaitable[_R]]) -> Callable[[_S, _I], Awaitable[_R]]:
        @functools.wraps(fn)
        async def wrapper(self: _S, input: _I) -> _R:
            tracer = self.telemetry.tracer
            if tracer is None:
                return await fn(self, input)
            attributes, hidden = begin(self, input)
            with tracer.start_as_current_span(
                name,
                kind=kind,
                attributes=attributes,
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                with _recording_errors(span, hidden):
                    result = await fn(self, input)
                span.set_attributes(end(self, result))
                return result

        return wrapper

    return decorate


def _turn_begins(self: _Traced, input: ModelTurnInput) -> tuple[dict[str, Any], list[str]]:
    attributes: dict[str, Any] = {
        "subagent.task_id": input.task_id,
        "subagent.turn": input.turn,
        "subagent.agent": input.agent_name,
        "gen_ai.operation.name": "chat",
        **_model_attributes(input.model, self.default_model),
    }
    # Results passed by record name are named by call ids, which a missing blob's
    # message quotes.
    hidden = [m.tool_call_id for m in input.new_messages if m.tool_call_id]
    hidden += list(input.result_records)
    # a provider's error may quote the model it was asked for
    hidden += _unnamed_model(input.model, self.default_model)
    return attributes, hidden


def _turn_ends(self: _Traced, result: ModelTurnResult) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        **_model_attributes(result.model, self.default_model),
        **_usage_attributes(result.usage),
        "gen_ai.response.finish_reasons": [_finish_reason(result.stop_reason)],
        "subagent.tool_calls": len(result.tool_calls),
    }
    if result.compact:
        # the model was not asked: the conversation is compacted first
        attributes["subagent.compact"] = result.compact
    return attributes


def _compaction_begins(self: _Traced, input: CompactInput) -> tuple[dict[str, Any], list[str]]:
    attributes: dict[str, Any] = {
        "subagent.task_id": input.turn.task_id,
        "subagent.turn": input.turn.turn,
        "subagent.agent": input.turn.agent_name,
        "subagent.compaction.number": input.number,
        "subagent.compaction.reason": input.reason,
        **_model_attributes(input.turn.model, self.default_model),
    }
    return attributes, _unnamed_model(input.turn.model, self.default_model)


def _compaction_ends(self: _Traced, result: CompactResult) -> dict[str, Any]:
    mark = result.compaction
    return {
        **_usage_attributes(result.usage),
        "subagent.compaction.tokens_before": mark.tokens_before,
        "subagent.compaction.tokens_after": mark.tokens_after,
        "subagent.compaction.window": mark.window,
        "subagent.compaction.model_calls": mark.model_calls,
        "subagent.compaction.noted": mark.noted,
        "subagent.compaction.summarized": mark.summarized,
    }


def traced_model_turn(
    fn: Callable[[_S, ModelTurnInput], Awaitable[ModelTurnResult]],
) -> Callable[[_S, ModelTurnInput], Awaitable[ModelTurnResult]]:
    """Wrap the model-turn activity in a ``subagent.model_turn`` span."""
    return _traced(MODEL_TURN_SPAN, _turn_begins, _turn_ends, SpanKind.CLIENT)(fn)


def traced_compaction(
    fn: Callable[[_S, CompactInput], Awaitable[CompactResult]],
) -> Callable[[_S, CompactInput], Awaitable[CompactResult]]:
    """Wrap the compaction activity in a ``subagent.compaction`` span (sizes only)."""
    return _traced(COMPACTION_SPAN, _compaction_begins, _compaction_ends)(fn)


def _usage_attributes(usage: Usage) -> dict[str, int | float]:
    """OpenTelemetry GenAI usage attributes; the cache counts are part of the input's.

    ``subagent.cost_usd`` (the worker's price of the usage) only where the model has one.
    """
    attributes: dict[str, int | float] = {
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
    }
    if usage.cost_usd is not None:
        attributes["subagent.cost_usd"] = usage.cost_usd
    return attributes


def traced_tool(
    fn: Callable[[_S, ToolCallInput], Awaitable[ToolCallResult]],
) -> Callable[[_S, ToolCallInput], Awaitable[ToolCallResult]]:
    """Wrap the tool activity in a ``subagent.tool`` span."""

    @functools.wraps(fn)
    async def wrapper(self: _S, input: ToolCallInput) -> ToolCallResult:
        tracer = self.telemetry.tracer
        if tracer is None:
            return await fn(self, input)
        call = input.call
        attributes = {
            "subagent.task_id": input.task_id,
            "subagent.tool.call_id_hash": text_hash(call.id),
        }
        hidden = [call.id]
        if self.tools.get(call.name) is not None:
            attributes["subagent.tool.name"] = attributes["gen_ai.tool.name"] = call.name
        else:
            attributes["subagent.tool.name"] = UNKNOWN_TOOL
            attributes["subagent.tool.name_hash"] = text_hash(call.name)
            hidden.append(call.name)
        with tracer.start_as_current_span(
            TOOL_SPAN,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            with _recording_errors(span, hidden):
                result = await fn(self, input)
            span.set_attributes(
                {
                    "subagent.tool.is_error": result.is_error,
                    "subagent.tool.output_size": result.size,
                }
            )
            if result.is_error:
                # The model hears of it; the span says so without the output itself.
                span.set_attribute("error.type", "tool_error")
                span.set_status(Status(StatusCode.ERROR))
            return result

    return wrapper


def text_hash(text: str) -> str:
    """The first 16 hex digits of the SHA-256 of ``text``: a span's stand-in for it.

    Whoever holds the text (a call id in the transcript) can find its span; the span
    alone does not tell it.
    """
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


_FINISH_REASON = re.compile(r"[a-z_]{1,32}")


def _model_attributes(model: str, default_model: str | None) -> dict[str, str]:
    """``gen_ai.system`` and ``gen_ai.request.model`` from a ``provider:model`` name.

    A subagent's model may be its parent model's choice, and a server that answers to
    any name (llama.cpp's, a proxy) runs whatever it is: only a model configured on the
    worker (its default) is named, any other is ``other`` (``named_model``, as the
    metrics name it). Never the script of a ``scripted:`` model: only ``scripted``.
    """
    if not model:
        return {}
    from durable_subagents.providers._names import named_model

    label = named_model(model, default_model)
    if label == "scripted":
        return {"gen_ai.system": "scripted", "gen_ai.request.model": "scripted"}
    provider, _, name = label.partition(":")
    return {"gen_ai.system": provider, "gen_ai.request.model": name}


def _unnamed_model(model: str, default_model: str | None) -> list[str]:
    """A model name the spans do not name, and its model part: hidden in errors too."""
    from durable_subagents.providers._names import named_model

    if not model or not named_model(model, default_model).endswith(":other"):
        return []
    # Short parts stay: hiding "gpt" would garble every message that says it.
    return [m for m in {model, model.partition(":")[2]} if len(m) >= 4]


def _finish_reason(reason: str | None) -> str:
    """The provider's finish reason when it looks like one (``stop``, ``tool_use``)."""
    if not reason:
        return ""
    return reason if _FINISH_REASON.fullmatch(reason) else OTHER


@contextlib.contextmanager
def _recording_errors(span: trace.Span, hidden: Sequence[str] = ()) -> Iterator[None]:
    """Record an escaping exception on the span, with secrets and model text scrubbed.

    A provider's error text can quote part of a key (OpenAI's 401 does), so the
    message and the stack trace are scrubbed of every secret-looking environment
    value of the worker. ``hidden`` are strings a model chose (call ids, an unknown
    tool's name) that a message may quote: each becomes its hash.
    """
    try:
        yield
    except BaseException as exc:
        message = _hide(scrub(str(exc)), hidden)
        stacktrace = _hide(scrub("".join(traceback.format_exception(exc))), hidden)
        span.record_exception(
            exc, attributes={"exception.message": message, "exception.stacktrace": stacktrace}
        )
        span.set_attribute("error.type", str(getattr(exc, "type", None) or type(exc).__name__))
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {message}"))
        raise


def _hide(text: str, hidden: Sequence[str]) -> str:
    present = sorted({h for h in hidden if h and h in text}, key=len, reverse=True)
    if not present:
        return text
    # One pass, longest first: an id that contains another is replaced whole, and no
    # replacement is searched again.
    pattern = re.compile("|".join(re.escape(h) for h in present))
    return pattern.sub(lambda m: f"[model text {text_hash(m.group())}]", text)


def scrub(text: str, env: Mapping[str, str] | None = None) -> str:
    """``text`` with the values of secret-looking environment variables replaced."""
    from durable_subagents.connection._setting_values import SECRET_ENV_NAME

    env = os.environ if env is None else env
    for name, value in env.items():
        if len(value) >= 8 and SECRET_ENV_NAME.search(name) and value in text:
            text = text.replace(value, "[redacted]")
    return text
