"""Per-turn cost of the S3 blob store beside the local directory, on one dev server.

Run: ``.venv/bin/python bench/bench_blobstore.py [--turns 12] [--repeats 3]``

It starts a Temporal dev server (SQLite file, the low-latency dynamic config) and an S3
server (moto's ``moto_server``, a Python process on 127.0.0.1: slower per request than
MinIO or S3 in the same region, so the S3 column is an upper bound for a nearby
store), and for each side, interleaved, in this process:

- **task**: one subagent task of ``--turns`` turns, each reading a 60 KB file (its
  result is a blob) through a worker whose store is that side's; the time per turn;
- **takeover**: what a worker that did not run a task's previous turns pays to read
  its transcript back (a fresh store and transcript cache loading and expanding the
  finished task's chain);
- **ops**: p50 of single store operations on a fresh store instance (no cache): put of
  a 4 KB transcript node, put of a 60 KB blob, get of a 60 KB blob.

It also counts the store requests per turn of the task (puts and gets). See
``bench/README.md`` for the method and ``docs/benchmarks.md`` for the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from durable_subagents import SubagentClient, TaskStatus, connect_client
from durable_subagents.config import Settings
from durable_subagents.storage._blobstore import BlobStore
from durable_subagents.storage._s3 import S3BlobStore
from durable_subagents.storage._transcript import Transcript
from durable_subagents.testing import DevServer, free_port
from durable_subagents.worker import create_worker

# Its workers run the scripted model and any model of the local fake servers: a worker
# runs only the models its settings allow.
os.environ.setdefault("SUBAGENTS_ALLOW_SCRIPTED", "true")
os.environ.setdefault("SUBAGENTS_MODELS", "*")

BIG_FILE = "".join(f"{n:05d} " + "x" * 93 + "\n" for n in range(600))  # 60 KB


def count_requests(store: BlobStore) -> Counter[str]:
    """Count the requests an S3 store sends (GET and PUT), cache hits excluded."""
    calls: Counter[str] = Counter()
    if not isinstance(store, S3BlobStore):
        return calls
    get, put = store._read_blob, store._write_blob

    async def counted_get(key: str) -> bytes | None:
        calls["GET"] += 1
        return await get(key)

    async def counted_put(key: str, data: bytes) -> None:
        calls["PUT"] += 1
        await put(key, data)

    store._read_blob, store._write_blob = counted_get, counted_put  # type: ignore[method-assign]
    return calls


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", "from moto.server import main; main()", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(endpoint + "/moto-api/", timeout=1).close()
            return proc, endpoint
        except (urllib.error.URLError, OSError):
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.1)


def script(turns: int) -> str:
    import json

    call = {"tool_calls": [{"name": "read_file", "arguments": {"path": "big.txt"}}]}
    return "scripted:" + json.dumps({"turns": [call], "repeat": turns - 1, "final": "done"})


async def run_task(
    temporal: Any, settings: Settings, turns: int
) -> tuple[float, Counter[str], str]:
    """Seconds per turn of one task, the store requests it made, and its id."""
    settings = settings.model_copy()
    store = settings.blob_store()
    calls = count_requests(store)
    # The worker's activities get this store (create_worker asks settings for one).
    object.__setattr__(settings, "blob_store", lambda: store)
    client = SubagentClient(temporal, task_queue=settings.task_queue)
    worker = create_worker(temporal, settings)
    async with worker:
        started = time.perf_counter()
        task_id = await client.spawn_task("explore", "read", model=script(turns))
        info = await client.check_task(task_id, wait=True, timeout=300)
        seconds = time.perf_counter() - started
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.turns == turns
    return seconds / turns, calls, task_id


async def takeover(settings: Settings, temporal: Any, task_id: str) -> float:
    """Seconds a fresh worker takes to load and expand a task's whole transcript."""
    client = SubagentClient(temporal, task_queue=settings.task_queue)
    head = (await client._info(task_id)).head
    transcript = Transcript(settings.blob_store())
    started = time.perf_counter()
    messages = await transcript.load(task_id, head)
    await transcript.expand(task_id, messages)
    return time.perf_counter() - started


