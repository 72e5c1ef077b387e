"""The embedded dev server's parts that start no server: durations, ports, its records."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import pytest

from durable_subagents.cli._dev_run import (
    DEV_RECORD,
    parse_duration,
    read_dev_record,
    write_dev_record,
)
from durable_subagents.devserver._dev_server import server_answers
from durable_subagents.errors import InvalidRequest
from durable_subagents.testing import DevServer, free_port, temporal_binary


def _server(tmp_path: Path, **kwargs: object) -> DevServer:
    return DevServer(port=free_port(), ui_port=free_port(), db=tmp_path / "t.db", **kwargs)  # type: ignore[arg-type]


def test_temporal_binary_is_found() -> None:
    path = temporal_binary()
    assert path.name == "temporal"
    assert os.access(path, os.X_OK)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("30m", timedelta(minutes=30)),
        ("24h", timedelta(hours=24)),
        ("7d", timedelta(days=7)),
        ("2w", timedelta(weeks=2)),
        (" 1.5h ", timedelta(minutes=90)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "7", "d", "7 days", "-1h", "0s", "1y", "1h30m"])
def test_parse_duration_rejects_bad_input(text: str) -> None:
    with pytest.raises(InvalidRequest, match="invalid duration"):
        parse_duration(text)


async def test_server_answers_false_when_nothing_listens() -> None:
    assert not await server_answers(f"127.0.0.1:{free_port()}", timeout=0.5)


def test_free_ports_come_from_below_the_ephemeral_range() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(port < low for port in ports)
    assert len(ports) > 15


def test_a_panic_is_shown_by_its_message_not_the_goroutine_dump_after_it(
    tmp_path: Path,
) -> None:
    """The server's Web UI panics when its port is taken after the check before start;
    the error shows the panic's message, not the last lines of the dump that follows."""
    server = _server(tmp_path)
    frames = [f"github.com/temporalio/cli/internal/x.f{i}()\n\t/src/x.go:{i}" for i in range(40)]
    server.log_path.write_text(
        "time=... level=INFO msg=starting\n"
        "panic: listen tcp 127.0.0.1:8233: bind: address already in use\n\n"
        "goroutine 1 [running]:\n" + "\n".join(frames) + "\n"
    )
    tail = server._log_tail()
    assert tail.startswith("panic: listen tcp 127.0.0.1:8233: bind: address already in use")
    assert len(tail.splitlines()) <= 8


def test_a_dev_record_of_a_dead_process_or_another_port_is_ignored(tmp_path: Path) -> None:
    record = tmp_path / DEV_RECORD
    write_dev_record(record, port=7233, ui_port=8233, db=tmp_path / "t.db")
    assert read_dev_record(record, 7233) == {
        "port": 7233,
        "ui_port": 8233,
        "db": str(tmp_path / "t.db"),
    }
    assert read_dev_record(record, 7234) is None
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "pid": 2**22 + 12345}))  # no such process
    assert read_dev_record(record, 7233) is None
    record.write_text("not json")
    assert read_dev_record(record, 7233) is None
