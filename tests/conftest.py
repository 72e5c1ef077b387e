"""Shared fixtures: one real Temporal dev server per session, a fresh queue per test."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings
from temporalio.client import Client

from durable_subagents import SubagentClient, connect_client
from durable_subagents.config import Settings
from durable_subagents.testing import DevServer, free_port
from durable_subagents.worker import create_worker

from .helpers.cli import _env
from .helpers.missing import pytest_runtest_makereport  # noqa: F401 (the hook: CI runs every test)
from .helpers.tasks import TEST_MODELS, give_to_tool_user

# Hypothesis fails an example that takes over 200 ms by default: a guess at the
# machine's pace, which a loaded machine breaks (a 5 ms Markdown check took 290 ms).
hypothesis_settings.register_profile("suite", deadline=None)
hypothesis_settings.load_profile("suite")

# The suite's workers run scripts and the fake providers' models; this process's
# children inherit it, and a test of the defaults removes them.
os.environ.update(TEST_MODELS)

# A suite run in the background (``cmd &`` in a script) inherits an ignored SIGINT, and
# so would every process it starts: the tests that stop a command with Ctrl-C need it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


SHARED_SETUP = frozenset(
    {
        "tests/e2e/test_crash_matrix.py",  # every crash case at once, ~40 s
        "tests/e2e/test_codec_server.py",
        "tests/e2e/test_web_ui_browser.py",
        "tests/integration/test_s3.py",
        "tests/integration/test_time_skipping.py",
    }
)
"""Modules whose module fixture is costly: one xdist process runs each whole, so it is
set up once, not in every process that draws one of its tests."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist load``, but each of ``SHARED_SETUP`` goes to one process whole.

    xdist's own ``loadgroup`` does this by the ``xdist_group`` mark, through node ids
    its workers rewrite, which pytest 9.2 no longer takes (pytest-xdist issue 1386):
    here the scheduler groups by module path, which it sees itself.
    """
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in SHARED_SETUP else nodeid

    return Scheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    """As root, keep temporary files where the tool user can reach its workspaces.

    pytest keeps ``/tmp/pytest-of-root`` private (mode 0700) and resets it whenever a
    session starts, which would lock a root worker's tool user out of every workspace
    of a session running beside it. So root's sessions get a directory of their own
    (xdist's workers take theirs inside it).
    """
    if os.geteuid() != 0 or config.option.basetemp or hasattr(config, "workerinput"):
        return
    base = tempfile.mkdtemp(prefix="subagents-tests-")
    os.chmod(base, 0o711)
    config.option.basetemp = os.path.join(base, "t")
    config.add_cleanup(lambda: shutil.rmtree(base, ignore_errors=True))


@pytest.fixture(scope="session")
async def dev_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DevServer]:
    db = tmp_path_factory.mktemp("temporal") / "temporal.db"
    # A low continue-as-new threshold makes long tests exercise continue-as-new.
    server = DevServer(
        port=free_port(),
        ui_port=free_port(),
        db=db,
        dynamic_config={"limit.historyCount.suggestContinueAsNew": "600"},
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture(scope="session")
async def temporal_client(dev_server: DevServer) -> Client:
    return await connect_client(dev_server.address, dev_server.namespace)


@pytest.fixture
def settings(tmp_path: Path, dev_server: DevServer) -> Settings:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    give_to_tool_user(workspace)
    return Settings(
        address=dev_server.address,
        namespace=dev_server.namespace,
        task_queue=f"test-{uuid.uuid4().hex[:10]}",
        data_dir=tmp_path / "data",
        blob_dir=tmp_path / "blobs",
        workspace=workspace,
        # A test that ends with a call running waits no longer than it used to.
        drain_timeout=5.0,
        # A worker run in the test process leaves the process's collector alone
        # (test_operations checks what the default does).
        gc_threshold=0,
    )


@pytest.fixture
def workspace(settings: Settings) -> Path:
    assert settings.workspace is not None
    return settings.workspace


@pytest.fixture
def client(temporal_client: Client, settings: Settings) -> SubagentClient:
    return SubagentClient(
        temporal_client,
        task_queue=settings.task_queue,
        blob_store=settings.blob_store(),
    )


@pytest.fixture
async def worker(temporal_client: Client, settings: Settings) -> AsyncIterator[None]:
    async with create_worker(temporal_client, settings):
        yield


@pytest.fixture
def env(tmp_path: Path, settings: Settings) -> dict[str, str]:
    """The CLI's environment for the session server and this test's task queue.

    The blob dir is the in-process worker's, as one deployment's clients and workers share it.
    """
    return _env(
        tmp_path,
        TEMPORAL_ADDRESS=settings.address,
        SUBAGENTS_TASK_QUEUE=settings.task_queue,
        SUBAGENTS_BLOB_DIR=str(settings.resolved_blob_dir),
    )
