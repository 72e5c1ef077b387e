"""Per-turn cost of payload encryption (``SUBAGENTS_PAYLOAD_KEY``), on one dev server.

Run: ``.venv/bin/python bench/bench_encryption.py [--turns 8] [--rounds 6] [--concurrency 6]``

It starts its own Temporal dev server (``DevServer``: SQLite file in a temporary
directory, the low-latency dynamic config) and, in this process, one subagent worker
(``create_worker``) and one client per variant, each on its own task queue and blob
directory:

- **(0) no codec**: ``Client.connect(..., data_converter=pydantic_data_converter)``, the
  SDK's plain pydantic converter, as before payload encryption existed;
- **(a) no key**: ``connect_client(...)`` without keys: the project's converter with its
  pass-through ``EncryptionCodec`` (it encrypts nothing, only refuses encrypted data);
- **(b) key**: ``Settings(payload_key=new_key())`` and ``connect_client(..., keys=...)``:
  every payload AES-256-GCM encrypted, every blob and record sealed.

A task is ``--turns`` tool-calling turns of the offline ``scripted:`` model, each a
``read_file`` of a different file, then a final answer. Two sizes of tool output: ~8 KB
(just under the 8 KiB inline limit: it travels in payloads and in the transcript node)
and ~60 KB (over it: a blob of its own). Per size, tasks run one at a time
(``--sequential`` per round) and ``--concurrency`` at once. Measured per tool-calling
turn: wall time (spawn -> ``check_task(wait=True)``), this process's CPU time
(``time.process_time``: worker and client, Python and the SDK's Rust threads) and the
dev server's CPU (``/proc``). The three variants run back to back for each measure (one
at a time: one task of each in turn), in an order that rotates every round, so the
machine's drift falls on all three; figures are medians over ``--rounds`` rounds, after
two warm-up tasks per variant and size.

Then one more task per variant and size with the codec, the key ring and the blob
address hash wrapped in thread-CPU timers: the CPU each turn spends in them, counted
rather than inferred from a difference of noisy totals. Last, micro-benchmarks without
Temporal (variants timed in turn, best of seven): codec and whole-converter encode +
decode of one payload (1 KB, 64 KB, 1 MB) and the blob store's per-byte work in MB/s.
The default run takes about 2 minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import resource
import statistics
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bench_core import code_commit, cpu_model, server_version
from bench_scale import cpu_seconds
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter

from durable_subagents import SubagentClient, TaskStatus, connect_client
from durable_subagents.config import Settings
from durable_subagents.storage import _blobstore
from durable_subagents.storage._blobstore import blob_ref
from durable_subagents.storage._sealing import KeyRing, new_key
from durable_subagents.testing import DevServer, free_port
from durable_subagents.wire._codec import EncryptionCodec, data_converter
from durable_subagents.worker import create_worker

# Its workers run the scripted model and any model of the local fake servers: a worker
# runs only the models its settings allow.
os.environ.setdefault("SUBAGENTS_ALLOW_SCRIPTED", "true")
os.environ.setdefault("SUBAGENTS_MODELS", "*")

AGENT = "explore"
WAIT_TIMEOUT = 300.0
VARIANTS = ("0", "a", "b")
LABELS = {"0": "(0) no codec", "a": "(a) no key", "b": "(b) key"}
SIZES = {8: "8 KB inline", 60: "60 KB blob"}
"""Tool output sizes (KB) and what the transcript does with them."""
LINE = 93
"""Characters of text per file line; ``read_file`` adds a 6-digit number and a tab."""


# ---------------------------------------------------------------------- the workspace


def file_name(kb: int, turn: int) -> str:
    return f"s{kb:02d}-{turn:03d}.txt"


def write_files(workspace: Path, turns: int) -> None:
    """One file per size and turn, all different: every turn stores new bytes."""
    for kb in SIZES:
        lines = kb * 1000 // (LINE + 8)  # 8 KB: 79 lines, 7,979 bytes of tool output
        for turn in range(turns):
            body = "".join(
                f"{kb:02d}-{turn:03d}-{n:05d} ".ljust(LINE, "abcdefghij"[n % 10]) + "\n"
                for n in range(lines)
            )
            (workspace / file_name(kb, turn)).write_text(body)


def script(kb: int, turns: int) -> str:
    steps: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": file_name(kb, t)}}]}
        for t in range(turns)
    ]
    return "scripted:" + json.dumps([*steps, {"text": "done"}])


# ---------------------------------------------------------------------- one variant


@dataclass
class Side:
    """One variant: its Temporal client, settings and subagent client."""

    name: str
    temporal: Client
    settings: Settings
    client: SubagentClient
    last_task: dict[int, str] = field(default_factory=dict)


async def make_side(name: str, server: DevServer, tmp: Path, workspace: Path) -> Side:
    settings = Settings(
        address=server.address,
        namespace=server.namespace,
        task_queue=f"bench-enc-{name}-{uuid.uuid4().hex[:6]}",
        data_dir=tmp / f"data-{name}",
        blob_dir=tmp / f"blobs-{name}",
        workspace=workspace,
        payload_key=new_key() if name == "b" else None,
    )
    if name == "0":
        temporal = await Client.connect(
            server.address, namespace=server.namespace, data_converter=pydantic_data_converter
        )
    else:
        temporal = await connect_client(
            server.address, server.namespace, keys=settings.payload_keys()
        )
    client = SubagentClient(
        temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
    )
    return Side(name, temporal, settings, client)


async def run_task(side: Side, kb: int, turns: int) -> float:
    """Seconds from spawn to ``check_task(wait=True)`` returning completed."""
    started = time.perf_counter()
    task_id = await side.client.spawn_task(
        AGENT, "benchmark encryption", model=script(kb, turns), max_turns=turns + 1
    )
    info = await side.client.check_task(task_id, wait=True, timeout=WAIT_TIMEOUT)
    seconds = time.perf_counter() - started
    if info.status != TaskStatus.COMPLETED or info.result != "done":
        raise RuntimeError(f"{side.name}: task {task_id} ended {info.status}: {info.error}")
    side.last_task[kb] = task_id
    return seconds


@dataclass
class Block:
    """One measure of one variant, per tool-calling turn (ms)."""

    latency: float
    wall: float
    cpu: float
    server_cpu: float
    turns: int


async def block(side: Side, kb: int, turns: int, tasks: int, at_once: bool, pid: int) -> Block:
    cpu0, server0 = time.process_time(), cpu_seconds(pid)
    started = time.perf_counter()
    if at_once:
        latencies = list(await asyncio.gather(*(run_task(side, kb, turns) for _ in range(tasks))))
    else:
        latencies = [await run_task(side, kb, turns) for _ in range(tasks)]
    wall = time.perf_counter() - started
    total = tasks * turns
    return Block(
        latency=statistics.median(latencies) / turns * 1000,
        wall=wall / total * 1000,
        cpu=(time.process_time() - cpu0) / total * 1000,
        server_cpu=(cpu_seconds(pid) - server0) / total * 1000,
        turns=total,
    )


def merged(blocks: list[Block]) -> Block:
    """Blocks of one task each as one: median latency, the rest per turn over all."""
    turns = sum(b.turns for b in blocks)

    def per_turn(get: Callable[[Block], float]) -> float:
        return sum(get(b) * b.turns for b in blocks) / turns

    return Block(
        latency=statistics.median(b.latency for b in blocks),
        wall=per_turn(lambda b: b.wall),
        cpu=per_turn(lambda b: b.cpu),
        server_cpu=per_turn(lambda b: b.server_cpu),
        turns=turns,
    )


async def history_bytes(side: Side, task_id: str) -> int:
    handle = side.temporal.get_workflow_handle(task_id)
    return sum([e.ByteSize() async for e in handle.fetch_history_events()])


# ---------------------------------------------------------------------- counted work


class Meter:
    """Thread CPU seconds, calls and bytes spent in the wrapped functions, by kind."""

    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.calls: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()

    def add(self, kind: str, seconds: float, size: int) -> None:
        self.seconds[kind] += seconds
        self.calls[kind] += 1
        self.bytes[kind] += size


def _payload_bytes(payloads: Sequence[Payload]) -> int:
    return sum(p.ByteSize() for p in payloads)


@contextlib.contextmanager
def metered(meter: Meter) -> Iterator[None]:
    """Wrap the codec, the key ring's blob work and the plain blob address in timers.

    Thread CPU time (``time.thread_time``) around each call: what the call cost the
    thread it ran on, not time it spent preempted. The wrappers add ~1 µs per call.
    """
    saved: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, name: str, kind: str, size: Callable[..., int]) -> None:
        original = getattr(owner, name)
        saved.append((owner, name, original))
        if asyncio.iscoroutinefunction(original):

            async def timed_async(*args: Any) -> Any:
                started = time.thread_time()
                out = await original(*args)  # returns without suspending: all CPU
                meter.add(kind, time.thread_time() - started, size(*args))
                return out

            setattr(owner, name, timed_async)
        else:

            def timed(*args: Any) -> Any:
                started = time.thread_time()
                out = original(*args)
                meter.add(kind, time.thread_time() - started, size(*args))
                return out

            setattr(owner, name, timed)

    wrap(EncryptionCodec, "encode", "codec encode", lambda _s, p: _payload_bytes(p))
    wrap(EncryptionCodec, "decode", "codec decode", lambda _s, p: _payload_bytes(p))
    wrap(KeyRing, "seal", "blob seal", lambda _s, d, *_: len(d))
    wrap(KeyRing, "open", "blob open", lambda _s, d, *_: len(d))
    wrap(KeyRing, "mac", "blob address", lambda _s, d, *_: len(d))
    wrap(_blobstore, "blob_ref", "blob address", lambda d: len(d))
    try:
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


async def counted(side: Side, kb: int, turns: int) -> tuple[Meter, float]:
    """The metered work of one task, and this process's CPU seconds for it."""
    meter = Meter()
    with metered(meter):
        cpu0 = time.process_time()
        await run_task(side, kb, turns)
        return meter, time.process_time() - cpu0


