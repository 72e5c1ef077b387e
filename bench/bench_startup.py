"""Cold start: imports, ``subagents --help``, a worker's ready line and its first request.

Every figure is the wall-clock time of fresh processes, the median of ``--runs`` runs.
The runs of one round are interleaved (``import temporalio.client``, then ``import
durable_subagents``, ...) so that a ratio compares processes that ran under the same
load; the ratio column is the median of the rounds' ratios.

    .venv/bin/python bench/bench_startup.py [--runs 11] [--worker-runs 5]
        [--python OTHER/.venv/bin/python]

``--python`` runs the children with another interpreter, e.g. the venv of another
checkout (the dev server and the fake model server stay this one's), to compare two
versions in one session. The children run with the bytecode cache on (``PYTHONDONTWRITEBYTECODE``
dropped) after one unmeasured warm-up run, as an installed package runs.

The worker lines start a dev server (``DevServer``) and a fake OpenAI server
(``durable_subagents.testing``), then for each run start ``python -m durable_subagents
worker`` with ``SUBAGENTS_MODEL=openai:...`` on a queue of its own: **ready** is from
the process's start to its ``worker on ...`` line; at that line the bench spawns a
task, and **first model request** is from the line to the fake server receiving the
task's first request.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from aiohttp import web

from durable_subagents.testing import DevServer, FakeOpenAIServer, free_port

# Its workers run the scripted model and any model of the local fake servers: a worker
# runs only the models its settings allow.
os.environ.setdefault("SUBAGENTS_ALLOW_SCRIPTED", "true")
os.environ.setdefault("SUBAGENTS_MODELS", "*")

IMPORTS: dict[str, list[str]] = {
    "import temporalio.client": ["-c", "import temporalio.client"],
    "import durable_subagents": ["-c", "import durable_subagents"],
    "client API (SubagentClient, errors, types)": [
        "-c",
        "import durable_subagents; from durable_subagents import SubagentClient, "
        "SubagentError, TaskInfo, TaskStatus",
    ],
    "subagents --help": ["-m", "durable_subagents", "--help"],
    "import temporalio.worker": ["-c", "import temporalio.worker"],
    "import durable_subagents.worker": ["-c", "import durable_subagents.worker"],
}
RATIOS = (
    ("import durable_subagents", "import temporalio.client"),
    ("client API (SubagentClient, errors, types)", "import temporalio.client"),
    ("import durable_subagents.worker", "import temporalio.worker"),
)


PY = sys.executable
"""The children's interpreter (``--python``)."""
CWD = "/"
"""The children's working directory: not a checkout, which ``-c`` and ``-m`` would put
first on ``sys.path``."""


