"""The project's payload converter: one cache of pydantic type adapters per process."""

from __future__ import annotations

from durable_subagents.storage._sealing import KeyRing, new_key
from durable_subagents.wire._codec import data_converter
from durable_subagents.wire._payloads import ModelTurnResult, ToolCallResult


def test_the_converters_of_every_workflow_run_share_the_type_adapters() -> None:
    """Temporal builds a converter per workflow run: they must not each build adapters."""
    for keys in (None, KeyRing.parse(new_key())):
        converter = data_converter(keys)
        first, second = converter.payload_converter_class(), converter.payload_converter_class()
        payloads = first.to_payloads(
            [ModelTurnResult(head="h"), ToolCallResult(call_id="c", tool_name="read_file")]
        )
        decoded = first.from_payloads(payloads, [ModelTurnResult, ToolCallResult])
        assert decoded[0].head == "h" and decoded[1].call_id == "c"
        # the second run's converter finds the adapters the first one built
        adapters = second.converters[b"json/plain"]._type_adapter  # type: ignore[attr-defined]
        hits = adapters.cache_info().hits
        second.from_payloads(payloads, [ModelTurnResult, ToolCallResult])
        assert adapters.cache_info().hits == hits + 2