# ---------------------------------------------------------------------- micro


Call = Callable[[], Awaitable[object]]


async def _count_for(call: Call, seconds: float) -> int:
    """How many calls take about ``seconds``."""
    count = 1
    while True:
        started = time.perf_counter()
        for _ in range(count):
            await call()
        took = time.perf_counter() - started
        if took >= 0.01:
            return max(1, int(count * seconds / took))
        count *= 2


async def best_of(
    calls: dict[str, Call], repeats: int = 7, seconds: float = 0.03
) -> tuple[dict[str, float], dict[str, float]]:
    """Seconds per call and minor page faults per call, by variant.

    The variants are timed in turn, ``repeats`` times each (~``seconds`` a timing);
    the best timing of each is kept, so a burst of the machine's other work falls on
    one timing, not on one variant.
    """
    counts = {v: await _count_for(call, seconds) for v, call in calls.items()}
    best = dict.fromkeys(calls, float("inf"))
    faults = dict.fromkeys(calls, 0.0)
    for _ in range(repeats):
        for v, call in calls.items():
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            started = time.perf_counter()
            for _ in range(counts[v]):
                await call()
            best[v] = min(best[v], (time.perf_counter() - started) / counts[v])
            after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            faults[v] += (after - before) / counts[v] / repeats
    return best, faults


