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


def test_a_worker_that_called_a_model_leaves_no_open_session_at_exit(
    settings: Settings, tmp_path: object
) -> None:
    """The providers' aiohttp sessions are closed when the process's last worker stops,
    so a worker process never ends with "Unclosed client session" on its stderr."""
    script = textwrap.dedent(
        f"""
        import asyncio, os, uuid
        from pathlib import Path
        from durable_subagents import SubagentClient, connect_client
        from durable_subagents.config import Settings
        from durable_subagents.testing import FakeOpenAIServer
        from durable_subagents.worker import create_worker

        async def main():
            async with FakeOpenAIServer() as srv:
                os.environ["OPENAI_BASE_URL"] = srv.base_url
                os.environ["OPENAI_API_KEY"] = "k"
                srv.add_reply(text="hello")
                temporal = await connect_client({settings.address!r})
                root = Path({str(tmp_path)!r})
                settings = Settings(
                    address={settings.address!r}, task_queue=f"exit-{{uuid.uuid4().hex[:6]}}",
                    data_dir=root, workspace={str(settings.workspace)!r},
                )
                client = SubagentClient(
                    temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
                )
                async with create_worker(temporal, settings):
                    task_id = await client.spawn_task("explore", "x", model="openai:gpt-test")
                    info = await client.check_task(task_id, wait=True, timeout=120)
                    print("status:", info.status.value, info.result)

        asyncio.run(main())
        """
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=90)
    assert run.returncode == 0, run.stderr
    assert "status: completed hello" in run.stdout
    assert "Unclosed" not in run.stderr, run.stderr
