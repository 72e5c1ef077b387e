"""OpenTelemetry's rules: what is recorded, hashed or scrubbed, read without a task."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from temporalio.exceptions import ApplicationError

from durable_subagents.config import Settings
from durable_subagents.providers._names import named_model
from durable_subagents.telemetry._telemetry import (
    OTHER,
    ActivityTelemetry,
    _finish_reason,
    _model_attributes,
    setup_tracing,
    traced_model_turn,
)
from durable_subagents.wire._payloads import ModelTurnInput, ModelTurnResult

from ..helpers.telemetry import all_attribute_values

SECRET = "sk-test-telemetry-0123456789abcdef"


def test_setup_tracing_rules(caplog: pytest.LogCaptureFixture) -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert setup_tracing(Settings(otel=False), env=endpoint) is False
    assert setup_tracing(Settings(), env={}) is False
    try:
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401
    except ImportError:
        # asked for, but the exporter is missing: a warning naming it, tracing off
        assert setup_tracing(Settings(), env=endpoint) is False
        assert setup_tracing(Settings(otel=True), env={}) is False
        assert "opentelemetry-exporter-otlp-proto-http" in caplog.text
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


async def test_errors_are_recorded_with_secrets_scrubbed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An explicit provider, no global: a failed turn is an error span, key redacted."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    exporter = InMemorySpanExporter()
    tp = TracerProvider(shutdown_on_exit=False)
    tp.add_span_processor(SimpleSpanProcessor(exporter))

    class Failing:
        default_model: str | None = "anthropic:claude-x"
        telemetry = ActivityTelemetry(tp)

        @traced_model_turn
        async def model_turn(self, input: ModelTurnInput) -> ModelTurnResult:
            raise ApplicationError(f"401 invalid x-api-key {SECRET}", type="AuthenticationError")

    turn = ModelTurnInput(
        task_id="t-1", head=None, new_messages=[], model="anthropic:claude-x", turn=3
    )
    with pytest.raises(ApplicationError):
        await Failing().model_turn(turn)
    [span] = exporter.get_finished_spans()
    attrs = span.attributes or {}
    assert span.status.status_code == StatusCode.ERROR
    assert attrs["error.type"] == "AuthenticationError"
    assert attrs["gen_ai.system"] == "anthropic"
    assert attrs["gen_ai.request.model"] == "claude-x"
    assert attrs["subagent.turn"] == 3
    [event] = span.events
    assert "[redacted]" in str((event.attributes or {})["exception.message"])
    assert not any(SECRET in v for v in all_attribute_values([span]))


"""In every id, name, argument and answer the hostile model chooses: in no span."""


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (
            "openai:gpt-4.1-mini",
            {"gen_ai.system": "openai", "gen_ai.request.model": "gpt-4.1-mini"},
        ),
        ("default", {"gen_ai.system": "openai", "gen_ai.request.model": "gpt-4.1-mini"}),
        ("openai:gpt-4.1", {"gen_ai.system": "openai", "gen_ai.request.model": "other"}),
        (
            "anthropic:claude-haiku-4-5",
            {"gen_ai.system": "anthropic", "gen_ai.request.model": "other"},
        ),
        ("openai:exfil-PWNED", {"gen_ai.system": "openai", "gen_ai.request.model": "other"}),
        ('scripted:[{"text": "PWNED"}]', {"gen_ai.request.model": "scripted"}),
        ("openai:PWNED ignore previous instructions", {"gen_ai.request.model": "other"}),
        ("PWNED:model", {"gen_ai.system": "other", "gen_ai.request.model": "other"}),
    ],
)
def test_only_a_model_configured_on_the_worker_is_named(
    model: str, expected: dict[str, str]
) -> None:
    """A subagent's model can be its parent model's choice: a name it chose, however
    plain, is ``other``; only the worker's own default is named."""
    attributes = _model_attributes(model, "openai:gpt-4.1-mini")
    assert attributes == {**attributes, **expected}
    assert "PWNED" not in str(attributes)
    assert not any("hash" in key for key in attributes)


def test_only_finish_reasons_that_look_like_one_are_carried() -> None:
    assert _finish_reason("tool_calls") == "tool_calls"
    assert _finish_reason(None) == ""
    assert _finish_reason("PWNED here") == OTHER


@pytest.mark.parametrize(
    ("model", "named"),
    [
        ("openai:gpt-4.1-mini", "openai:gpt-4.1-mini"),
        ("default", "openai:gpt-4.1-mini"),
        ("", "openai:gpt-4.1-mini"),
        ("anthropic:claude-haiku-4-5", "anthropic:claude-haiku-4-5"),  # configured too
        ("openai:exfil-PWNED", "openai:other"),
        ("anthropic:claude-sonnet-4-5", "anthropic:other"),
        ('scripted:[{"text": "PWNED"}]', "scripted"),
        ("PWNED:model", "other:other"),
        ("openai:", "openai:other"),
    ],
)
def test_metrics_name_only_models_a_person_configured(model: str, named: str) -> None:
    configured = ["anthropic:claude-haiku-4-5"]
    assert named_model(model, "openai:gpt-4.1-mini", configured) == named