def _sync(work: Callable[[], object]) -> Call:
    async def call() -> object:
        return work()

    return call


MicroRow = tuple[str, dict[str, float], str]


async def codec_round(codec: EncryptionCodec, payload: Payload) -> object:
    return await codec.decode(await codec.encode([payload]))


async def converter_round(converter: DataConverter, value: str) -> object:
    return await converter.decode(await converter.encode([value]), [str])


async def micro() -> list[MicroRow]:
    """Rows of ``(measure, {variant: value}, unit)``."""
    keys = KeyRing.parse(new_key())
    assert keys is not None
    codecs = {"a": EncryptionCodec(None), "b": EncryptionCodec(keys)}
    converters: dict[str, DataConverter] = {
        "0": pydantic_data_converter,
        "a": data_converter(None),
        "b": data_converter(keys),
    }
    rows: list[MicroRow] = []
    for size, label in ((1024, "1 KB"), (64 * 1024, "64 KB"), (1024 * 1024, "1 MB")):
        value = os.urandom(size // 2).hex()[: size - 2]  # a JSON string of `size` bytes
        payload = pydantic_data_converter.payload_converter.to_payloads([value])[0]
        codec_s, codec_faults = await best_of(
            {v: partial(codec_round, c, payload) for v, c in codecs.items()}
        )
        conv_s, conv_faults = await best_of(
            {v: partial(converter_round, c, value) for v, c in converters.items()}
        )
        rows.append((f"codec encode+decode, {label}", _scaled(codec_s, 1e6), "µs"))
        rows.append((f"converter encode+decode, {label}", _scaled(conv_s, 1e6), "µs"))
        if size > 64 * 1024:
            rows.append((f"  page faults per codec call, {label}", codec_faults, "count"))
            rows.append((f"  page faults per converter call, {label}", conv_faults, "count"))
    for size, label in ((64 * 1024, "64 KB"), (1024 * 1024, "1 MB")):
        data = os.urandom(size)
        aad = b"blob:" + blob_ref(data).encode()
        sealed = keys.seal(data, aad)

        def keyed_put(data: bytes = data) -> object:  # put() with a key: address, seal
            return keys.seal(data, b"blob:hmac:" + keys.mac(data).encode())

        def keyed_get(sealed: bytes = sealed, aad: bytes = aad) -> object:  # open, check
            kid, plain = keys.open(sealed, aad, "bench")
            return keys.mac(plain, kid)

        work, _ = await best_of(
            {
                "address": _sync(partial(blob_ref, data)),  # put() and get() without a key
                "seal": _sync(partial(keys.seal, data, aad)),
                "open": _sync(partial(keys.open, sealed, aad, "bench")),
                "put": _sync(keyed_put),
                "get": _sync(keyed_get),
            }
        )
        rate = {k: size / 1e6 / v for k, v in work.items()}
        rows.append((f"blob seal, {label}", {"b": rate["seal"]}, "MB/s"))
        rows.append((f"blob open, {label}", {"b": rate["open"]}, "MB/s"))
        put = {"0": rate["address"], "a": rate["address"], "b": rate["put"]}
        get = {"0": rate["address"], "a": rate["address"], "b": rate["get"]}
        rows.append((f"blob put: address (+seal), {label}", put, "MB/s"))
        rows.append((f"blob get: (open+) check, {label}", get, "MB/s"))
    return rows


def _scaled(values: dict[str, float], factor: float) -> dict[str, float]:
    return {k: v * factor for k, v in values.items()}


# ---------------------------------------------------------------------- report


def aes_ni() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return "yes" if " aes " in f"{line} " else "no"
    except OSError:
        pass
    return "?"


def machine_facts() -> list[str]:
    return [
        f"date          {datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
        f"commit        {code_commit(' + uncommitted changes')}",
        f"machine       {platform.system()} {platform.release()} · {cpu_model()}",
        f"nproc         {len(os.sched_getaffinity(0))} (AES-NI: {aes_ni()})",
        f"python        {platform.python_version()}",
        f"temporalio    {version('temporalio')}",
        f"cryptography  {version('cryptography')}",
        f"server        {server_version()}",
        f"subagents     {version('durable-subagents')}",
    ]


def print_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:{'<' if i == 0 else '>'}{w}}}" for i, w in enumerate(widths)).format
    print(fmt(*header))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(fmt(*row))


