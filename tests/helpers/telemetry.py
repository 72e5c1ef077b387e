"""Spans a test's worker records, kept in memory, and every attribute value they carry
(for the tests that no model text or secret leaks)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider, create_tracer_provider


def all_attribute_values(spans: list[ReadableSpan]) -> list[str]:
    values: list[str] = []
    for span in spans:
        attrs = [span.attributes or {}, span.resource.attributes]
        attrs += [event.attributes or {} for event in span.events]
        for mapping in attrs:
            values += [str(v) for v in mapping.values()]
        values.append(span.status.description or "")
    return values


@dataclass
class Otel:
    provider: ReplaySafeTracerProvider
    exporter: InMemorySpanExporter

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())


@contextmanager
def in_memory_spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[Otel]:
    """A replay-safe provider with an in-memory exporter, global for this test only.

    Temporal's plugin reads the global provider and insists it is replay-safe, and
    ``set_tracer_provider`` works once per process: swap the global for the test; the
    monkeypatch puts the default proxy back afterwards.
    """
    exporter = InMemorySpanExporter()
    tp = create_tracer_provider(shutdown_on_exit=False)
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", tp)
    try:
        yield Otel(tp, exporter)
    finally:
        tp.shutdown()
