"""``bedrock:`` and ``vertex:`` tasks on a real worker and Temporal server.

A structured answer after a tool loop that thinks, on each cloud's wire; a worker
SIGKILLed in the middle of a turn, whose retry on a new worker sends the thinking back
unchanged. No credential reaches the history.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from bench.bench_faults import WorkerProcess
from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.testing import FakeBedrockServer, FakeVertexServer
from durable_subagents.testing.fake_anthropic import REDACTED
from durable_subagents.worker import create_worker

from ..helpers.cli import arun
from ..helpers.processes import worker_process
from ..helpers.providers import CLOUD_MODELS, WIRES, cloud


def read(path: str) -> dict[str, Any]:
    return {"name": "read_file", "arguments": {"path": path}}


def reasoning(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    return [b for b in content if b.get("type") in ("thinking", "redacted_thinking")]


async def history_bytes(temporal: Client, task_id: str) -> bytes:
    out = b""
    async for execution in temporal.list_workflows(f"WorkflowId = '{task_id}'"):
        handle = temporal.get_workflow_handle(task_id, run_id=execution.run_id)
        out += b"".join([e.SerializeToString() async for e in handle.fetch_history_events()])
    return out


SCHEMA = {
    "type": "object",
    "properties": {"holds": {"type": "string"}},
    "required": ["holds"],
}


@pytest.mark.parametrize("wire", WIRES)
async def test_a_task_thinks_reads_and_answers_as_data(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
    wire: str,
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    async with cloud(monkeypatch, wire) as srv:
        srv.add_reply(tool_calls=[read("a.txt")], thinking=["THOUGHT-1: read a.txt."])
        answer = {"name": "final_answer", "arguments": {"holds": "alpha"}}
        srv.add_reply(tool_calls=[answer], thinking=["THOUGHT-2: it says alpha."])
        secrets = [v for k, v in srv.environment().items() if "SECRET" in k or "TOKEN" in k]
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task(
                "explore",
                "What does a.txt hold?",
                model=CLOUD_MODELS[wire],
                reasoning_effort="low",
                output_schema=SCHEMA,
            )
            info = await client.check_task(task_id, wait=True, timeout=120)
        history = await history_bytes(temporal_client, task_id)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.output == {"holds": "alpha"}
    assert srv.outcomes == ["200", "200"]  # the first answer's thinking came back whole
    assert reasoning(srv.requests[1]["messages"][1])[0]["thinking"] == "THOUGHT-1: read a.txt."
    offered = [t["name"] for t in srv.requests[0]["tools"]]
    assert "final_answer" in offered and "tool_choice" not in srv.requests[0]
    assert info.usage.cache_write_tokens > 0 or info.usage.cache_read_tokens > 0
    assert b"THOUGHT-" not in history
    assert secrets and not [s for s in secrets if s.encode() in history]


@pytest.mark.parametrize("wire", WIRES)
async def test_thinking_survives_a_worker_killed_mid_turn(
    client: SubagentClient,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
    wire: str,
) -> None:
    """The turn retried on a new worker after SIGKILL sends the same signed blocks,
    read from the blob store; nothing is refused."""
    (workspace / "a.txt").write_text("alpha\n")
    (workspace / "b.txt").write_text("beta\n")
    answer = "a.txt holds alpha and b.txt holds beta."
    workers: list[WorkerProcess] = []
    kind = FakeBedrockServer if wire == "bedrock" else FakeVertexServer
    async with kind() as srv:
        srv.add_reply(tool_calls=[read("a.txt")], thinking=["THOUGHT-1: start with a.txt."])
        srv.add_reply(
            text="Now b.txt.",
            tool_calls=[read("b.txt")],
            thinking=["THOUGHT-2: a.txt said alpha.", REDACTED],
        )
        srv.add_reply(text="never finished", hang=True)
        srv.add_reply(text=answer, thinking=["THOUGHT-3: both read; answer."])

        def worker() -> WorkerProcess:
            log = tmp_path / "worker.log"
            workers.append(worker_process(settings, workspace, log, srv.environment()))
            return workers[-1]

        try:
            await worker().start()
            task_id = await client.spawn_task(
                "explore",
                "What do a.txt and b.txt hold?",
                model=CLOUD_MODELS[wire],
                reasoning_effort="medium",
                max_turns=10,
            )
            await asyncio.wait_for(srv.hanging.wait(), 120)
            workers[0].kill()  # in the middle of the third turn's model call
            await worker().start()
            info = await client.check_task(task_id, wait=True, timeout=120)
        finally:
            for w in workers:
                w.close()
    assert info.status == TaskStatus.COMPLETED, info.error
    assert srv.outcomes == ["200", "200", "hang", "200"]  # nothing refused
    assert info.result == answer
    _, second, cut, retried = srv.requests
    assert json.dumps(cut, sort_keys=True) == json.dumps(retried, sort_keys=True)
    blocks = [b for m in retried["messages"] if m["role"] == "assistant" for b in reasoning(m)]
    assert [b["type"] for b in blocks] == ["thinking", "thinking", "redacted_thinking"]
    assert reasoning(second["messages"][1]) == blocks[:1]
    transcript = await client.get_transcript(task_id)
    thoughts = [m.thinking for m in transcript if m.role == "assistant"]
    assert [t.split(":")[0] for t in thoughts] == ["THOUGHT-1", "THOUGHT-2", "THOUGHT-3"]


async def test_subagents_worker_says_in_one_line_what_its_cloud_lacks(
    env: dict[str, str], tmp_path: Path
) -> None:
    """No region: one line naming the variable. No extra (boto3 shadowed by a package
    that cannot be imported, as where it is not installed): one line naming the pip
    command. Never a traceback."""
    bare = {k: v for k, v in env.items() if not k.startswith(("AWS_", "CLOUD_ML", "GOOGLE_"))}
    bare.update(
        SUBAGENTS_MODEL="bedrock:us.anthropic.claude-haiku-4-5-20251001-v1:0",
        AWS_CONFIG_FILE="/nonexistent",
        AWS_EC2_METADATA_DISABLED="true",
    )
    result = await arun("worker", env=bare)
    assert result.code != 0 and "Traceback" not in result.err
    assert result.err.strip().splitlines() == [
        "error: SUBAGENTS_MODEL=bedrock:us.anthropic.claude-haiku-4-5-20251001-v1:0, but no "
        "AWS region on the worker; set AWS_REGION (e.g. us-east-1), or a region in its AWS "
        "profile"
    ]
    shadow = tmp_path / "shadow" / "boto3"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'boto3'\")\n")
    result = await arun(
        "worker",
        env={**bare, "AWS_REGION": "us-east-1", "PYTHONPATH": str(shadow.parent)},
    )
    assert result.code != 0 and "Traceback" not in result.err
    assert result.err.strip().splitlines() == [
        "error: SUBAGENTS_MODEL=bedrock:us.anthropic.claude-haiku-4-5-20251001-v1:0, but "
        "boto3 is not installed on the worker; pip install 'durable-subagents[bedrock]' and "
        "restart it"
    ]
