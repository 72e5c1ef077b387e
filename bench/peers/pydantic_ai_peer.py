"""Pydantic AI durable execution with Temporal, Chat Completions to a local server.

A regular ``Agent`` with the ``TemporalDurability`` capability (the ``TemporalAgent``
wrapper is deprecated in favour of it): each model request and each call of the
function tool runs as an activity. The model is an ``OpenAIChatModel`` whose
``OpenAIProvider`` points at ``BENCH_PEERS_BASE_URL``; the client carries
``PydanticAIPlugin``, the worker ``AgentPlugin(agent)``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.temporal import (
        AgentPlugin,
        PydanticAIPlugin,
        TemporalDurability,
    )
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

INSTRUCTIONS = "You read files of the workspace with read_file, then answer."

agent = Agent(
    OpenAIChatModel(
        "bench",
        provider=OpenAIProvider(
            base_url=os.environ.get("BENCH_PEERS_BASE_URL", "http://127.0.0.1:9/v1"),
            api_key="bench",
        ),
    ),
    name="reader",
    instructions=INSTRUCTIONS,
    capabilities=[TemporalDurability()],
)


def _read(path: str) -> str:
    root = Path(os.environ["BENCH_PEERS_WORKSPACE"]).resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root):
        raise ValueError(f"{path} is outside the workspace")
    return target.read_text()


@agent.tool_plain
async def read_file(path: str) -> str:
    """Read a text file of the workspace (path relative to its root)."""
    return await asyncio.to_thread(_read, path)


def client_plugin() -> PydanticAIPlugin:
    """The client plugin: Pydantic AI's payload converter and sandbox settings."""
    return PydanticAIPlugin()


def worker_plugin() -> AgentPlugin:
    """The worker plugin: registers the agent's activities."""
    return AgentPlugin(agent)


@workflow.defn(name="PeersPydanticAIWorkflow")
class PydanticAIWorkflow:
    """Run the agent until it answers or makes ``max_requests`` model requests."""

    @workflow.run
    async def run(self, prompt: str, max_requests: int) -> str:
        result = await agent.run(prompt, usage_limits=UsageLimits(request_limit=max_requests))
        return result.output


WORKFLOWS = [PydanticAIWorkflow]
