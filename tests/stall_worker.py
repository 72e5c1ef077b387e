"""A worker with a tool that blocks until released: the attacker's stall, in one process.

Run as ``python -m tests.stall_worker ADDRESS TASK_QUEUE WORKSPACE BLOB_DIR``; the tests
send it SIGINT (Ctrl-C) while calls of ``hang`` are blocked.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

from durable_subagents import connect_client
from durable_subagents.config import Settings
from durable_subagents.tools import BUILTIN_TOOLS, ToolContext, ToolRegistry, tool
from durable_subagents.worker import create_worker, exit_if_tool_calls_stuck

RELEASE = threading.Event()
"""Set to let every blocked ``hang`` call return."""


@tool(read_only=True)
def hang(ctx: ToolContext, label: str = "") -> str:
    """Block until released, the way a read of a stuck network disk would.

    Args:
        ctx: The call's context.
        label: Written to the workspace when the call starts.
    """
    (ctx.workspace / f"hang-{label}.started").touch()
    RELEASE.wait()
    return f"released {label}"


def registry() -> ToolRegistry:
    tools = ToolRegistry(dict(BUILTIN_TOOLS))
    tools.register(hang)
    return tools


async def main(address: str, task_queue: str, workspace: str, blob_dir: str) -> None:
    settings = Settings(
        address=address, task_queue=task_queue, workspace=Path(workspace), blob_dir=Path(blob_dir)
    )
    client = await connect_client(settings.address, settings.namespace)
    async with create_worker(client, settings, tools=registry()):
        print("ready", flush=True)
        await asyncio.Future()


if __name__ == "__main__":
    try:
        asyncio.run(main(*sys.argv[1:5]))
    except KeyboardInterrupt:
        print("stopped", flush=True)
        exit_if_tool_calls_stuck(0)  # as the CLI does
