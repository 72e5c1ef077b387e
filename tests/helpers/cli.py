"""Running the ``subagents`` command as a user would, and reading its output."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from durable_subagents.testing import temporal_binary

from . import CEILING
from .tasks import TEST_MODELS

CLI = [sys.executable, "-m", "durable_subagents"]


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def flat_err(self) -> str:
        """Stderr with rich's line wrapping undone."""
        return " ".join(self.err.split())

    def json(self) -> Any:
        return json.loads(self.out)


def _env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SUBAGENTS_", "TEMPORAL_")) and k not in ("COLUMNS", "LINES")
    }
    env.update(
        CI="true",
        **TEST_MODELS,
        SUBAGENTS_DATA_DIR=str(tmp_path / "cli-data"),
        SUBAGENTS_BLOB_DIR=str(tmp_path / "cli-blobs"),
    )
    env.update(overrides)
    return env


def run(
    *args: str,
    env: dict[str, str],
    timeout: float = CEILING,
    stdin: str = "",
    cwd: Path | None = None,
) -> Result:
    """Run the command, blocking: only where no in-process worker must make progress."""
    proc = subprocess.run(
        [*CLI, *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


async def arun(
    *args: str, env: dict[str, str], timeout: float = CEILING, stdin: str = ""
) -> Result:
    """Run the command without blocking the event loop (the in-process worker runs on it)."""
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        *args,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), timeout)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        pytest.fail(f"`subagents {' '.join(args)}` ran over {timeout} s:\n{out!r}\n{err!r}")
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


def ok(result: Result) -> Result:
    assert result.code == 0, f"exit {result.code}\nstdout:\n{result.out}\nstderr:\n{result.err}"
    assert "Traceback" not in result.err
    return result


def failed(result: Result) -> Result:
    """A clean failure: exit 1, a message on stderr, no traceback, nothing on stdout."""
    assert result.code == 1, f"exit {result.code}\nstdout:\n{result.out}\nstderr:\n{result.err}"
    assert result.err.startswith("error: "), result.err
    assert "Traceback" not in result.err and "Traceback" not in result.out
    assert result.out == ""
    return result


async def temporal_cli(*args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        str(temporal_binary()),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


def decoded_strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, and the base64-decoded text of each that is base64."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from decoded_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from decoded_strings(v)
    elif isinstance(value, str):
        yield value
        if len(value) >= 8 and re.fullmatch(r"[A-Za-z0-9+/=_-]+", value):
            for decode in (base64.b64decode, base64.urlsafe_b64decode):
                try:
                    yield decode(value + "=" * (-len(value) % 4)).decode("utf-8", "replace")
                except ValueError:
                    pass
