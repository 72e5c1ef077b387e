"""Each task and each task tree gets its share of the machine, whatever its model asks for.

The red team's findings, replayed by scripted attackers through a real worker and
sandbox, once with the worker's cgroups (a root worker here) and once as a worker
that may not make any (the fallback: forced here, and what the unprivileged run of
this file in ``test_host_root.py`` gets anyway): a call that fills ``/tmp`` held 3 GB
against a 2 GiB limit; one task's sleepers made another task's running build fail to
fork; a tree's 40 busy loops made a bystander's 0.3 s task take 52 s.

A command's writes stay in its call's overlay until the call ends, so the commands here
tell the test what they did through files it reads in their calls' upper layers
(``written``), and the test tells them to go on through a directory they may read
(``SIGNALS``, one of the worker's tool read paths).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from durable_subagents import AgentSpec, Settings, SubagentClient, TaskStatus, ToolLimits
from durable_subagents.tools import _cgroups, _limits

from ..helpers import CEILING, eventually
from ..helpers.attacks import bash, run_attack, tool_outputs
from ..helpers.shares import needs_cgroups, tree_dirs, without_cgroups, written
from ..helpers.tasks import script

LIMIT_MB = 64


@pytest.fixture
def settings(settings: Settings, tmp_path: Path) -> Settings:
    """The session's settings, with the signals directory the commands read."""
    signals = tmp_path / "signals"
    signals.mkdir()
    signals.chmod(0o755)
    return settings.model_copy(
        update={"tool_read_paths": str(signals), "overlay_dir": tmp_path / "overlays"}
    )


@pytest.fixture
def signals(settings: Settings) -> Path:
    """Where the test leaves what the commands wait for (read-only to them)."""
    return Path(settings.tool_read_paths)


