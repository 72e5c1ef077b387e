"""MCP servers for the worker's side of MCP: real ones, a scripted one, a bearer-token one.

A root worker runs stdio servers as the tool user, who may not reach this
interpreter (pyenv keeps it under ``/root``): they then run on the system's Python of
the same version, with this environment's packages on ``PYTHONPATH``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from durable_subagents.testing import free_port
from durable_subagents.tools._sandbox_host import tool_user, unreachable
from durable_subagents.tools.mcp import McpServer

from . import CEILING, eventually
from .tasks import TOOL_USER

TESTS = Path(__file__).resolve().parent.parent
SCRIPT_SERVER = TESTS / "mcp_script_server.py"
HTTP_SERVER = TESTS / "mcp_http_server.py"
SITE_PACKAGES = sysconfig.get_paths()["purelib"]


def tool_python() -> str:
    """A Python of this version the tool user can run (this one when it can)."""
    mine = os.path.realpath(sys.executable)
    if os.geteuid() != 0 or unreachable(Path(mine), TOOL_USER) is None:
        return mine
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (f"/usr/bin/{version}", shutil.which(version)):
        if candidate and unreachable(Path(candidate), TOOL_USER) is None:
            return candidate
    raise RuntimeError(f"no {version} the tool user can run")


def python_server(
    name: str, *args: str, env: dict[str, str] | None = None, timeout: float = 60.0
) -> McpServer:
    """A stdio server run by ``tool_python()`` with this environment's packages."""
    return McpServer(
        name=name,
        command=tool_python(),
        args=args,
        env={"PYTHONPATH": SITE_PACKAGES, **(env or {})},
        timeout=timeout,
    )


def script_server(
    name: str, mode: str = "good", markers: Path | None = None, timeout: float = 60.0
) -> McpServer:
    """``tests/mcp_script_server.py`` in ``mode`` (see there)."""
    extra = [str(markers)] if markers is not None else []
    return python_server(name, str(SCRIPT_SERVER), mode, *extra, timeout=timeout)


def write_config(path: Path, servers: dict[str, McpServer | dict[str, object]]) -> Path:
    """A ``.mcp.json`` at ``path`` declaring ``servers`` (as written by hand: a dict)."""
    declared = {
        name: s if isinstance(s, dict) else s.model_dump(exclude={"name", "source"}, mode="json")
        for name, s in servers.items()
    }
    path.write_text(json.dumps({"mcpServers": declared}))
    return path


def run_as(workspace_fd: int) -> tuple[int, int] | None:
    """Who a stdio server runs as, chosen as a worker chooses (its tool user when root)."""
    return tool_user(workspace_fd)


@contextmanager
def held(path: Path) -> Iterator[int]:
    """A descriptor of the directory ``path``, as a worker holds a task's workspace."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def reset_peak_rss() -> int:
    """Start measuring this process's peak RSS afresh; its RSS now, in KiB."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status("VmRSS")


def peak_rss() -> int:
    """This process's peak RSS since ``reset_peak_rss()``, in KiB."""
    return _status("VmHWM")


def _status(field: str) -> int:
    found = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    assert found is not None
    return int(found.group(1))


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def uid_of(pid: int) -> int:
    """The real uid of process ``pid``."""
    found = re.search(r"^Uid:\s+(\d+)", Path(f"/proc/{pid}/status").read_text(), re.M)
    assert found is not None
    return int(found.group(1))


def git(repo: Path, *args: str) -> str:
    """``git`` in ``repo`` as this process's user (the repository may be the tool user's)."""
    return subprocess.run(
        ["git", "-c", "safe.directory=*", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
        timeout=CEILING,
    ).stdout


def processes_with(text: str) -> list[int]:
    """Running processes whose command line holds ``text`` (a test's own directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


class HttpServer:
    """The SDK-built HTTP server in a process of its own, behind a token.

    ``transport``: ``http`` (streamable HTTP, at ``/mcp``) or ``sse`` (at ``/sse``).
    """

    def __init__(self, log: Path, transport: str = "http") -> None:
        self.token = uuid.uuid4().hex
        self.port = free_port()
        self.transport = transport
        path = "/sse" if transport == "sse" else "/mcp"
        self.url = f"http://127.0.0.1:{self.port}{path}"
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        env = {**os.environ, "MCP_TEST_TOKEN": self.token}
        command = [sys.executable, str(HTTP_SERVER), str(self.port), self.transport]
        with self.log.open("a") as err:
            self.process = subprocess.Popen(command, env=env, stderr=err)
        await eventually(self.listens, "the HTTP server to listen")

    async def listens(self) -> bool:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            return False
        writer.close()
        return True

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
