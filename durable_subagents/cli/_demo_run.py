"""``subagents demo``: subagents over a sample project on the embedded server.

Four tasks run in parallel; one of them pauses for approval of a bash command, which
the demo reads in full and decides through the client. Then one finished task gets a
follow-up question (``send_input``) and answers it in a new run.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import tempfile
import uuid
from collections.abc import Collection
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from durable_subagents.cli._dev_run import DEV_RECORD, read_dev_record
from durable_subagents.cli._render import indented_json
from durable_subagents.client import SubagentClient
from durable_subagents.config import Settings
from durable_subagents.connection._connect import connect_client
from durable_subagents.devserver._dev_server import (
    DEFAULT_PORT,
    DEFAULT_UI_PORT,
    DevServer,
    ensure_search_attributes,
    server_answers,
)
from durable_subagents.errors import InvalidRequest, SubagentError
from durable_subagents.tools._sandbox_host import NOBODY
from durable_subagents.types import TaskInfo, TaskStatus
from durable_subagents.wording._terminal import shown
from durable_subagents.worker import create_worker

DEMO_TASKS: list[tuple[str, str, str, dict[str, Any]]] = [
    ("explore", "Map the inventory project: its modules, classes and functions.", "map", {}),
    ("plan", "Plan how to make store.save crash-safe, with a test.", "plan", {}),
    ("research", "How does the inventory tool report errors to its user?", "errors", {}),
    # general may run anything (dont_ask); narrowed to `default`, its bash calls pause
    (
        "general",
        "Count the lines of each Python file of the project with one bash command.",
        "line count",
        {"permission_mode": "default", "tools": ["bash", "read_file", "list_files", "grep"]},
    ),
]
"""(agent, prompt, label, spawn options) of the tasks the demo runs in parallel."""

FOLLOW_UP = ("explore", "Which of these functions have tests?")
"""The finished task that gets a follow-up question, and the question."""

_READ_ONLY_COMMANDS = {"wc", "ls", "cat", "head", "grep", "nl"}
"""Programs the demo approves in a bash call (anything else is rejected)."""
_MAX_PAUSES = 3


def check_model(model: str | None, origin: str, endpoints: Collection[str] = ()) -> None:
    """Refuse a model the demo's worker could not run, before anything starts.

    The worker runs in this process: an unknown model name, or a provider whose key is
    not in this environment, would fail every demo task after the server started.

    Args:
        model: The demo's model (None: the offline script).
        origin: Where it came from (``--model``, ``SUBAGENTS_MODEL``), for the message.
        endpoints: The names of the worker's endpoints, which bring their own keys.

    Raises:
        InvalidRequest: The name is malformed, or its provider's key is not set.
    """
    from durable_subagents.providers._base import PROVIDERS, missing_key, parse_model

    if not model or model.strip().startswith("scripted"):
        return  # offline: each task runs its own demo script
    provider, full, _ = parse_model(model, origin=origin, endpoints={*PROVIDERS, *endpoints})
    key = None if provider in endpoints else missing_key(provider)
    if key is not None:
        raise InvalidRequest(
            f"{full} (from {origin}) needs {key}, and {key} is not set: set it, or run the "
            "demo without a model for the offline one"
        )


async def run_demo(
    *, settings: Settings, port: int, ui_port: int, db: Path | None, console: Console
) -> None:
    """Run the demo tasks in parallel, decide the approval, ask a follow-up, print results.

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
    workspace: Path | None = None
    try:
        temporal = await connect_client(address, settings.namespace, keys=settings.payload_keys())
        await ensure_search_attributes(temporal, settings.namespace)
        workspace = _fresh_workspace(settings.data_dir / "demo-workspace")
        worker_settings = settings.model_copy(
            update={
                "address": address,
                "workspace": workspace,
                "task_queue": f"subagents-demo-{uuid.uuid4().hex[:6]}",
                "allow_scripted": True,
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
        ui_base = _ui_base(server, settings.namespace, settings.data_dir / DEV_RECORD, port)
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
                    **options,
                )
                for agent, prompt, label, options in DEMO_TASKS
            ]
            infos = await _follow(client, ids, console)
            infos = [await _decide(client, info, console) for info in infos]
            _report(infos, console, ui_base=ui_base)
            agent, question = FOLLOW_UP
            first = next(i for i in infos if i.agent == agent)
            if first.status == TaskStatus.COMPLETED:
                infos.append(await _follow_up(client, first, question, console))
        if server is not None:
            console.print(
                f"\nThe tasks are kept in {server.db}. To browse them in the Web UI at the "
                f"links above, run:\n  {_dev_command(port, ui_port, db)}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
        failed = [i for i in infos if i.status != TaskStatus.COMPLETED]
        if failed:
            raise SubagentError(f"{len(failed)} demo task(s) did not complete")
    finally:
        if server is not None:
            await server.stop()
        if workspace is not None and os.geteuid() == 0:
            shutil.rmtree(workspace.parent, ignore_errors=True)  # a temporary copy (see below)


async def _follow(client: SubagentClient, ids: list[str], console: Console) -> list[TaskInfo]:
    """Show a live table fed by each task's event stream until each task closed or paused."""
    rows: dict[str, dict[str, str]] = {
        i: {"status": "pending", "turn": "0", "doing": ""} for i in ids
    }

    def table() -> Table:
        t = Table("task", "status", "turn", "doing")
        for task_id, row in rows.items():
            t.add_row(Text(task_id), *(Text(shown(row[k])) for k in ("status", "turn", "doing")))
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
            paused = event.status == TaskStatus.PAUSED
            if paused:
                row["doing"] = "waiting for approval"
            live.update(table())
            if paused:
                return  # the demo decides once every task closed or paused

    with Live(table(), console=console, refresh_per_second=8) as live:
        await asyncio.wait_for(asyncio.gather(*(follow(i, live) for i in ids)), timeout=900)
    if not console.is_terminal:
        console.line()  # Live ends its last frame with a newline only on a terminal
    return await client.wait_tasks(ids, timeout=60)


async def _decide(client: SubagentClient, info: TaskInfo, console: Console) -> TaskInfo:
    """Decide a paused task's calls as a parent would, after reading them in full.

    Approves bash calls that only run read-only programs, rejects anything else, and
    waits for the task to finish (or to pause again, up to ``_MAX_PAUSES`` times).
    """
    for pauses in range(1, _MAX_PAUSES + 1):
        if info.status != TaskStatus.PAUSED or info.pause_id is None:
            return info
        console.print(
            f"\n[bold]{info.agent}[/] paused for approval: spawned with "
            'permission_mode="default", its calls that change something wait for the '
            f"parent's decision. Pending in {info.pause_id}:"
        )
        arguments = await client.pending_arguments(info)
        approve: list[str] = []
        reject: list[str] = []
        for p in info.pending_approvals:
            full = arguments.get(p.call_id)
            console.print(f"  {p.call_id}  {shown(p.tool_name)}", markup=False, highlight=False)
            if full is None:  # not readable here: the preview is all there is
                console.print(f"      {shown(p.arguments_preview)}", markup=False, soft_wrap=True)
            else:
                console.print(indented_json(full, 6), soft_wrap=True)
                if p.resolved_path is not None:
                    console.print(
                        f"      the path leads to: {shown(p.resolved_path)}",
                        markup=False,
                        soft_wrap=True,
                    )
            harmless = pauses < _MAX_PAUSES and _read_only_bash(p.tool_name, full)
            (approve if harmless else reject).append(p.call_id)
        if approve:
            await client.approve(info.id, approve)
            console.print(
                f"The demo approves {', '.join(approve)} (read-only programs): "
                f"client.approve(task_id, {approve})",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
        if reject:
            reason = (
                "the demo approves only bash commands of read-only programs "
                f"({', '.join(sorted(_READ_ONLY_COMMANDS))}), {_MAX_PAUSES - 1} times at most"
            )
            await client.reject(info.id, reject, reason=reason)
            console.print(
                f"The demo rejects {', '.join(reject)}: {reason}", markup=False, highlight=False
            )
        console.print()
        with console.status(f"Waiting for {info.agent} to go on..."):
            info = await client.check_task(
                info.id, wait=True, timeout=900, after_pause=info.pause_id
            )
    return info


def _read_only_bash(tool_name: str, arguments: dict[str, Any] | None) -> bool:
    """Whether a call is bash running only read-only programs (no redirects, no chains)."""
    command = (arguments or {}).get("command")
    if tool_name != "bash" or not isinstance(command, str):
        return False
    if any(c in command for c in ";&<>`$()\n\\"):
        return False
    programs = [part.split()[0] if part.split() else "" for part in command.split("|")]
    return all(p in _READ_ONLY_COMMANDS for p in programs)


async def _follow_up(
    client: SubagentClient, first: TaskInfo, question: str, console: Console
) -> TaskInfo:
    """Ask a completed task a follow-up question and show its answer."""
    console.print(
        f"\nFollow-up: {first.agent} completed; client.send_input continues its "
        "conversation in a new run under the same task id:",
        highlight=False,
    )
    console.print(f"  > {question}", markup=False, highlight=False)
    await client.send_input(first.id, question)
    with console.status(f"Waiting for {first.agent} to answer..."):
        info = await client.check_task(first.id, wait=True, timeout=900)
    title = f"{info.agent} · {info.status.value} · {info.turns} turns in all · follow-up run"
    body = info.result or info.error or ""
    console.print(Panel(Text(shown(body)), title=title, subtitle=info.id, expand=False))
    return info


def _report(infos: list[TaskInfo], console: Console, ui_base: str) -> None:
    for info in infos:
        title = f"{info.agent} · {info.status.value} · {info.turns} turns"
        body = info.result or info.error or ""
        console.print(Panel(Text(shown(body)), title=title, subtitle=info.id, expand=False))
        console.print(f"  Web UI: {ui_base}/{info.id}", soft_wrap=True)


def _dev_command(port: int, ui_port: int, db: Path | None) -> str:
    """The ``subagents dev`` that serves the demo's database and Web UI where it did."""
    parts = ["subagents", "dev"]
    if port != DEFAULT_PORT:
        parts += ["--port", str(port)]
    if ui_port != DEFAULT_UI_PORT:
        parts += ["--ui-port", str(ui_port)]
    if db is not None:
        parts += ["--db", shlex.quote(str(db))]
    return " ".join(parts)


def _ui_base(server: DevServer | None, namespace: str, record: Path, port: int) -> str:
    if server is not None:
        base = server.ui_url
    else:  # the running server's, if subagents dev started it; else its default
        running = read_dev_record(record, port)
        base = f"http://127.0.0.1:{running['ui_port'] if running else port + 1000}"
    return f"{base}/namespaces/{namespace}/workflows"


def _fresh_workspace(target: Path) -> Path:
    """Copy the bundled sample project to ``target`` (replacing an older copy).

    As root, the copy goes to a new directory under the system's temporary directory
    instead, owned by ``nobody``: a root worker runs commands as the workspace's owner,
    and that user must be able to reach it (root's own home is closed to others).
    """
    source = resources.files("durable_subagents.cli") / "demo_workspace"
    if os.geteuid() == 0:
        target = Path(tempfile.mkdtemp(prefix="subagents-demo-")) / "workspace"
        target.parent.chmod(0o755)
    elif target.exists():
        shutil.rmtree(target)
    with resources.as_file(source) as src:
        shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__"))
    if os.geteuid() == 0:
        for path in (target, *target.rglob("*")):
            os.chown(path, *NOBODY, follow_symlinks=False)
    return target.resolve()
