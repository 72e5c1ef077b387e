"""Long tasks and the model: what prompt caching saves, and what compaction costs.

Run: ``.venv/bin/python bench/bench_context.py [--turns 20] [--files 30] [--window 32000]``

One dev server (``DevServer``), one in-process worker (``create_worker``), the fake
model servers of ``durable_subagents.testing`` behind the real SDKs. Their token
counts are estimates (4 characters of the request's JSON a token) and their caches
follow each API's documented rules (see ``durable_subagents/testing/_prompt_cache.py``),
so the figures are the ones a real API would report for the same bytes, give or take
the tokenizer. The model reads one file per turn and notes what it found.

1. **Caching**: the 20-turn agent (``--turns``: one ``read_file`` of a 4 KB file per turn,
   then the answer), with caching and without. Anthropic without: the worker's
   ``SUBAGENTS_PROMPT_CACHE=0`` (no ``cache_control``); OpenAI caches on its own, so
   without is a server whose cache forgets at once. **Billed input** is input tokens
   priced as the APIs price them, in full-price tokens: Anthropic uncached 1, cache
   writes 1.25, cache reads 0.1; OpenAI (GPT-4.1) uncached 1, cached 0.25.
2. **Compaction**: ``--files`` files of 16 KB read one per turn through a model whose
   window is ``--window`` tokens (the worker learns it from the first refusal), against
   the same task with no window. Model calls are split into turns, refused requests
   and summary calls; time in compaction is the ``compact_context`` activities'.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import re
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType

from durable_subagents import SubagentClient, TaskInfo, TaskStatus, connect_client
from durable_subagents.config import Settings
from durable_subagents.context._context import SUMMARY_PROMPT
from durable_subagents.providers import clear_provider_cache, close_providers
from durable_subagents.testing import (
    DevServer,
    FakeAnthropicServer,
    FakeModelServer,
    FakeOpenAIServer,
    FakeReply,
    free_port,
)
from durable_subagents.worker import create_worker

# Its workers run the scripted model and any model of the local fake servers: a worker
# runs only the models its settings allow.
os.environ.setdefault("SUBAGENTS_ALLOW_SCRIPTED", "true")
os.environ.setdefault("SUBAGENTS_MODELS", "*")

PRICES = {"anthropic": (1.0, 1.25, 0.1), "openai": (1.0, 0.0, 0.25)}
"""Per wire: the price of an uncached input token, a cache write and a cache read."""
MODELS = {"anthropic": "anthropic:claude-sonnet-4-6", "openai": "openai:gpt-4.1-mini"}
UNKNOWN = {"anthropic": "anthropic:claude-fake", "openai": "openai:fake"}
"""Models the worker's table does not size (so it learns the fake's window)."""
_FACT = re.compile(r"FACT-(\d+) = \w+")
_NOTE = re.compile(r"NOTE: (FACT-\d+ = \w+)")


def write_files(workspace: Path, count: int, size: int) -> None:
    for i in range(count):
        value = hashlib.sha256(str(i).encode()).hexdigest()[:10]
        line = "lorem ipsum dolor sit amet consectetur " * 2
        lines = [f"{i:03d}.{n:04d} {line}" for n in range(max(size // (len(line) + 10), 3))]
        lines[len(lines) // 2] = f"The fact of this file: FACT-{i} = v{value}"
        (workspace / f"f{i:03d}.txt").write_text("\n".join(lines) + "\n")


def last_result(wire: str, body: dict[str, Any]) -> tuple[bool, str]:
    """Whether a request is a compaction's summary call, and its last tool result."""
    if wire == "openai":
        summary = not body.get("tools") and any(
            m["role"] == "system" and SUMMARY_PROMPT in m["content"] for m in body["messages"]
        )
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    else:
        summary = not body.get("tools") and json.dumps(SUMMARY_PROMPT)[1:-1] in json.dumps(
            body.get("system")
        )
        results = [
            b["content"]
            for m in body["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "tool_result"
        ]
    return summary, results[-1] if results else ""


def reader(wire: str, files: int, analysis: int) -> Callable[[dict[str, Any]], FakeReply]:
    """A model that reads f000.. in turn, noting each file's fact, then lists its notes."""
    words = " ".join(f"observation{n}" for n in range(analysis))

    def respond(body: dict[str, Any]) -> FakeReply:
        summary, last = last_result(wire, body)
        notes = sorted(set(_NOTE.findall(json.dumps(body))))
        if summary:
            return FakeReply(text="The agent noted:\n" + "\n".join(f"NOTE: {n}" for n in notes))
        found = _FACT.search(last)
        if found is None:
            return FakeReply(tool_calls=[read(0)])
        i = int(found.group(1))
        if i == files - 1:
            return FakeReply(text="Facts:\n" + "\n".join([*notes, found.group(0)]))
        return FakeReply(text=f"NOTE: {found.group(0)}. {words}", tool_calls=[read(i + 1)])

    return respond


def read(i: int) -> dict[str, Any]:
    return {"name": "read_file", "arguments": {"path": f"f{i:03d}.txt"}}


@dataclass
class Run:
    info: TaskInfo
    seconds: float
    requests: int
    refused: int
    summaries: int
    compacting: float
    largest: int


@asynccontextmanager
async def served(server: FakeModelServer, wire: str) -> AsyncIterator[FakeModelServer]:
    prefix = wire.upper()
    async with server as srv:
        os.environ[f"{prefix}_API_KEY"] = "sk-bench"
        os.environ[f"{prefix}_BASE_URL"] = srv.base_url
        clear_provider_cache()
        try:
            yield srv
        finally:
            await close_providers()


async def run(
    temporal: Any,
    settings: Settings,
    server: FakeModelServer,
    wire: str,
    model: str,
    files: int,
    workspace: Path,
) -> Run:
    clear_provider_cache()
    client = SubagentClient(
        temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
    )
    async with served(server, wire) as srv, create_worker(temporal, settings):
        started = time.perf_counter()
        task_id = await client.spawn_task(
            "explore", "Read every file, noting its fact.", model=model, max_turns=files + 5
        )
        info = await client.check_task(task_id, wait=True, timeout=600)
        seconds = time.perf_counter() - started
    if info.status != TaskStatus.COMPLETED or not info.result or "Facts:" not in info.result:
        raise RuntimeError(f"task {task_id} ended {info.status}: {info.error}")
    if len(_FACT.findall(info.result)) != files:
        raise RuntimeError(f"task {task_id} lost notes: {info.result[:500]}")
    summaries = sum(last_result(wire, b)[0] for b in srv.requests)
    answered = [b for b, o in zip(srv.requests, srv.outcomes, strict=True) if o == "200"]
    return Run(
        info=info,
        seconds=seconds,
        requests=len(srv.requests),
        refused=srv.outcomes.count("400"),
        summaries=summaries,
        compacting=await compaction_seconds(client, task_id),
        largest=max(srv.prompt_tokens(b) for b in answered),
    )


async def compaction_seconds(client: SubagentClient, task_id: str) -> float:
    """Seconds the task's ``compact_context`` activities took (scheduled -> completed)."""
    scheduled: dict[int, float] = {}
    total = 0.0
    async for e in client.temporal.get_workflow_handle(task_id).fetch_history_events():
        at = e.event_time.ToNanoseconds() / 1e9
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if e.activity_task_scheduled_event_attributes.activity_type.name == "compact_context":
                scheduled[e.event_id] = at
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            sid = e.activity_task_completed_event_attributes.scheduled_event_id
            total += at - scheduled.pop(sid, at)
    return total


def billed(wire: str, run: Run) -> float:
    full, write, read = PRICES[wire]
    u = run.info.usage
    uncached = u.input_tokens - u.cache_read_tokens - u.cache_write_tokens
    return uncached * full + u.cache_write_tokens * write + u.cache_read_tokens * read


async def main(args: argparse.Namespace) -> None:
    print(f"date          {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(
        f"machine       {platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}"
    )
    print(f"settings      turns={args.turns} files={args.files} window={args.window}")
    with tempfile.TemporaryDirectory(prefix="bench-context-") as tmp_name:
        tmp = Path(tmp_name)
        server = DevServer(port=free_port(), ui_port=free_port(), db=tmp / "temporal.db", ui=False)
        await server.start()
        try:
            temporal = await connect_client(server.address, server.namespace)

            def settings(name: str, **extra: Any) -> tuple[Settings, Path]:
                workspace = tmp / name
                workspace.mkdir()
                made = Settings(
                    address=server.address,
                    namespace=server.namespace,
                    task_queue=f"bench-{name}-{uuid.uuid4().hex[:6]}",
                    data_dir=tmp / "data",
                    blob_dir=tmp / "blobs",
                    workspace=workspace,
                    **extra,
                )
                return made, workspace

            print("\n1. prompt caching, the 20-turn agent (one 4 KB read a turn)\n")
            files = args.turns - 1
            rows = []
            for wire in ("anthropic", "openai"):
                runs = {}
                for caching in (True, False):
                    s, workspace = settings(f"{wire}-{'on' if caching else 'off'}")
                    if not caching and wire == "anthropic":
                        s = s.model_copy(update={"prompt_cache": False})
                    write_files(workspace, files, 4096)
                    cls = FakeOpenAIServer if wire == "openai" else FakeAnthropicServer
                    ttl = 300.0 if caching or wire == "anthropic" else 0.0
                    fake = cls(responder=reader(wire, files, 20), cache_ttl=ttl)
                    runs[caching] = await run(
                        temporal, s, fake, wire, MODELS[wire], files, workspace
                    )
                base = billed(wire, runs[False])
                for caching, r in runs.items():
                    u = r.info.usage
                    rows.append(
                        (
                            wire,
                            "on" if caching else "off",
                            f"{u.input_tokens:,}",
                            f"{u.cache_read_tokens:,}",
                            f"{u.cache_write_tokens:,}",
                            f"{billed(wire, r):,.0f}",
                            f"{billed(wire, r) / base:.0%}",
                        )
                    )
            table(
                ["wire", "caching", "input tokens", "cache read", "cache write", "billed input",
                 "of uncached"],
                rows,
            )  # fmt: skip

            window_text = f"a {args.window:,}-token window"
            print(f"\n2. compaction, {args.files} reads of 16 KB through {window_text}\n")
            rows = []
            for wire in ("openai", "anthropic"):
                for window in (args.window, None):
                    s, workspace = settings(f"long-{wire}-{window}")
                    write_files(workspace, args.files, 16 * 1024)
                    cls = FakeOpenAIServer if wire == "openai" else FakeAnthropicServer
                    fake = cls(context_window=window, responder=reader(wire, args.files, 120))
                    r = await run(temporal, s, fake, wire, UNKNOWN[wire], args.files, workspace)
                    u = r.info.usage
                    rows.append(
                        (
                            wire,
                            f"{window:,}" if window else "none",
                            str(r.info.turns),
                            str(r.refused),
                            str(r.summaries),
                            str(r.info.compactions),
                            f"{u.input_tokens:,}",
                            f"{u.output_tokens:,}",
                            f"{r.largest:,}",
                            f"{r.seconds:.1f}",
                            f"{r.compacting:.2f}",
                        )
                    )
            table(
                ["wire", "window", "turns", "refused", "summary calls", "compactions",
                 "input tokens", "output tokens", "largest request", "task s", "compacting s"],
                rows,
            )  # fmt: skip
        finally:
            await server.stop()


def table(head: list[str], rows: list[tuple[str, ...]]) -> None:
    """Print a table: the first column left-aligned, the others right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]

    def line(cells: tuple[str, ...] | list[str]) -> str:
        aligned = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(aligned)

    print(line(head))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--files", type=int, default=30)
    parser.add_argument("--window", type=int, default=32_000)
    asyncio.run(main(parser.parse_args()))
