"""Reading what spans carry: every attribute value, for the tests that no model text leaks."""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan


def all_attribute_values(spans: list[ReadableSpan]) -> list[str]:
    values: list[str] = []
    for span in spans:
        attrs = [span.attributes or {}, span.resource.attributes]
        attrs += [event.attributes or {} for event in span.events]
        for mapping in attrs:
            values += [str(v) for v in mapping.values()]
        values.append(span.status.description or "")
    return values
