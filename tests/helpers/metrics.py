"""A worker's metrics as Prometheus serves them: run ``run_worker``, scrape, read."""

from __future__ import annotations

import asyncio
import contextlib
import re
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

from durable_subagents.config import Settings
from durable_subagents.worker import run_worker

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError as err:
        return 0, str(err)


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Prometheus text as ``{(name, labels): value}`` (without ``service_name``)."""
    out = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match is None or line.startswith("#"):
            continue
        name, labels, value = match.groups()
        pairs = frozenset((k, v) for k, v in LABEL.findall(labels or "") if k != "service_name")
        out[(name, pairs)] = float(value)
    return out


def value(scraped: dict[Any, float], name: str, **labels: str) -> float:
    """The sum of the series of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, pairs), v in scraped.items() if n == name and want <= pairs)


@contextlib.asynccontextmanager
async def running_worker(settings: Settings) -> AsyncIterator[str]:
    """``run_worker`` in this process; yields its endpoint's base URL once it polls."""
    ready = asyncio.Event()
    task = asyncio.create_task(run_worker(settings, ready=ready))
    waiter = asyncio.create_task(ready.wait())
    await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        waiter.cancel()
        task.result()
    try:
        yield f"http://127.0.0.1:{settings.metrics_port}"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def scrape(base: str) -> dict[Any, float]:
    status, text = await asyncio.to_thread(get, f"{base}/metrics")
    assert status == 200, text
    return samples(text)