@pytest.fixture(params=["cgroups", "fallback"])
def held_by(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How the calls are held: the worker's cgroups, or what stands in without them."""
    if request.param == "cgroups":
        needs_cgroups("memory", "pids", "cpu")
    else:
        without_cgroups(monkeypatch)
    return str(request.param)


def agent(client: SubagentClient, name: str, **limits: Any) -> str:
    client.agents[name] = AgentSpec(
        name=name, tools=["bash"], permission_mode="dont_ask", limits=ToolLimits(**limits)
    )
    return name


async def test_a_call_cannot_hold_more_memory_than_its_limit_in_tmp(
    held_by: str, client: SubagentClient, worker: None
) -> None:
    name = agent(client, "filler", memory_mb=LIMIT_MB)
    size = 4 * LIMIT_MB << 20
    _, outputs = await run_attack(
        client,
        bash(
            f"head -c {size} /dev/zero > /tmp/big; echo tmp $?; "
            f"head -c {size} /dev/zero > /dev/shm/big; echo shm $?; "
            "cat /tmp/big /dev/shm/big | wc -c"
        ),
        agent=name,
    )
    output = outputs[0]
    if held_by == "cgroups":
        # The call's memory cgroup counts the tmpfs's pages: the kernel stops the command
        # (its out-of-memory killer; the sandbox's first process dies of SIGKILL).
        lines = output.strip().splitlines()
        held = int(lines[-1]) if lines and lines[-1].isdigit() else 0
        assert re.search(r"\[exit code (137|-9)\]", output) or "tmp 1" in output, output
        assert held <= LIMIT_MB << 20
    else:
        # The tmpfs mounts hold the call's memory limit between them, and no more.
        assert "tmp 1" in output and "shm 1" in output, output
        assert "No space left on device" in output
        assert int(output.strip().splitlines()[-1]) <= LIMIT_MB << 20


async def test_one_tasks_fork_flood_does_not_break_another_tasks_build(
    held_by: str, client: SubagentClient, worker: None, settings: Settings, signals: Path
) -> None:
    # The build starts first (its limits are set), then the flood fills the other task's
    # limit, then the build forks: processes of its user it never counted stop it.
    flood = agent(client, "flooder", processes=64)
    build = agent(client, "builder", processes=64)
    flooder = await client.spawn_task(
        flood,
        "x",
        model=script(
            bash(
                f"while [ ! -e {signals}/b-started ]; do sleep 0.05; done; "
                "for i in $(seq 52); do sleep 3600 & done 2>/dev/null; touch a-flooded; wait"
            )
        ),
    )
    try:
        builder = await client.spawn_task(
            build,
            "x",
            model=script(
                bash(
                    f"touch b-started; while [ ! -e {signals}/a-flooded ]; do sleep 0.05; done; "
                    "for i in $(seq 20); do sleep 1 & done; wait; echo built"
                ),
                {"text": "done"},
            ),
        )
        await eventually(lambda: written(settings, "b-started"), "the build to start")
        (signals / "b-started").touch()
        # The flood ran beside the build.
        await eventually(lambda: written(settings, "a-flooded"), "the flood to fill its limit")
        (signals / "a-flooded").touch()
        info = await client.check_task(builder, wait=True, timeout=CEILING)
        assert info.status == TaskStatus.COMPLETED, info
        [output] = await tool_outputs(client, builder)
        assert output == "built\n", output
    finally:
        await client.cancel_task(flooder, wait=True, timeout=CEILING)


COUNT = 250_000
"""Iterations of the bystander's shell loop: half a CPU second here, under the CPU second
a tree's commands get at full priority without cgroups."""


LOOPS = 20
"""Busy loops of the tree, each in a session of its own (``bench_shares.py`` runs the red
team's 40, as calls; fewer here keep the suite's other tests, on the same two cores,
slowed for less long)."""


def loop(iterations: int) -> str:
    return f"j=0; while [ $j -lt {iterations} ]; do j=$((j+1)); done"


async def test_a_trees_busy_loops_leave_a_bystanders_task_its_share(
    held_by: str,
    client: SubagentClient,
    worker: None,
    workspace: Path,
    settings: Settings,
    signals: Path,
) -> None:
    # The loops run a while (the worker then holds them as it would any long run), wait
    # for each other, and go on with three quarters of the bystander's work. Weighed
    # per session (before), they finish first; weighed per tree, the bystander's work
    # is done while every loop still runs. (The rest of its task waits on the worker
    # and Temporal, while idle loops may use the CPU left: the order of the work is
    # asserted, not the task's end.)
    hold = f"while [ ! -e {signals}/go ]; do sleep 0.05; done"
    at = "date +%s.%N > t-$0 && mv t-$0"  # when, written whole
    each = f"{loop(COUNT // 2)}; touch ahead-$0; {hold}; {loop(COUNT * 3 // 4)}; {at} done-$0"
    spinner = await client.spawn_task(
        agent(client, "spinner"),
        "x",
        # Each loop in a session of its own, as each call is: the kernel's autogroups
        # would otherwise weigh the call's loops as one.
        model=script(
            bash(f"for n in $(seq {LOOPS}); do setsid -w bash -c '{each}' $n & done; wait")
        ),
    )
    try:
        await eventually(
            lambda: len(written(settings, "ahead-*")) == LOOPS, "the loops to run a while"
        )
        (signals / "go").touch()
        bystander = await client.spawn_task(
            agent(client, "bystander"),
            "x",
            model=script(
                # The moment its work is done, it says when.
                bash(f"{loop(COUNT)}; date +%s.%N > before"),
                bash("echo two"), bash("echo three"),
                {"text": "done"},
            ),
        )  # fmt: skip
        info = await client.check_task(bystander, wait=True, timeout=CEILING)
        assert info.status == TaskStatus.COMPLETED, info
        finished = float((workspace / "before").read_text())
        # The loops' call still runs: what they wrote is in its upper layer.
        before = [p.name for p in written(settings, "done-*") if float(p.read_text()) < finished]
        assert not before, f"{before} of the {LOOPS} loops were done before the bystander's"
    finally:
        await client.cancel_task(spinner, wait=True, timeout=CEILING)


async def test_a_trees_tasks_share_one_cgroup_which_goes_with_their_last_call(
    client: SubagentClient,
    temporal_client: Client,
    worker: None,
    settings: Settings,
    signals: Path,
) -> None:
    hierarchies = needs_cgroups("memory")
    memory = next(h for h in hierarchies if "memory" in h.controllers)
    client.agents["lead"] = AgentSpec(
        name="lead",
        tools=["bash"],
        permission_mode="dont_ask",
        may_spawn=True,
        limits=ToolLimits(memory_mb=256),
    )

    def hold(who: str) -> str:
        return f"touch {who}-running; while [ ! -e {signals}/release ]; do sleep 0.05; done"

    child = script(bash(hold("child")), {"text": "child done"})
    arguments = {"agent": "general", "prompt": "x", "model": child}
    spawn = {"name": "spawn_subagent", "arguments": arguments}
    lead_hold = {"name": "bash", "arguments": {"command": hold("lead")}}
    lead = await client.spawn_task(
        "lead",
        "x",
        model=script(
            {"tool_calls": [spawn, lead_hold]},
            {"tool_calls": [{"name": "wait_subagents", "arguments": {}}]},
            {"text": "lead done"},
        ),
    )  # fmt: skip
    await eventually(
        lambda: written(settings, "lead-running") and written(settings, "child-running"),
        "both tasks' commands to run",
    )
    tree = memory.base / _cgroups._slug("tree", lead)
    assert tree in tree_dirs(memory)
    tasks = sorted(p for p in tree.iterdir() if p.is_dir())
    assert len(tasks) == 2 and _cgroups._slug("task", lead) in {p.name for p in tasks}
    call = 256 << 20
    assert int((tree / "memory.limit_in_bytes").read_text()) == _cgroups.TREE_CALLS * call
    for task in tasks:
        assert int((task / "memory.limit_in_bytes").read_text()) == _cgroups.TASK_CALLS * call
        [one] = [p for p in task.iterdir() if p.is_dir()]
        assert int((one / "memory.limit_in_bytes").read_text()) == call
    (signals / "release").touch()
    info = await client.check_task(lead, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info
    await eventually(lambda: tree not in tree_dirs(memory), "the tree's cgroup to go")
    # The child's tool call named its tree: the parent's id.
    child_id = json.loads(
        next(m.content for m in await client.get_transcript(lead) if m.role == "tool")
    )["task_id"]
    inputs = [
        e.activity_task_scheduled_event_attributes.input.payloads[0].data.decode()
        async for e in temporal_client.get_workflow_handle(child_id).fetch_history_events()
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "run_tool"
    ]
    assert [json.loads(i).get("tree_id") for i in inputs] == [lead]


def test_a_worker_without_cgroups_says_so_once_at_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Here, not in tests/unit: the line says what a probe (a process of its own) found.
    without_cgroups(monkeypatch)
    monkeypatch.setattr(_limits, "_logged", False)
    logger = logging.getLogger("test-shares")
    with caplog.at_level("INFO", logger="test-shares"):
        _limits.log_limit_mechanisms(logger)
        _limits.log_limit_mechanisms(logger)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert re.search(r"no cpu, memory, pids cgroup \(turned off by the test\)", warnings[0])
    assert "run the worker as root" in warnings[0] and "delegate a cgroup v2" in warnings[0]
    assert "RLIMIT_NPROC per call" in warnings[0]
