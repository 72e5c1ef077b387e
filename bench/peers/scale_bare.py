"""Bare Temporal for ``bench_scale.py``.

- ``BareScaleWorkflow``: per turn a model activity that waits as long as the model
  server does, then a tool activity; then a final model activity. The floor: Temporal's
  own cost of the activity pattern, with no model call or tool work.
- ``BareAgentWorkflow``: the same loop doing the same work as a subagent: a streamed
  Chat Completions request through the ``openai`` SDK to the same model server, and a
  read of the file the model names.

A module of its own (not the script): the workflow sandbox re-imports a workflow's
module for every new run unless it is passed through, and a script's ``__main__``
cannot be, so the bare worker would compile the whole script once per task.
"""

from __future__ import annotations

import asyncio
import json
import os
from datetime import timedelta
from typing import Any

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


# ------------------------------------------------------------ a bare Temporal agent

READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a text file of the workspace.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
}
_client: Any = None


def import_openai() -> None:
    """Load the ``openai`` SDK and what its first streamed request loads, as a worker
    whose agent module imports the SDK at its top has done before it polls."""
    from openai import AsyncOpenAI, DefaultAioHttpClient

    AsyncOpenAI(api_key="unused", http_client=DefaultAioHttpClient()).chat.completions  # noqa: B018


def _openai() -> Any:
    """One SDK client per worker process, sending over aiohttp as the library's does."""
    global _client
    if _client is None:
        from openai import AsyncOpenAI, DefaultAioHttpClient

        _client = AsyncOpenAI(max_retries=0, http_client=DefaultAioHttpClient())
    return _client


@activity.defn(name="bare_agent_model")
async def bare_agent_model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """One streamed Chat Completions turn through the ``openai`` SDK: the assistant message.

    The plain way: the SDK's own stream of chunk models, deltas joined by hand.
    """
    stream = await _openai().chat.completions.create(
        model="bench-scale",
        messages=messages,
        tools=[READ_FILE],
        stream=True,
        stream_options={"include_usage": True},
    )
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    async for chunk in stream:
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                text.append(delta.content)
            for part in delta.tool_calls or []:
                call = calls.setdefault(
                    part.index,
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                call["id"] = part.id or call["id"]
                if part.function is not None:
                    call["function"]["name"] += part.function.name or ""
                    call["function"]["arguments"] += part.function.arguments or ""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


@activity.defn(name="bare_agent_read")
async def bare_agent_read(workspace: str, arguments: str) -> str:
    """The tool: read the file the call names, in the worker's process."""
    # A small local file, read on the event loop as a plain agent would.
    root = os.path.realpath(workspace)  # noqa: ASYNC240
    path = os.path.realpath(os.path.join(root, json.loads(arguments)["path"]))  # noqa: ASYNC240
    if os.path.commonpath([root, path]) != root:
        return "refused: outside the workspace"
    with open(path) as f:  # noqa: ASYNC230
        return f.read()


@workflow.defn(name="BareAgentWorkflow")
class BareAgentWorkflow:
    """A tool loop on bare Temporal: the conversation in the workflow, passed whole to each
    model activity; each tool call an activity (or a local activity, as the library's
    reads are)."""

    @workflow.run
    async def run(self, prompt: str, workspace: str, max_turns: int, local_tool: bool) -> str:
        timeout = timedelta(minutes=10)
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        for _ in range(max_turns):
            answer = await workflow.execute_activity(
                bare_agent_model, messages, start_to_close_timeout=timeout
            )
            messages.append(answer)
            if not answer.get("tool_calls"):
                return str(answer.get("content") or "")
            for call in answer["tool_calls"]:
                args = [workspace, call["function"]["arguments"]]
                if local_tool:
                    out = await workflow.execute_local_activity(
                        bare_agent_read, args=args, start_to_close_timeout=timeout
                    )
                else:
                    out = await workflow.execute_activity(
                        bare_agent_read, args=args, start_to_close_timeout=timeout
                    )
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": out})
        return ""
