"""OpenAI Agents SDK on Temporal (``OpenAIAgentsPlugin``), Chat Completions to a local server.

The plugin runs each model call as its ``invoke_model_activity`` and the tool, made from
an activity with ``activity_as_tool``, as an activity of its own. The worker's model
provider builds an ``OpenAIChatCompletionsModel`` on an ``AsyncOpenAI`` client whose
``base_url`` is ``BENCH_PEERS_BASE_URL``.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from agents import (
        Agent,
        Model,
        ModelProvider,
        OpenAIChatCompletionsModel,
        RunConfig,
        Runner,
    )
    from openai import AsyncOpenAI
    from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
    from temporalio.openai_agents.workflow import activity_as_tool

TIMEOUT = timedelta(minutes=1)
INSTRUCTIONS = "You read files of the workspace with read_file, then answer."


def _read(path: str) -> str:
    root = Path(os.environ["BENCH_PEERS_WORKSPACE"]).resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root):
        raise ValueError(f"{path} is outside the workspace")
    return target.read_text()


@activity.defn
async def read_file(path: str) -> str:
    """Read a text file of the workspace (path relative to its root)."""
    return await asyncio.to_thread(_read, path)


class LocalChatCompletions(ModelProvider):
    """Every model name maps to Chat Completions on the benchmark's local server."""

    def __init__(self, base_url: str) -> None:
        self._client = AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)

    def get_model(self, model_name: str | None) -> Model:
        return OpenAIChatCompletionsModel(model=model_name or "bench", openai_client=self._client)


def plugin(base_url: str) -> OpenAIAgentsPlugin:
    """The client plugin (workers built from the client inherit it)."""
    return OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=TIMEOUT),
        model_provider=LocalChatCompletions(base_url),
    )


@workflow.defn(name="PeersAgentsSdkWorkflow")
class AgentsSdkWorkflow:
    """One agent with one tool, run until it answers or ``max_turns`` model calls."""

    @workflow.run
    async def run(self, prompt: str, max_turns: int) -> str:
        agent = Agent(
            name="reader",
            instructions=INSTRUCTIONS,
            model="bench",
            tools=[activity_as_tool(read_file, start_to_close_timeout=TIMEOUT)],
        )
        result = await Runner.run(
            agent, prompt, max_turns=max_turns, run_config=RunConfig(tracing_disabled=True)
        )
        return str(result.final_output)


WORKFLOWS = [AgentsSdkWorkflow]
ACTIVITIES = [read_file]
