"""``subagents serve`` under a slowloris flood: the real client is still answered.

The inbox runs as a process with 1,024 file descriptors, the soft limit a service
gets by default on most Linux systems (systemd's). The attacker opens 1,100
connections from one address, each with half a request head and no token; the person
whose page polls the inbox from another address must still get answers, and every
one of the attacker's connections must be closed: the excess at once (429), the rest
at the head deadline, without an answer.
"""

from __future__ import annotations

import asyncio
import re
import resource
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from ..helpers import CEILING, eventually
from ..helpers.cli import CLI
from ..helpers.slowloris import half_open

TOKEN = "flood-" + uuid.uuid4().hex
DESCRIPTORS = 1024
ATTACK = 1100


def _service_limits() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(DESCRIPTORS, hard), hard))


@pytest.fixture
async def inbox(env: dict[str, str], tmp_path: Path) -> AsyncIterator[str]:
    """``subagents serve`` on a free port; its URL once it says it listens.

    Its output goes to a file: a pipe left unread would fill with its log and stall it.
    """
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *CLI,
            "serve",
            "--port",
            "0",
            env={**env, "SUBAGENTS_INBOX_TOKEN": TOKEN},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            preexec_fn=_service_limits,
        )

    def listening() -> str | None:
        said = log.read_text(errors="replace")
        assert proc.returncode is None, f"subagents serve exited: {said}"
        found = re.search(r"inbox on (http://\S+)", said)
        return found.group(1) if found else None

    try:
        yield await eventually(listening, "subagents serve to listen")
    finally:
        proc.kill()  # what it did is measured from outside: nothing to drain
        await proc.wait()


async def test_a_flood_of_unfinished_requests_from_one_address_leaves_the_inbox_answering(
    inbox: str,
) -> None:
    port = int(inbox.rsplit(":", 1)[1])
    flood = await half_open(port, ATTACK)
    try:
        assert len(flood) > DESCRIPTORS  # more than the server could ever hold open

        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with aiohttp.ClientSession() as session:
            # The person's page, while the attacker holds what it can.
            request = session.get(f"{inbox}/api/inbox", headers=headers)
            async with await asyncio.wait_for(request, CEILING) as response:
                assert response.status == 200
                assert (await response.json())["entries"] == []

        # Every connection of the attacker is closed by the server: beyond the
        # address's share at once with a 429, the share at the head deadline, unanswered.
        await asyncio.wait_for(asyncio.gather(*(c.closed for c in flood)), CEILING)
        refused = [c for c in flood if c.refused]
        assert refused and all(c.received == b"" for c in flood if not c.refused)
    finally:
        for connection in flood:
            connection.abort()
