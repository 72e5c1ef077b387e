"""The real Temporal Web UI in a real browser: a paused task is found and read there.

Runs the dev server with its Web UI, a worker and Debian's Chromium driven by
playwright (``executable_path``; playwright's own browser downloads are never used).
Skipped, saying why, when there is no ``chromium`` binary or no playwright.
Screenshots go to ``$SUBAGENTS_SCREENSHOTS`` (default: the test's temporary directory).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from durable_subagents import AgentSpec, PermissionRule, SubagentClient, TaskStatus, connect_client
from durable_subagents.config import Settings
from durable_subagents.testing import DevServer, free_port
from durable_subagents.wire._search_attributes import tasks_query, web_ui_tasks_url
from durable_subagents.worker import create_worker

from ..browser import CHROMIUM
from ..helpers import CEILING
from ..helpers.missing import missing
from ..helpers.tasks import script

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason=missing(
            "a chromium binary on PATH (Debian: apt-get install chromium); this test "
            "never downloads playwright's own browsers"
        ),
    ),
]
async_api = pytest.importorskip(
    "playwright.async_api", reason=missing("playwright (pip install -e '.[dev]')")
)

DESCRIPTION = "check __init__ in *.py"
COMMAND = "wc -l inventory/*.py tests/*.py"
ROW = '[data-testid="workflows-summary-configurable-table-row"]'


@pytest.fixture(scope="module")
async def ui_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DevServer]:
    db = tmp_path_factory.mktemp("web-ui") / "temporal.db"
    async with DevServer(port=free_port(), ui_port=free_port(), db=db, ui=True) as server:
        yield server


@pytest.fixture
async def lead(ui_server: DevServer, tmp_path: Path) -> AsyncIterator[SubagentClient]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    settings = Settings(
        address=ui_server.address,
        namespace=ui_server.namespace,
        task_queue=f"browser-{uuid.uuid4().hex[:8]}",
        data_dir=tmp_path / "data",
        blob_dir=tmp_path / "blobs",
        workspace=workspace,
    )
    temporal = await connect_client(ui_server.address, ui_server.namespace)
    client = SubagentClient(
        temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
    )
    client.agents["lead-ask"] = AgentSpec(
        name="lead-ask",
        tools=["bash", "read_file"],
        permissions=[PermissionRule(tool="bash", action="ask")],
        may_spawn=True,
    )
    async with create_worker(temporal, settings):
        yield client


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("SUBAGENTS_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _calls(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": list(calls)}


async def test_a_paused_task_is_found_by_status_and_summary_and_shows_its_call(
    lead: SubagentClient, ui_server: DevServer, screenshots: Path
) -> None:
    child_model = script(
        _calls({"name": "bash", "arguments": {"command": COMMAND}}), {"text": "counted"}
    )
    spawn = {
        "name": "spawn_subagent",
        "arguments": {
            "agent": "general",
            "prompt": "count the lines",
            "model": child_model,
            "description": DESCRIPTION,
        },
    }
    wait = {"name": "wait_subagents", "arguments": {}}
    model = script(_calls(spawn), _calls(wait), _calls(wait))
    task_id = await lead.spawn_task("lead-ask", "delegate", description="lead", model=model)
    paused = await lead.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED, paused
    child, child_pause, _ = paused.pending_approvals[0].call_id.split("/")

    list_url = web_ui_tasks_url(ui_server.ui_url, ui_server.namespace, tasks_query(status="paused"))
    async with async_api.async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            page = await browser.new_page(viewport={"width": 2000, "height": 900})
            # The list: both tasks are paused (the parent waits on its child's call).
            deadline = time.monotonic() + CEILING
            while True:
                await page.goto(list_url)
                await page.locator(ROW).first.wait_for(timeout=10_000)
                if await page.locator(ROW).count() == 2 or time.monotonic() > deadline:
                    break
            # As the README says: the Status column reads Running; add SubagentStatus.
            await page.get_by_test_id("workflows-summary-table-configuration-button").click()
            for column in ("SubagentStatus", "SubagentAgent"):
                await page.get_by_role("button", name=f"Add {column} column").click()
            await page.get_by_test_id("drawer-close-button").click()
            await page.get_by_text("Configure Workflows Table").wait_for(state="hidden")
            rows = [await r.inner_text() for r in await page.locator(ROW).all()]
            assert len(rows) == 2, rows
            assert all("paused" in r and "running" in r.lower() for r in rows), rows
            await page.screenshot(path=screenshots / "paused-tasks.png")
            ids = [
                await link.inner_text()
                for link in await page.locator(f"{ROW} a", has_text="subagent-").all()
            ]
            assert sorted(ids) == sorted([task_id, child]), ids

            # Find the task by its summary, as shown (literally) in User Metadata.
            found = None
            for workflow_id in ids:
                await page.get_by_role("link", name=workflow_id, exact=True).click()
                await page.get_by_role("tab", name="User Metadata").click()
                summary = page.frame_locator("#user-metadata-summary").locator("main")
                await summary.wait_for()
                if (await summary.inner_text()).strip() == DESCRIPTION:
                    found = workflow_id
                    break
                await page.goto(list_url)
                await page.locator(ROW).first.wait_for()
            assert found == child

            # Its current details (answered by the worker) show the call to approve.
            details = page.frame_locator("#user-metadata-current-details").locator("main")
            deadline = time.monotonic() + CEILING
            text = ""
            while "Waiting for approval" not in text and time.monotonic() < deadline:
                text = await details.inner_text()
                if "Waiting for approval" not in text:
                    await page.keyboard.press("r")  # the UI's refresh key
                    await page.wait_for_timeout(300)
            assert "Waiting for approval of 1 tool call" in text, text
            assert f"bash · {COMMAND}" in text
            assert f"subagents approve {child} --all --pause {child_pause}" in text
            assert "Turn 1 of" in text and "scripted" in text
            prompt = page.frame_locator("#user-metadata-details").locator("main")
            assert "count the lines" in await prompt.inner_text()
            await page.screenshot(path=screenshots / "paused-task-details.png", full_page=True)
        finally:
            await browser.close()
    await lead.cancel_task(task_id, wait=True, timeout=CEILING)


async def test_a_paused_tasks_first_view_says_it_waits_for_approval(
    lead: SubagentClient, ui_server: DevServer, screenshots: Path
) -> None:
    """`general --ask bash`, paused: the Timeline a task opens on says what it waits for,
    and User Metadata names the rule that made it pause, the workspace and the commands
    that decide this pause and no later one."""
    model = script(_calls({"name": "bash", "arguments": {"command": COMMAND}}), {"text": "done"})
    task_id = await lead.spawn_task(
        "general", "count the lines", model=model,
        permissions=[PermissionRule(tool="bash", action="ask")],
    )  # fmt: skip
    paused = await lead.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED, paused
    waiting = f"Waiting for approval (pause {paused.pause_id}): bash · {COMMAND}"
    url = f"{ui_server.ui_url}/namespaces/{ui_server.namespace}/workflows/{task_id}"
    async with async_api.async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            page = await browser.new_page(viewport={"width": 1600, "height": 1000})
            await page.goto(url)
            # the view a task opens on: its Timeline, where the pause is a running bar
            assert await page.get_by_role("tab", name="Timeline").get_attribute(
                "aria-selected"
            ) == "true"  # fmt: skip
            await page.get_by_text(waiting).wait_for(timeout=30_000)
            await page.screenshot(path=screenshots / "paused-timeline.png", full_page=True)

            await page.get_by_role("tab", name="User Metadata").click()
            details = page.frame_locator("#user-metadata-details").locator("main")
            await details.wait_for()
            # (the UI curls straight quotes in text outside code)
            text = " ".join((await details.inner_text()).replace("\u2019", "'").split())
            assert "Spawn rules bash: ask" in text, text
            assert "Workspace the worker's root (its --workspace)" in text, text
            current = page.frame_locator("#user-metadata-current-details").locator("main")
            deadline = time.monotonic() + CEILING
            now = ""
            while "Waiting for approval" not in now and time.monotonic() < deadline:
                now = " ".join((await current.inner_text()).split())
                if "Waiting for approval" not in now:
                    await page.keyboard.press("r")  # the UI's refresh key
                    await page.wait_for_timeout(300)
            assert f"subagents approve {task_id} --all --pause {paused.pause_id}" in now, now
            await page.screenshot(path=screenshots / "paused-metadata.png", full_page=True)
        finally:
            await browser.close()
    await lead.cancel_task(task_id, wait=True, timeout=CEILING)
