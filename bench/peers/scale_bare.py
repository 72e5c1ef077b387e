"""Bare Temporal for ``bench_scale.py``: per turn a model activity that waits as long
as the model server does, then a tool activity; then a final model activity.

A module of its own (not the script): the workflow sandbox re-imports a workflow's
module for every new run unless it is passed through, and a script's ``__main__``
cannot be, so the bare worker would compile the whole script once per task.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity, workflow


@activity.defn(name="bare_model")
async def bare_model(latency: float) -> str:
    """The bare side's model call: waits as long as the model server does."""
    await asyncio.sleep(latency)
    return "tool_call"


@activity.defn(name="bare_tool")
async def bare_tool(step: int) -> int:
    """The bare side's tool call: returns at once."""
    return step


@workflow.defn(name="BareScaleWorkflow")
class BareScaleWorkflow:
    """Per turn a model activity then a tool activity; then a final model activity."""

    @workflow.run
    async def run(self, turns: int, latency: float, local_tool: bool = False) -> int:
        timeout = timedelta(minutes=10)
        for step in range(turns):
            await workflow.execute_activity(bare_model, latency, start_to_close_timeout=timeout)
            if local_tool:
                await workflow.execute_local_activity(
                    bare_tool, step, start_to_close_timeout=timeout
                )
            else:
                await workflow.execute_activity(bare_tool, step, start_to_close_timeout=timeout)
        await workflow.execute_activity(bare_model, latency, start_to_close_timeout=timeout)
        return turns + 1
