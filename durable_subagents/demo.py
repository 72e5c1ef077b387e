"""``subagents demo``: three subagents over a sample project on the embedded server."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from importlib import resources
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from durable_subagents._connect import connect_client
from durable_subagents.client import SubagentClient
from durable_subagents.config import Settings
from durable_subagents.dev import DevServer, ensure_search_attributes, server_answers
from durable_subagents.errors import SubagentError
from durable_subagents.types import TaskInfo, TaskStatus
from durable_subagents.worker import create_worker

DEMO_TASKS = [
    ("explore", "Map the inventory project: its modules, classes and functions.", "map"),
    ("plan", "Plan how to make store.save crash-safe, with a test.", "plan"),
    ("research", "How does the inventory tool report errors to its user?", "errors"),
]


async def run_demo(
    *, settings: Settings, port: int, ui_port: int, db: Path | None, console: Console
) -> None:
    """Spawn three subagents in parallel, show their progress, print their results.

    Uses the server on ``port`` if one answers, else starts the embedded dev server
    for the demo's duration. Offline (scripted model) unless ``settings.model`` names
    a real provider.

    Raises:
        SubagentError: a task did not complete.
    """
    address = f"127.0.0.1:{port}"
    server: DevServer | None = None
    if await server_answers(address, settings.namespace):
        console.print(f"Using the Temporal server already on {address}.")
    else:
        server = DevServer(port=port, ui_port=ui_port, db=db or settings.data_dir / "temporal.db")
        with console.status("Starting the embedded Temporal dev server..."):
            await server.start()
    try:
        temporal = await connect_client(address, settings.namespace)
        await ensure_search_attributes(temporal, settings.namespace)
        workspace = _fresh_workspace(settings.data_dir / "demo-workspace")
        worker_settings = settings.model_copy(
            update={
                "address": address,
                "workspace": workspace,
                "task_queue": f"subagents-demo-{uuid.uuid4().hex[:6]}",
            }
        )
        offline = not settings.model or settings.model.startswith("scripted")
        if offline:
            console.print(
                "[bold yellow]Model: the offline scripted model[/] (no LLM is called; set "
                "SUBAGENTS_MODEL=openai:gpt-4.1-mini and OPENAI_API_KEY, or "
                "anthropic:claude-haiku-4-5 and ANTHROPIC_API_KEY, for a real one)."
            )
        else:
            console.print(f"[bold]Model:[/] {settings.model}")
        console.print(f"Workspace: {workspace}\n")
        async with create_worker(temporal, worker_settings):
            client = SubagentClient(
                temporal,
                task_queue=worker_settings.task_queue,
                blob_store=worker_settings.blob_store(),
                default_model=settings.model,
            )
            ids = [
                await client.spawn_task(
                    agent,
                    prompt,
                    description=f"demo: {label}",
                    model=f"scripted:demo-{agent}" if offline else None,
                )
                for agent, prompt, label in DEMO_TASKS
            ]
            infos = await _follow(client, ids, console)
        _report(infos, console, ui_base=_ui_base(server, ui_port, settings.namespace))
        if server is not None:
            console.print(
                "\nThe tasks are kept in the SQLite file. Run [bold]subagents dev[/] to "
                "browse them in the Web UI at the links above."
            )
        failed = [i for i in infos if i.status != TaskStatus.COMPLETED]
        if failed:
            raise SubagentError(f"{len(failed)} demo task(s) did not complete")
    finally:
        if server is not None:
            await server.stop()


async def _follow(client: SubagentClient, ids: list[str], console: Console) -> list[TaskInfo]:
    """Show a live table fed by each task's event stream; return the final states."""
    rows: dict[str, dict[str, str]] = {
        i: {"status": "pending", "turn": "0", "doing": ""} for i in ids
    }

    def table() -> Table:
        t = Table("task", "status", "turn", "doing")
        for task_id, row in rows.items():
            t.add_row(task_id, row["status"], row["turn"], row["doing"])
        return t

    async def follow(task_id: str, live: Live) -> None:
        async for event in client.watch(task_id):
            row = rows[task_id]
            if event.status is not None:
                row["status"] = event.status.value
            if event.turn is not None:
                row["turn"] = str(event.turn)
            if event.kind in ("turn", "tool_started") and event.summary:
                row["doing"] = event.summary
            if event.kind == "closed":
                row["doing"] = ""
            live.update(table())

    with Live(table(), console=console, refresh_per_second=8) as live:
        await asyncio.wait_for(asyncio.gather(*(follow(i, live) for i in ids)), timeout=900)
    if not console.is_terminal:
        console.line()  # Live ends its last frame with a newline only on a terminal
    return await client.wait_tasks(ids, timeout=60)


def _report(infos: list[TaskInfo], console: Console, ui_base: str) -> None:
    for info in infos:
        title = f"{info.agent} · {info.status.value} · {info.turns} turns"
        body = info.result or info.error or ""
        console.print(Panel(body, title=title, subtitle=info.id, expand=False))
        console.print(f"  Web UI: {ui_base}/{info.id}", soft_wrap=True)


def _ui_base(server: DevServer | None, ui_port: int, namespace: str) -> str:
    base = server.ui_url if server is not None else f"http://127.0.0.1:{ui_port}"
    return f"{base}/namespaces/{namespace}/workflows"


def _fresh_workspace(target: Path) -> Path:
    """Copy the bundled sample project to ``target`` (replacing an older copy)."""
    source = resources.files("durable_subagents") / "demo_workspace"
    if target.exists():
        shutil.rmtree(target)
    with resources.as_file(source) as src:
        shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target.resolve()
