"""Workflows of a user's own that start subagents (imported by the worker's sandbox)."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from durable_subagents.workflows import start_subagent


@workflow.defn
class FanOutWorkflow:
    """Starts one subagent per prompt and gathers their results."""

    @workflow.run
    async def run(self, args: list[str]) -> list[str]:
        model, *prompts = args
        handles = [
            await start_subagent("explore", p, description=f"part {i}", model=model)
            for i, p in enumerate(prompts)
        ]
        results = await asyncio.gather(*handles)
        return [f"{h.id}={r.status}:{r.result}" for h, r in zip(handles, results, strict=True)]


@workflow.defn
class BadRequestWorkflow:
    """Asks for an agent that does not exist; reports the error it gets."""

    @workflow.run
    async def run(self) -> str:
        try:
            await start_subagent("explor", "x")
        except ApplicationError as err:
            return f"{err.type}: {err.message}"
        return "no error"


@workflow.defn
class LongChildWorkflow:
    """Starts a subagent and waits for it; cancelling this cancels the subagent."""

    @workflow.run
    async def run(self, model: str) -> str:
        handle = await start_subagent("general", "sleep", model=model)
        result = await handle
        return result.status


@workflow.defn
class WorkspaceWorkflow:
    """Starts a subagent in the workspace it is given; reports the error it gets."""

    @workflow.run
    async def run(self, workspace: str) -> str:
        try:
            await start_subagent("explore", "x", workspace=workspace, model="scripted")
        except ApplicationError as err:
            return f"{err.type}: {err.message}"
        return "started"


@workflow.defn
class StructuredChildWorkflow:
    """Starts a subagent with an output schema; returns its output, or the spawn's error."""

    @workflow.run
    async def run(self, args: dict[str, Any]) -> dict[str, Any]:
        try:
            handle = await start_subagent(
                "explore", "review", model=args["model"], output_schema=args["schema"]
            )
        except ApplicationError as err:
            return {"error": f"{err.type}: {err.message}"}
        result = await handle
        return {"status": result.status.value, "output": result.output, "result": result.result}


@workflow.defn
class OptionsWorkflow:
    """Starts a subagent with the options it is given; the child's id, or the error."""

    @workflow.run
    async def run(self, options: dict[str, Any]) -> str:
        try:
            handle = await start_subagent("explore", "x", model="scripted", **options)
        except ApplicationError as err:
            return f"{err.type}: {err.message}"
        return handle.id
