"""A worker with a tool that has a side effect outside any sandbox: a charge, counted.

Run as ``python -m tests.side_effect_worker ADDRESS TASK_QUEUE WORKSPACE BLOB_DIR LEDGER``;
it prints ``ready`` once it polls. ``charge`` appends a line to the ledger (a file on
the host, as a payment service would keep), then, the first time, hangs until its
worker is killed; later it returns at once.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

from durable_subagents import connect_client
from durable_subagents.config import Settings
from durable_subagents.tools import BUILTIN_TOOLS, ToolRegistry, tool
from durable_subagents.worker import create_worker

LEDGER = Path(sys.argv[5]) if len(sys.argv) > 5 else Path("ledger.txt")


@tool
def charge(amount: int) -> str:
    """Charge an amount: a side effect that must not happen twice unseen.

    Args:
        amount: How much.
    """
    with LEDGER.open("a") as ledger:
        ledger.write(f"charged {amount}\n")
    if len(LEDGER.read_text().splitlines()) == 1:
        threading.Event().wait()  # the first charge hangs until the worker dies
    return f"charged {amount}"


async def main(address: str, task_queue: str, workspace: str, blob_dir: str) -> None:
    settings = Settings(
        address=address,
        task_queue=task_queue,
        workspace=Path(workspace),
        blob_dir=Path(blob_dir),
        sticky_queue_timeout=1.0,
    )
    tools = ToolRegistry(dict(BUILTIN_TOOLS))
    tools.register(charge)
    client = await connect_client(settings.address, settings.namespace)
    async with create_worker(client, settings, tools=tools):
        print("ready", flush=True)
        await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
