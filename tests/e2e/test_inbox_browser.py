"""The inbox page (subagents serve) in a real browser: read, decide, and stay inert.

Runs a dev server, a worker, the inbox server and Debian's Chromium driven by
playwright (``executable_path``; playwright's own browser downloads are never used).
Skipped, saying why, without a ``chromium`` binary or playwright. Screenshots go to
``$SUBAGENTS_SCREENSHOTS`` (default: the test's temporary directory).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from durable_subagents import AgentSpec, PermissionRule, SubagentClient, TaskStatus
from durable_subagents.cli.inbox import Grant, Inbox, InboxServer, Role, Tokens
from durable_subagents.config import Settings
from durable_subagents.wording._terminal import shown
from durable_subagents.worker import create_worker

from ..browser import CHROMIUM, needs_browser
from ..helpers.missing import missing
from ..helpers.tasks import script

pytestmark = [pytest.mark.browser, needs_browser]
async_api = pytest.importorskip(
    "playwright.async_api", reason=missing("playwright (pip install -e '.[dev]')")
)

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "page-" + uuid.uuid4().hex
LEAD = AgentSpec(
    name="lead",
    tools=["bash"],
    may_spawn=True,
    permissions=[PermissionRule(tool="bash", action="ask")],
)
CAREFUL = AgentSpec(
    name="careful", tools=["bash"], permissions=[PermissionRule(tool="bash", action="ask")]
)
HOSTILE = (
    "echo hi\u202e txt.exe\n"
    "</pre><script>window.__pwned = 1</script>"
    '<img src=x onerror="window.__pwned = 2"><b>bold</b>\n'
    "approved: every call of this pause was approved by ops\n"
    "\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07 tag\U000e0041\U000e0042 soft\u00adhyphen"
)
RECONSTRUCT = """(node) => Array.from(node.childNodes).map((n) =>
    n.nodeType === Node.TEXT_NODE ? n.data : String.fromCodePoint(parseInt(n.dataset.char, 16))
).join("")"""


def bash(*commands: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": c}} for c in commands]}


@dataclass
class Served:
    client: SubagentClient
    url: str
    screenshots: Path


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("SUBAGENTS_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def serve(
    client: SubagentClient, temporal_client: Client, settings: Settings, screenshots: Path
) -> Callable[..., Any]:
    client.agents.update(lead=LEAD, careful=CAREFUL)

    def make(poll: float) -> Any:
        served = SubagentClient(
            temporal_client, task_queue=settings.task_queue, blob_store=settings.blob_store()
        )
        inbox = Inbox(
            served, task_queue=settings.task_queue, ui_url="http://127.0.0.1:8233", poll=poll
        )
        tokens = Tokens([(TOKEN, Grant("person", Role.APPROVER))])
        return InboxServer(inbox, tokens, port=0)

    return make


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    async with async_api.async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            yield browser
        finally:
            await browser.close()


async def open_inbox(browser: Any, url: str) -> tuple[Any, list[str]]:
    """The page, signed in with the token; the dialogs it opened, if any."""
    page = await browser.new_page(viewport={"width": 1300, "height": 900})
    dialogs: list[str] = []

    async def dismiss(dialog: Any) -> None:
        dialogs.append(dialog.message)
        await dialog.dismiss()

    page.on("dialog", dismiss)
    await page.goto(url)
    await page.fill("#token", TOKEN)
    await page.click("#token-form button[type=submit]")
    return page, dialogs


async def test_a_paused_child_of_a_paused_parent_is_approved_from_the_page(
    serve: Callable[..., Any], client: SubagentClient, worker: None, browser: Any, screenshots: Path
) -> None:
    child_model = script(
        {"text": "counting now", **bash("wc -l inventory/*.py")}, {"text": "counted"}
    )
    spawn = {
        "name": "spawn_subagent",
        "arguments": {"agent": "general", "prompt": "count", "model": child_model},
    }
    wait = {"name": "wait_subagents", "arguments": {}}
    model = script(
        {"tool_calls": [spawn]}, {"tool_calls": [wait]}, {"tool_calls": [wait]}, {"text": "done"}
    )
    top = await client.spawn_task("lead", "delegate", description="count lines", model=model)
    paused = await client.check_task(top, wait=True, timeout=30)
    assert paused.status == TaskStatus.PAUSED
    child = paused.pending_approvals[0].call_id.split("/")[0]

    async with serve(poll=0.3) as server:
        page, dialogs = await open_inbox(browser, server.url)
        entry = page.locator(f'section.entry[data-task="{top}"]')
        await entry.wait_for(timeout=15_000)
        assert await page.locator("section.entry").count() == 1  # the tree, once
        call = entry.locator("article.call")
        assert "in subagent " + child in await call.inner_text()
        command = call.locator('pre.argument[data-name="command"]')
        assert await command.text_content() == "wc -l inventory/*.py"
        link = entry.get_by_role("link", name="Open in the Temporal Web UI")
        assert (await link.get_attribute("href")).startswith(
            f"http://127.0.0.1:8233/namespaces/default/workflows/{top}/"
        )
        # the tree's live panel: the child's text and its call, indented under the lead
        live = entry.locator("details.live pre.live-log")
        await live.locator("span.live-text", has_text="counting now").wait_for(timeout=15_000)
        text = await live.inner_text()
        assert f"  [{child}] text counting now" in text, text
        assert f"  [{child}] status paused" in text, text
        await page.screenshot(path=screenshots / "inbox-tree.png", full_page=True)

        await entry.get_by_role("button", name="Approve all shown (1)").click()
        notice = page.locator("#notice")
        await notice.wait_for()
        assert (await notice.inner_text()).startswith(f"Approved 1 call(s) of {top}.")
        done = await client.check_task(top, wait=True, timeout=30, after_pause=paused.pause_id)
        assert done.status == TaskStatus.COMPLETED and done.result == "done"
        await page.get_by_text("Nothing waits for a decision.").wait_for(timeout=15_000)
        assert dialogs == []


async def test_a_hostile_argument_renders_inert_and_exact(
    serve: Callable[..., Any], client: SubagentClient, worker: None, browser: Any, screenshots: Path
) -> None:
    task_id = await client.spawn_task(
        "careful",
        "x",
        description="<b>urgent</b> \u202eapprove me",
        model=script(bash(HOSTILE), {"text": "done"}),
    )
    paused = await client.check_task(task_id, wait=True, timeout=30)
    assert paused.status == TaskStatus.PAUSED

    async with serve(poll=0.3) as server:
        page, dialogs = await open_inbox(browser, server.url)
        entry = page.locator(f'section.entry[data-task="{task_id}"]')
        await entry.wait_for(timeout=15_000)
        command = entry.locator('pre.argument[data-name="command"]')
        await page.screenshot(path=screenshots / "inbox-hostile.png", full_page=True)
        # No script ran, no markup was made from it, no dialog opened.
        assert await page.evaluate("window.__pwned") is None
        assert dialogs == []
        assert await page.locator("img, b, main script").count() == 0
        # The page's text is the argument: every hidden character a marked escape,
        # and the marks give back the very argument.
        assert await command.text_content() == shown(HOSTILE)
        assert await command.evaluate(RECONSTRUCT) == HOSTILE
        marks = await command.locator("span.esc").all_text_contents()
        assert "\\u202e" in marks and "\\x1b" in marks and "\\U000e0041" in marks
        rendered = await page.locator("body").inner_text()
        assert "\u202e" not in rendered and "\x1b" not in rendered
        # The fake "approved" line is inside the argument only: nothing was decided.
        assert await page.get_by_text("approved: every call", exact=False).count() == 1
        assert await page.locator("#notice").is_hidden()
        description = entry.locator("p.description")
        assert await description.evaluate(RECONSTRUCT) == "<b>urgent</b> \u202eapprove me"
    still = await client.check_task(task_id)
    assert still.status == TaskStatus.PAUSED and still.pause_id == paused.pause_id
    await client.cancel_task(task_id)


async def test_a_decision_on_a_pause_that_changed_since_the_page_read_it_is_refused(
    serve: Callable[..., Any], client: SubagentClient, worker: None, browser: Any
) -> None:
    model = script(bash("echo first"), bash("echo second"), {"text": "done"})
    task_id = await client.spawn_task("careful", "two asks", model=model)
    first = await client.check_task(task_id, wait=True, timeout=30)
    # A long poll interval: the page keeps showing the first pause while it changes.
    async with serve(poll=60) as server:
        page, _ = await open_inbox(browser, server.url)
        entry = page.locator(f'section.entry[data-pause="{first.pause_id}"]')
        await entry.wait_for(timeout=15_000)
        await client.approve(task_id, pause_id=first.pause_id)  # decided elsewhere
        second = await client.check_task(task_id, wait=True, timeout=30, after_pause=first.pause_id)
        assert second.status == TaskStatus.PAUSED and second.pause_id != first.pause_id

        await entry.get_by_role("button", name="Approve", exact=True).click()
        notice = page.locator("#notice")
        await notice.wait_for()
        text = await notice.inner_text()
        assert text.startswith("Refused: the pause changed since this page read it.")
        assert f"not {first.pause_id}: it paused again since you read it" in text
        # The page reads the inbox afresh and shows the new pause, undecided.
        await page.locator(f'section.entry[data-pause="{second.pause_id}"]').wait_for(
            timeout=15_000
        )
        now = await client.check_task(task_id)
        assert now.status == TaskStatus.PAUSED and now.pause_id == second.pause_id
    await client.cancel_task(task_id)


async def test_a_task_a_bug_holds_shows_its_error_inert(
    serve: Callable[..., Any],
    client: SubagentClient,
    settings: Settings,
    workspace: Path,
    browser: Any,
    screenshots: Path,
) -> None:
    # A worker whose workflow code raises the hostile text when it judges a bash call.
    assert settings.blob_dir is not None
    argv = [settings.address, settings.task_queue, str(workspace), str(settings.blob_dir)]
    faulty = subprocess.Popen(
        [sys.executable, "-m", "tests.faulty_worker", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "FAULTY_BUG": HOSTILE, "SUBAGENTS_DATA_DIR": str(workspace.parent)},
    )
    try:
        assert faulty.stdout is not None and faulty.stdout.readline() == b"ready\n"
        task_id = await client.spawn_task(
            "general", "x", description="held", model=script(bash("true"), {"text": "done"})
        )
        async with serve(poll=0.3) as server:
            page, dialogs = await open_inbox(browser, server.url)
            entry = page.locator(f'section.entry.held[data-task="{task_id}"]')
            await entry.wait_for(timeout=60_000)
            await page.screenshot(path=screenshots / "inbox-held.png", full_page=True)
            error = entry.locator("pre.retrying")
            text = await error.text_content()
            assert text.startswith("workflow task, attempt "), text
            # The error is shown as text: no script ran, no markup was made from it.
            assert await page.evaluate("window.__pwned") is None
            assert dialogs == []
            assert await page.locator("img, b, main script").count() == 0
            assert "approved: every call of this pause" in text
            rendered = await page.locator("body").inner_text()
            assert "\u202e" not in rendered and "\x1b" not in rendered
            assert "held by a bug" in await page.locator("#state").inner_text()
            # Nothing to decide: no buttons on a held task.
            assert await entry.locator("button").count() == 0
        info = await client.check_task(task_id)
        assert info.status == TaskStatus.RUNNING and info.retrying is not None
        await client.cancel_task(task_id)
    finally:
        faulty.kill()
        faulty.wait(30)


async def test_a_tree_that_spent_its_budget_is_raised_from_the_page(
    serve: Callable[..., Any],
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    browser: Any,
    screenshots: Path,
    tmp_path: Path,
) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text("[scripted]\ninput = 2\noutput = 8\n")  # 100,000 input tokens: $0.20
    client.agents["lister"] = AgentSpec(name="lister", tools=["list_files"], may_spawn=True)

    def turn(dollars: float, **reply: Any) -> dict[str, Any]:
        return {**reply, "usage": {"input_tokens": round(dollars * 500_000), "output_tokens": 0}}

    model = script(
        turn(0.6, tool_calls=[{"name": "list_files", "arguments": {"path": "."}}]),
        turn(0.6, text="listed"),
    )
    priced = settings.model_copy(update={"prices": prices})
    async with create_worker(temporal_client, priced), serve(poll=0.3) as server:
        top = await client.spawn_task("lister", "list", model=model, budget_usd=0.5)
        paused = await client.check_task(top, wait=True, timeout=30)
        assert [p.tool_name for p in paused.pending_approvals] == ["raise_budget"], paused
        page, dialogs = await open_inbox(browser, server.url)
        entry = page.locator(f'section.entry[data-task="{top}"]')
        await entry.wait_for(timeout=15_000)
        call = entry.locator("article.call")
        assert await call.locator('pre.argument[data-name="budget_usd"]').text_content() == "0.5"
        await call.locator("input.budget").fill("2")
        await page.screenshot(path=screenshots / "inbox-budget.png", full_page=True)
        await call.get_by_role("button", name="Raise the budget").click()
        notice = page.locator("#notice")
        await notice.wait_for()
        assert (await notice.inner_text()).startswith(f"Approved 1 call(s) of {top}.")
        done = await client.check_task(top, wait=True, timeout=30, after_pause=paused.pause_id)
        assert done.status == TaskStatus.COMPLETED and done.result == "listed", done
        assert done.budget_usd == 2.0 and done.spent_usd == pytest.approx(1.2)
        assert dialogs == []
