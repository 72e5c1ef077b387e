"""What each entry point imports, each in a fresh interpreter.

A client never loads a provider SDK, the bash parser, the blob store's S3 client,
cryptography (without a payload key), the MCP SDK or Temporal's worker; ``subagents
--help`` loads none of Temporal; a client starts and signals the workflow by name, so it
never loads the workflows' code either; a worker loads a provider's SDK once it first runs that
provider, and only that one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

from durable_subagents.testing import DevServer

from ..helpers.tasks import TEST_MODELS

CLIENT_NEVER = (
    "openai",
    "anthropic",
    "tree_sitter",
    "obstore",
    "cryptography",
    "mcp",
    "temporalio.worker",
)
PROVIDER_SDKS = ("openai", "anthropic")


def loaded_after(code: str, **env: str) -> dict[str, set[str]]:
    """Run ``code`` in a fresh interpreter; ``stage(name)`` in it records ``sys.modules``.

    Returns:
        The modules loaded at each stage, by name.
    """
    prelude = textwrap.dedent(
        """
        import json as _json, sys as _sys

        def stage(name):
            print("STAGE", name, _json.dumps(sorted(_sys.modules)), flush=True)
        """
    )
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SUBAGENTS_", "OPENAI_", "ANTHROPIC_", "TEMPORAL_"))
    }
    done = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=150,
        env={**clean, **TEST_MODELS, **env},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    stages: dict[str, set[str]] = {}
    for line in done.stdout.splitlines():
        if line.startswith("STAGE "):
            _, name, modules = line.split(" ", 2)
            stages[name] = set(json.loads(modules))
    return stages


def among(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    """The top-level packages of ``packages`` (``tree_sitter`` covers ``tree_sitter_bash``,
    ``mcp`` covers ``mcp_types``) that ``modules`` holds, or a module of theirs."""
    return sorted(
        p for p in packages if any(m == p or m.startswith((p + ".", p + "_")) for m in modules)
    )


async def test_a_client_loads_no_sdk_parser_or_worker(dev_server: DevServer) -> None:
    stages = loaded_after(
        """
        import asyncio, os

        import durable_subagents
        stage("package")
        from durable_subagents import (
            AgentSpec, InvalidRequest, SubagentClient, SubagentError, TaskInfo, TaskStatus,
        )
        from durable_subagents.errors import TaskNotFound
        from durable_subagents.types import Message, TaskEvent
        stage("names")

        async def main():
            client = await SubagentClient.connect(
                os.environ["ADDRESS"], os.environ["NAMESPACE"], os.environ["QUEUE"]
            )
            # no worker polls this queue: the tasks wait, as spawned
            agent = AgentSpec(name="looker", tools=["read_file"])
            for model in ("openai:gpt-4.1-mini", "anthropic:claude-haiku-4-5", "scripted"):
                task = await client.spawn_task("explore", "look around", model=model)
                info = await client.check_task(task)
                assert info.status == TaskStatus.PENDING, info.status
            try:
                # (a well-formed NAME:model may be a worker's endpoint: no prefix is not)
                await client.spawn_task("explore", "x", model="nonsense-model")
            except InvalidRequest:
                pass
            else:
                raise AssertionError("a malformed model name was taken")
            try:
                await client.check_task("no-such-task")
            except TaskNotFound:
                pass
            else:
                raise AssertionError("an unknown task was found")
            assert (await client.list_tasks())

        asyncio.run(main())
        stage("used")
        """,
        ADDRESS=dev_server.address,
        NAMESPACE=dev_server.namespace,
        QUEUE=f"cold-{uuid.uuid4().hex[:8]}",
    )
    assert set(stages) == {"package", "names", "used"}
    for name, modules in stages.items():
        assert among(modules, CLIENT_NEVER) == [], name
        assert "durable_subagents.worker" not in modules, name
        # it starts and signals the workflow by name, never loading its code
        assert "durable_subagents.workflows" not in modules, name
    # the package alone loads neither Temporal nor the client
    assert among(stages["package"], ("temporalio", "pydantic")) == []


def test_help_loads_no_temporal_sdk_or_parser() -> None:
    stages = loaded_after(
        """
        import sys

        import durable_subagents.cli
        stage("imported")
        sys.argv = ["subagents", "--help"]
        try:
            durable_subagents.cli.app(prog_name="subagents")
        except SystemExit as exit:
            assert not exit.code, exit.code
        stage("help")
        """
    )
    assert set(stages) == {"imported", "help"}
    for name, modules in stages.items():
        assert among(modules, (*PROVIDER_SDKS, "tree_sitter", "temporalio")) == [], name
        assert [m for m in modules if m.startswith("durable_subagents.worker")] == [], name


async def test_a_worker_loads_a_provider_sdk_when_it_runs_it(
    dev_server: DevServer, tmp_path: Path
) -> None:
    (tmp_path / "ws").mkdir()
    stages = loaded_after(
        """
        import asyncio, os
        from pathlib import Path

        import durable_subagents.worker
        stage("imported")

        from durable_subagents import SubagentClient, TaskStatus
        from durable_subagents.providers import resolve_provider
        from durable_subagents.config import Settings
        from durable_subagents.testing import FakeOpenAIServer
        from durable_subagents.types import Message, ModelRequest
        from temporalio.exceptions import ApplicationError

        async def main():
            tmp = Path(os.environ["TMP"])
            settings = Settings(
                address=os.environ["ADDRESS"],
                namespace=os.environ["NAMESPACE"],
                task_queue=os.environ["QUEUE"],
                data_dir=tmp / "data",
                blob_dir=tmp / "blobs",
                workspace=tmp / "ws",
            )
            client = await SubagentClient.connect(settings=settings)
            async with durable_subagents.worker.create_worker(client.temporal, settings):
                task = await client.spawn_task(
                    "explore", "answer", model='scripted:[{"text": "done"}]'
                )
                info = await client.check_task(task, wait=True, timeout=60)
                assert info.status == TaskStatus.COMPLETED, info
            stage("scripted")

            async with FakeOpenAIServer() as server:
                os.environ["OPENAI_BASE_URL"] = server.base_url
                provider, _, name = resolve_provider("openai:gpt-test")
                request = ModelRequest(
                    model=name, messages=[Message(role="user", content="hi")]
                )
                server.add_reply(text="hello")
                assert (await provider.complete(request)).text == "hello"
                server.add_error(500)
                try:
                    await provider.complete(request)
                except ApplicationError as err:
                    assert err.type == "ModelUnavailable", err
                else:
                    raise AssertionError("HTTP 500 was an answer")
                server.add_error(400)
                try:
                    await provider.complete(request)
                except ApplicationError as err:
                    assert err.type == "ModelRequestError", err
                else:
                    raise AssertionError("HTTP 400 was an answer")
                await provider.aclose()
            stage("openai")

        asyncio.run(main())
        """,
        ADDRESS=dev_server.address,
        NAMESPACE=dev_server.namespace,
        QUEUE=f"cold-{uuid.uuid4().hex[:8]}",
        TMP=str(tmp_path),
        OPENAI_API_KEY="test",
    )
    assert set(stages) == {"imported", "scripted", "openai"}
    assert among(stages["imported"], PROVIDER_SDKS) == []
    assert among(stages["scripted"], PROVIDER_SDKS) == []
    assert among(stages["openai"], PROVIDER_SDKS) == ["openai"]
