"""A worker whose workflow code has a bug: the policy raises when it judges a bash call.

Run as ``python -m tests.faulty_worker ADDRESS TASK_QUEUE WORKSPACE BLOB_DIR``; it prints
``ready`` once it polls. The bug sits in a module the workflow sandbox passes through,
so the workflow code the sandbox imports for each run calls it, as it would call a
real mistake in the library.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import durable_subagents.policy as policy
from durable_subagents import connect_client
from durable_subagents.config import Settings
from durable_subagents.worker import create_worker

_real = policy.verdict


BUG = os.environ.get("FAULTY_BUG") or "planted bug: the verdict of a bash call cannot be taken"
"""What the bug says (``FAULTY_BUG``: a hostile text, for what shows it)."""


def broken_verdict(call: Any, *args: Any, **kwargs: Any) -> Any:
    if call.name == "bash":
        raise RuntimeError(BUG)
    return _real(call, *args, **kwargs)


async def main(address: str, task_queue: str, workspace: str, blob_dir: str) -> None:
    policy.verdict = broken_verdict  # type: ignore[assignment]
    settings = Settings(
        address=address,
        task_queue=task_queue,
        workspace=Path(workspace),
        blob_dir=Path(blob_dir),
        sticky_queue_timeout=1.0,
    )
    client = await connect_client(settings.address, settings.namespace)
    async with create_worker(client, settings):
        print("ready", flush=True)
        await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