def cell(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def ratio(num: float | None, den: float | None) -> str:
    return f"{num / den:.2f}" if num is not None and den else "-"


def percent(num: float | None, den: float | None) -> str:
    return f"{(num / den - 1) * 100:+.1f}%" if num is not None and den else "-"


def report_turns(
    results: dict[str, dict[str, list[float]]], pooled: dict[str, dict[str, float]]
) -> None:
    med = statistics.median
    rows = []
    for measure, by_side in results.items():
        m = {v: med(by_side[v]) for v in VARIANTS}
        paired = [b / a for a, b in zip(by_side["a"], by_side["b"], strict=True)]
        rows.append(
            (
                measure,
                *(cell(m[v]) for v in VARIANTS),
                ratio(m["a"], m["0"]),
                ratio(m["b"], m["a"]),
                percent(m["b"], m["a"]),
                f"{min(paired):.2f}-{max(paired):.2f}",
            )
        )
    for measure, one in pooled.items():
        rows.append(
            (
                measure,
                *(cell(one[v], 2 if "history" in measure else 1) for v in VARIANTS),
                ratio(one["a"], one["0"]),
                ratio(one["b"], one["a"]),
                percent(one["b"], one["a"]),
                "",
            )
        )
    labels = tuple(LABELS[v] for v in VARIANTS)
    print_table(("ms per tool-calling turn", *labels, "a/0", "b/a", "b vs a", "b/a rounds"), rows)


def report_counted(counts: dict[int, dict[str, tuple[Meter, float]]], turns: int) -> None:
    print()
    print("where the codec and the keys spend CPU, per tool-calling turn (one task each;")
    print("thread CPU inside the calls; calls, KB passed, µs):")
    rows = []
    for kb, what in SIZES.items():
        by_side = counts[kb]
        kinds = sorted({k for meter, _cpu in by_side.values() for k in meter.calls})
        for kind in kinds:
            rows.append(
                (
                    f"{what}: {kind}",
                    *(
                        f"{m.calls[kind] / turns:.1f} · {m.bytes[kind] / 1000 / turns:.1f} KB"
                        f" · {m.seconds[kind] * 1e6 / turns:.0f} µs"
                        for m, _cpu in (by_side[v] for v in VARIANTS)
                    ),
                )
            )
        total = {v: sum(by_side[v][0].seconds.values()) * 1e6 / turns for v in VARIANTS}
        cpu = {v: by_side[v][1] * 1e6 / turns for v in VARIANTS}
        rows.append(
            (
                f"{what}: all of it (% of process CPU)",
                *(f"{total[v]:.0f} µs ({total[v] / cpu[v] * 100:.2f}%)" for v in VARIANTS),
            )
        )
        extra = total["b"] - total["a"]
        rows.append(
            (
                f"{what}: (b) - (a), timers cancel out",
                "",
                "",
                f"+{extra:.0f} µs ({extra / cpu['a'] * 100:.2f}%)",
            )
        )
    print_table(("per turn", *(LABELS[v] for v in VARIANTS)), rows)


def report_micro(rows: list[MicroRow]) -> None:
    print()
    print("micro (best of 7 timings of ~30 ms, variants in turn; no Temporal; MB/s ratios are")
    print("of time per byte):")
    out = []
    for measure, values, unit in rows:
        zero, a, b = values.get("0"), values.get("a"), values.get("b")
        if unit == "MB/s":  # a ratio of time: invert
            zero, a, b = (1 / x if x else None for x in (zero, a, b))
        codec_row = measure.startswith("codec")
        if unit == "count":
            out.append((f"{measure}", *(cell(values.get(v)) for v in VARIANTS), "", "", ""))
            continue
        out.append(
            (
                f"{measure} ({unit})",
                *(cell(values.get(v)) for v in VARIANTS),
                ratio(a, zero),
                "-" if codec_row else ratio(b, a),
                f"+{(b or 0) - (a or 0):.1f} µs" if codec_row else percent(b, a),
            )
        )
    print_table(("measure", *(LABELS[v] for v in VARIANTS), "a/0", "b/a", "b vs a"), out)


# ---------------------------------------------------------------------- main


async def main(args: argparse.Namespace) -> None:
    for fact in machine_facts():
        print(fact)
    print(
        f"settings      turns={args.turns} rounds={args.rounds} "
        f"sequential={args.sequential} concurrency={args.concurrency}"
    )
    print()
    with tempfile.TemporaryDirectory(prefix="bench-enc-") as tmp_name:
        tmp = Path(tmp_name)
        workspace = tmp / "ws"
        workspace.mkdir()
        write_files(workspace, args.turns)
        server = DevServer(port=free_port(), ui_port=free_port(), db=tmp / "temporal.db", ui=False)
        await server.start()
        try:
            results, pooled, counts = await bench_all(server, tmp, workspace, args)
        finally:
            await server.stop()
    micro_rows = await micro()
    print()
    report_turns(results, pooled)
    report_counted(counts, args.turns)
    report_micro(micro_rows)


async def bench_all(
    server: DevServer, tmp: Path, workspace: Path, args: argparse.Namespace
) -> tuple[
    dict[str, dict[str, list[float]]],
    dict[str, dict[str, float]],
    dict[int, dict[str, tuple[Meter, float]]],
]:
    pid = server.pid
    assert pid is not None
    sides = {v: await make_side(v, server, tmp, workspace) for v in VARIANTS}
    results: dict[str, dict[str, list[float]]] = {}
    totals: dict[str, defaultdict[str, float]] = {v: defaultdict(float) for v in VARIANTS}

    def record(measure: str, side: str, value: float) -> None:
        results.setdefault(measure, {v: [] for v in VARIANTS})[side].append(value)

    async with contextlib.AsyncExitStack() as stack:
        for side in sides.values():
            await stack.enter_async_context(create_worker(side.temporal, side.settings))
        for side in sides.values():  # warm-up: the sandbox, caches, connections
            for kb in SIZES:
                await block(side, kb, args.turns, 2, True, pid)
        for rnd in range(args.rounds):
            order = VARIANTS[rnd % 3 :] + VARIANTS[: rnd % 3]
            line = []
            for kb, what in SIZES.items():
                for at_once in (False, True):
                    tasks = args.concurrency if at_once else args.sequential
                    mode = f"{tasks} at once" if at_once else "1 at a time"
                    if at_once:
                        got = {
                            v: await block(sides[v], kb, args.turns, tasks, True, pid)
                            for v in order
                        }
                    else:  # one task of each variant in turn
                        parts: dict[str, list[Block]] = {v: [] for v in order}
                        for _ in range(tasks):
                            for v in order:
                                parts[v].append(
                                    await block(sides[v], kb, args.turns, 1, False, pid)
                                )
                        got = {v: merged(parts[v]) for v in order}
                    for v, b in got.items():
                        record(f"{what}, {mode}: wall", v, b.latency)
                        if at_once:
                            record(f"{what}, {mode}: wall / turns done", v, b.wall)
                        record(f"{what}, {mode}: CPU, this process", v, b.cpu)
                        record(f"{what}, {mode}: CPU, dev server", v, b.server_cpu)
                        totals[v]["turns"] += b.turns
                        totals[v]["cpu"] += b.cpu * b.turns
                        totals[v]["server"] += b.server_cpu * b.turns
                    line.append(
                        f"{kb}K {'x' + str(tasks) if at_once else 'x1'} "
                        + "/".join(f"{got[v].latency:.0f}" for v in VARIANTS)
                    )
            print(f"round {rnd + 1}/{args.rounds} (ms/turn 0/a/b): " + ", ".join(line), flush=True)
        pooled = {
            "all blocks: CPU, this process": {
                v: totals[v]["cpu"] / totals[v]["turns"] for v in VARIANTS
            },
            "all blocks: CPU, dev server": {
                v: totals[v]["server"] / totals[v]["turns"] for v in VARIANTS
            },
        }
        for kb, what in SIZES.items():
            pooled[f"{what}: history KB per turn"] = {
                v: await history_bytes(s, s.last_task[kb]) / 1000 / args.turns
                for v, s in sides.items()
            }
        counts = {
            kb: {v: await counted(sides[v], kb, args.turns) for v in VARIANTS} for kb in SIZES
        }
    return results, pooled, counts


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=8, help="tool-calling turns per task")
    parser.add_argument("--rounds", type=int, default=6, help="rounds; the median is shown")
    parser.add_argument("--sequential", type=int, default=2, help="tasks one at a time per round")
    parser.add_argument("--concurrency", type=int, default=6, help="tasks at once per round")
    args = parser.parse_args(argv)
    if min(args.turns, args.rounds, args.sequential, args.concurrency) < 1:
        parser.error("--turns, --rounds, --sequential and --concurrency must be at least 1")
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