async def ops(settings: Settings, rounds: int = 30) -> dict[str, float]:
    """p50 milliseconds of single operations on fresh store instances."""
    times: dict[str, list[float]] = {"put 4 KB": [], "put 60 KB": [], "get 60 KB": []}
    task = f"ops-{uuid.uuid4().hex[:8]}"
    for i in range(rounds):
        small = os.urandom(2048).hex().encode()
        big = os.urandom(30_000).hex().encode()
        store = settings.blob_store()
        t = time.perf_counter()
        await store.put(task, small)
        times["put 4 KB"].append(time.perf_counter() - t)
        t = time.perf_counter()
        ref = await store.put(task, big)
        times["put 60 KB"].append(time.perf_counter() - t)
        fresh = settings.blob_store()
        t = time.perf_counter()
        await fresh.get(task, ref)
        times["get 60 KB"].append(time.perf_counter() - t)
        del i
    return {k: statistics.median(v) * 1000 for k, v in times.items()}


async def main(args: argparse.Namespace) -> None:
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores")
    print(f"turns={args.turns} repeats={args.repeats}")
    moto, endpoint = start_moto()
    os.environ.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_REGION="us-east-1",
    )
    import boto3

    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-blob-") as tmp_name:
            tmp = Path(tmp_name)
            workspace = tmp / "ws"
            workspace.mkdir()
            (workspace / "big.txt").write_text(BIG_FILE)
            server = DevServer(
                port=free_port(), ui_port=free_port(), db=tmp / "temporal.db", ui=False
            )
            await server.start()
            try:
                temporal = await connect_client(server.address, server.namespace)
                base = Settings(
                    address=server.address,
                    namespace=server.namespace,
                    data_dir=tmp / "data",
                    workspace=workspace,
                )
                sides = {
                    "local": base.model_copy(update={"blob_dir": tmp / "blobs"}),
                    "s3": base.model_copy(update={"blob_url": f"s3://{bucket}/bench"}),
                }
                per_turn: dict[str, list[float]] = {k: [] for k in sides}
                takeovers: dict[str, list[float]] = {k: [] for k in sides}
                calls: dict[str, Counter[str]] = {}
                for rep in range(args.repeats + 1):  # the first round warms up
                    order = list(sides) if rep % 2 == 0 else list(reversed(sides))
                    for side in order:
                        settings = sides[side].model_copy(
                            update={"task_queue": f"bench-{side}-{uuid.uuid4().hex[:6]}"}
                        )
                        seconds, counted, task_id = await run_task(temporal, settings, args.turns)
                        took = await takeover(settings, temporal, task_id)
                        if rep:
                            per_turn[side].append(seconds)
                            takeovers[side].append(took)
                            calls[side] = counted
                op_times = {side: await ops(settings) for side, settings in sides.items()}
            finally:
                await server.stop()
    finally:
        moto.terminate()
    report(args.turns, per_turn, takeovers, calls, op_times)


def report(
    turns: int,
    per_turn: dict[str, list[float]],
    takeovers: dict[str, list[float]],
    calls: dict[str, Counter[str]],
    op_times: dict[str, dict[str, float]],
) -> None:
    def med(values: list[float]) -> float:
        return statistics.median(values) * 1000

    rows = [
        ("task: time per turn (ms)", med(per_turn["local"]), med(per_turn["s3"])),
        (f"takeover: read back {turns} turns (ms)", med(takeovers["local"]), med(takeovers["s3"])),
        *((f"op: {k} (ms)", op_times["local"][k], op_times["s3"][k]) for k in op_times["local"]),
    ]
    print()
    print(f"| {'':40} | {'local':>8} | {'s3':>8} | {'s3/local':>8} |")
    print(f"|{'-' * 42}|{'-' * 10}|{'-' * 10}|{'-' * 10}|")
    for name, local, s3 in rows:
        print(f"| {name:40} | {local:8.1f} | {s3:8.1f} | {s3 / local:7.2f}x |")
    print()
    spread = ", ".join(f"{k} {v / turns:.2f}" for k, v in sorted(calls["s3"].items()))
    print(f"S3 requests per turn of the task (one worker, 60 KB tool result): {spread}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