WORKER_ARGS = ["-m", "durable_subagents", "worker"]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def wall(args: Sequence[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        [PY, *args],
        env=env,
        cwd=CWD,
        check=True,
        stdout=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def measure_imports(runs: int, env: dict[str, str]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in IMPORTS}
    for args in IMPORTS.values():  # warm-up: writes the bytecode caches
        wall(args, env)
    for _ in range(runs):
        for name, args in IMPORTS.items():
            times[name].append(wall(args, env))
    return times


class ModelServer(FakeOpenAIServer):
    """The fake OpenAI server, with an event set by each request it receives."""

    def __init__(self) -> None:
        super().__init__(default_text="done")
        self.arrived = asyncio.Event()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.arrived.set()
        return await super()._handle(request)


async def read_until(stream: asyncio.StreamReader, found: Callable[[str], bool]) -> str:
    while True:
        line = (await stream.readline()).decode(errors="replace")
        if not line:
            raise RuntimeError("the worker exited before its ready line")
        if found(line):
            return line


async def measure_worker(runs: int, env: dict[str, str]) -> tuple[list[float], list[float]]:
    from durable_subagents.client import SubagentClient

    ready_s: list[float] = []
    first_s: list[float] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    server = DevServer(port=free_port(), ui_port=free_port(), db=tmp / "temporal.db", ui=False)
    model = ModelServer()
    await server.start()
    await model.start()
    try:
        for run in range(runs + 1):  # the first run warms the caches and is not counted
            queue = f"cold-{uuid.uuid4().hex[:8]}"
            workspace = tmp / f"ws-{run}"
            workspace.mkdir()
            worker_env = {
                **env,
                "TEMPORAL_ADDRESS": server.address,
                "TEMPORAL_NAMESPACE": server.namespace,
                "SUBAGENTS_TASK_QUEUE": queue,
                "SUBAGENTS_MODEL": "openai:gpt-4.1-mini",
                "OPENAI_BASE_URL": model.base_url,
                "OPENAI_API_KEY": "bench",
                "SUBAGENTS_WORKSPACE": str(workspace),
                "SUBAGENTS_DATA_DIR": str(tmp / f"data-{run}"),
                "SUBAGENTS_BLOB_DIR": str(tmp / f"blobs-{run}"),
                "COLUMNS": "1000",
            }
            client = await SubagentClient.connect(server.address, server.namespace, queue)
            model.arrived.clear()
            seen = len(model.request_times)
            start = time.monotonic()
            proc = await asyncio.create_subprocess_exec(
                PY,
                *WORKER_ARGS,
                env=worker_env,
                cwd=CWD,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                assert proc.stdout is not None
                await asyncio.wait_for(
                    read_until(proc.stdout, lambda line: line.startswith("worker on ")), 120
                )
                ready = time.monotonic()
                await client.spawn_task("general", "say done")
                await asyncio.wait_for(model.arrived.wait(), 120)
                if run:
                    ready_s.append(ready - start)
                    first_s.append(model.request_times[seen] - ready)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                await proc.wait()
    finally:
        await model.close()
        await server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return ready_s, first_s


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11, help="fresh processes per import line")
    parser.add_argument("--worker-runs", type=int, default=5, help="workers started (0: none)")
    parser.add_argument("--python", default=sys.executable, help="the children's interpreter")
    options = parser.parse_args()
    global PY
    PY = options.python
    env = child_env()
    where = subprocess.run(
        [PY, "-c", "import durable_subagents; print(durable_subagents.__file__)"],
        env=env,
        cwd=CWD,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()

    times = measure_imports(options.runs, env)
    ready_s: list[float] = []
    first_s: list[float] = []
    if options.worker_runs:
        ready_s, first_s = asyncio.run(measure_worker(options.worker_runs, env))

    print(f"date        {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"nproc       {os.cpu_count()}")
    print(f"python      {sys.version.split()[0]}")
    print(f"subagents   {Path(where).parent}")
    print(f"runs        {options.runs} per import line, {options.worker_runs} workers")
    print()
    rows: list[tuple[str, str, str]] = []
    for name, values in times.items():
        rows.append((name, ms(statistics.median(values)), f"{ms(min(values))}-{ms(max(values))}"))
    if ready_s:
        rows.append(
            (
                "subagents worker -> ready line",
                ms(statistics.median(ready_s)),
                f"{ms(min(ready_s))}-{ms(max(ready_s))}",
            )
        )
        rows.append(
            (
                "ready line -> first model request",
                ms(statistics.median(first_s)),
                f"{ms(min(first_s))}-{ms(max(first_s))}",
            )
        )
    width = max(len(r[0]) for r in rows)
    print(f"{'wall-clock, fresh process':<{width}}  {'median ms':>9}  {'range':>11}")
    print(f"{'-' * width}  {'-' * 9}  {'-' * 11}")
    for name, median, spread in rows:
        print(f"{name:<{width}}  {median:>9}  {spread:>11}")
    print()
    print("ratio (median of the rounds' ratios)")
    for name, base in RATIOS:
        ratio = statistics.median(a / b for a, b in zip(times[name], times[base], strict=True))
        print(f"  {name} / {base}: {ratio:.2f}x")


if __name__ == "__main__":
    main()
