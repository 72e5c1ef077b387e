"""Bare Temporal: one no-op activity per model turn and one per tool call (the floor)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow

TIMEOUT = timedelta(minutes=1)


@activity.defn(name="bare_model_turn")
async def bare_model_turn(step: int) -> int:
    """Stands for a model turn: returns at once."""
    return step


@activity.defn(name="bare_tool_call")
async def bare_tool_call(step: int) -> int:
    """Stands for a tool call: returns at once."""
    return step


@workflow.defn(name="PeersBareWorkflow")
class BareWorkflow:
    """``turns`` x (model turn, tool call), then the final model turn."""

    @workflow.run
    async def run(self, turns: int) -> int:
        for step in range(turns):
            await workflow.execute_activity(bare_model_turn, step, start_to_close_timeout=TIMEOUT)
            await workflow.execute_activity(bare_tool_call, step, start_to_close_timeout=TIMEOUT)
        await workflow.execute_activity(bare_model_turn, turns, start_to_close_timeout=TIMEOUT)
        return turns
