"""A process that used a client ends cleanly: Temporal's runtime goes before finalizing."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from durable_subagents.config import Settings


def test_the_runtime_is_released_before_the_interpreter_finalizes(settings: Settings) -> None:
    """Dropped during finalization, its threads can abort the process (sdk-python#300)."""
    script = textwrap.dedent(
        f"""
        import asyncio, atexit
        import temporalio.runtime

        def after_ours():  # atexit runs handlers last-registered first
            print("runtime held at exit:", temporalio.runtime._runtime_ref._default_runtime)

        atexit.register(after_ours)

        async def main():
            from durable_subagents import SubagentClient
            client = await SubagentClient.connect({settings.address!r}, namespace="default")
            print("tasks:", len(await client.list_tasks()) >= 0)

        asyncio.run(main())
        """
    )
    runs = [
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        for _ in range(5)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert "tasks: True" in run.stdout
        assert "runtime held at exit: None" in run.stdout
