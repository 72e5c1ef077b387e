"""What production operations cost and hold: metrics per turn, fleet-wide rate limits.

    .venv/bin/python bench/bench_operations.py [--tasks 30] [--workers 2]

1. Recording the product's metrics: microseconds per model turn and per tool call, on
   a runtime with the Prometheus exporter (what ``--metrics-port`` turns on) and on one
   without metrics (every worker records; the calls then go nowhere).
2. ``SUBAGENTS_MODEL_RATE_LIMITS``: N workers (each with its own client, as separate
   hosts) run three-turn tasks against a local OpenAI-compatible server, with no
   limit and with limits of 5 and 10 turns a second; the table gives the rate the
   server saw over the run, the most requests in the first second and in any later
   second.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from durable_subagents import SubagentClient, connect_client
from durable_subagents.config import Settings
from durable_subagents.providers._names import named_model
from durable_subagents.telemetry._metrics import Labels, record_model_turn, record_tool_call
from durable_subagents.testing import DevServer, FakeOpenAIServer, free_port
from durable_subagents.worker import create_worker

# Its workers run the scripted model and any model of the local fake servers: a worker
# runs only the models its settings allow.
os.environ.setdefault("SUBAGENTS_ALLOW_SCRIPTED", "true")
os.environ.setdefault("SUBAGENTS_MODELS", "*")


def metrics_cost(calls: int = 20_000) -> list[tuple[str, float, float]]:
    """(runtime, us per model turn, us per tool call)."""
    rows = []
    runtimes = {
        "prometheus": Runtime(
            telemetry=TelemetryConfig(
                metrics=PrometheusConfig(bind_address=f"127.0.0.1:{free_port()}")
            )
        ),
        "no metrics": Runtime(telemetry=TelemetryConfig()),
    }
    labels = Labels(tools={"read_file"}, default_model="openai:gpt-4.1-mini")
    tokens = {"input": 1200, "output": 80, "reasoning": 0, "cache_read": 0, "cache_write": 0}
    for name, runtime in runtimes.items():
        meter = runtime.metric_meter.with_additional_attributes(
            {"namespace": "default", "task_queue": "subagents", "activity_type": "model_turn"}
        )
        started = time.perf_counter()
        for _ in range(calls):
            record_model_turn(
                meter,
                model=named_model("default", labels.default_model, labels.models),
                outcome="ok",
                seconds=0.8,
                tokens=tokens,
            )
        turn = (time.perf_counter() - started) / calls * 1e6
        started = time.perf_counter()
        for _ in range(calls):
            record_tool_call(meter, tool=labels.tool("read_file"), outcome="ok")
        tool = (time.perf_counter() - started) / calls * 1e6
        rows.append((name, turn, tool))
    return rows


@contextlib.asynccontextmanager
async def workers(server: DevServer, settings: Settings, count: int) -> AsyncIterator[None]:
    async with contextlib.AsyncExitStack() as stack:
        for i in range(count):
            temporal = await connect_client(server.address, identity=f"bench-{i}")
            await stack.enter_async_context(create_worker(temporal, settings))
        yield


def most_in_a_second(times: list[float]) -> int:
    times = sorted(times)
    return max((sum(1 for t in times[i:] if t < s + 1.0) for i, s in enumerate(times)), default=0)


async def rate_run(
    server: DevServer, root: Path, limit: float | None, tasks: int, count: int
) -> tuple[float, int, int]:
    """(turns a second over the run, most in the first second, most in a later second)."""
    settings = Settings(
        address=server.address,
        task_queue=f"bench-{uuid.uuid4().hex[:8]}",
        data_dir=root,
        workspace=root,
        blob_sweep=False,
        model_rate_limits=f"openai={limit:g}" if limit else "",
    )
    async with FakeOpenAIServer() as srv:
        os.environ["OPENAI_BASE_URL"] = srv.base_url
        os.environ["OPENAI_API_KEY"] = "sk-bench"
        async with workers(server, settings, count):
            temporal = await connect_client(server.address)
            client = SubagentClient(
                temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
            )
            read = [{"name": "list_files", "arguments": {}}]
            for _ in range(tasks):  # three turns a task: two reads, then an answer
                srv.add_reply(tool_calls=read)
                srv.add_reply(tool_calls=read)
                srv.add_reply(text="done")
            ids = await asyncio.gather(
                *(
                    client.spawn_task("explore", f"q{i}", model="openai:gpt-bench")
                    for i in range(tasks)
                )
            )
            await client.wait_tasks(list(ids), timeout=600)
        times = sorted(srv.request_times)
    span = times[-1] - times[0]
    later = [t for t in times if t >= times[0] + 1.0]
    first = sum(1 for t in times if t < times[0] + 1.0)
    return (len(times) - 1) / span, first, most_in_a_second(later)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    print("recording the product's metrics (median of 3 runs of 20,000 calls)")
    print(f"{'runtime':<12} {'us per model turn':>18} {'us per tool call':>17}")
    runs = [metrics_cost() for _ in range(3)]
    for i, (name, _, _) in enumerate(runs[0]):
        turn = statistics.median(r[i][1] for r in runs)
        tool = statistics.median(r[i][2] for r in runs)
        print(f"{name:<12} {turn:>18.1f} {tool:>17.1f}")

    print()
    print(f"model rate limits: {args.tasks} three-turn tasks, {args.workers} workers")
    header = ("limit", "turns/s over the run", "first second", "most in a later second")
    print(f"{header[0]:<8} {header[1]:>21} {header[2]:>13} {header[3]:>23}")
    with tempfile.TemporaryDirectory(prefix="bench-ops-") as tmp:
        root = Path(tmp)
        async with DevServer(port=free_port(), ui=False, db=root / "t.db") as server:
            for limit in (None, 10.0, 5.0):
                rate, first, later = await rate_run(server, root, limit, args.tasks, args.workers)
                shown = f"{limit:g}/s" if limit else "none"
                print(f"{shown:<8} {rate:>21.1f} {first:>13} {later:>23}")


if __name__ == "__main__":
    asyncio.run(main())
