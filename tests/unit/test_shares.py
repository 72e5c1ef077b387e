"""The cgroup v2 path, on a fake cgroup file system: this machine's v2 hierarchy has no
controllers (they are all on v1), so the files a v2 worker writes are checked here.

The fake keeps the kernel's rules that matter: a cgroup offers the controllers its
parent enables, enables none below it while it holds processes (``EBUSY``), and shows
a controller's files only where it is offered. The v1 path runs for real on this
machine's hierarchies (``tests/integration/test_shares.py``).
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from durable_subagents.tools import _cgroup_host, _cgroups
from durable_subagents.tools._cgroups import (
    CONTROLLERS,
    TASK_CALLS,
    TOOLS_WEIGHT,
    TREE_CALLS,
    WEIGHT,
    Bounds,
)
from durable_subagents.tools._sandbox_profile import SandboxProfile, bwrap_argv


class FakeCgroupFs:
    """Interface files in memory; the directories are real (made and removed as on cgroupfs)."""

    def __init__(self, root: Path, offered: str) -> None:
        self.root = root
        self.files: dict[Path, str] = {root / "cgroup.controllers": offered}

    def read(self, path: Path) -> str:
        if path in self.files:
            return self.files[path]
        if not path.parent.is_dir():
            raise FileNotFoundError(errno.ENOENT, "no such cgroup", str(path))
        if path.name == "cgroup.controllers":
            return self.read(path.parent.parent / "cgroup.subtree_control")
        if path.name in ("cgroup.procs", "cgroup.subtree_control"):
            return ""
        raise FileNotFoundError(errno.ENOENT, "no such file", str(path))

    def write(self, path: Path, value: int | str) -> None:
        offered = self.read(path.parent / "cgroup.controllers").split()
        if path.name == "cgroup.subtree_control":
            if self.read(path.parent / "cgroup.procs").strip():
                raise OSError(errno.EBUSY, "holds processes", str(path))
            on = set(self.read(path).split())
            for word in str(value).split():
                if word[1:] not in offered:
                    raise OSError(errno.ENOENT, "not offered", str(path))
                on.add(word[1:])
            self.files[path] = " ".join(sorted(on))
        elif path.name.split(".")[0] in offered:
            self.files[path] = str(value)
        else:
            raise FileNotFoundError(errno.ENOENT, "no such file", str(path))

    def value(self, path: Path) -> int:
        return int(self.files[path])


@pytest.fixture
def fs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeCgroupFs:
    fake = FakeCgroupFs(tmp_path, "cpu io memory pids")
    monkeypatch.setattr(_cgroups, "_read", fake.read)
    monkeypatch.setattr(_cgroups, "_write", fake.write)
    monkeypatch.setattr(_cgroups, "_trees", {})
    return fake


def delegated(fs: FakeCgroupFs) -> tuple[Path, Path]:
    """systemd's ``Delegate=yes`` with ``DelegateSubgroup=worker``: the unit's cgroup is
    the worker's to manage and holds no process; the worker runs one level down."""
    fs.write(fs.root / "cgroup.subtree_control", "+cpu +memory +pids")
    unit = fs.root / "subagents.service"
    unit.mkdir()
    own = unit / "worker"
    own.mkdir()
    fs.write(unit / "cgroup.subtree_control", "+cpu +memory +pids")
    fs.files[own / "cgroup.procs"] = "4242\n"
    return unit, own


def test_a_delegated_v2_subtree_holds_trees_tasks_and_calls(fs: FakeCgroupFs) -> None:
    unit, own = delegated(fs)
    hierarchy, problem = _cgroup_host._prepare(2, CONTROLLERS, [own, unit])
    assert hierarchy is not None, problem
    assert hierarchy.base.parent == unit and hierarchy.controllers == CONTROLLERS
    held = [hierarchy]
    call = Bounds(256 << 20, 64)
    [(_, a)] = _cgroups.open_call(held, "lead", "lead", call)
    [(_, b)] = _cgroups.open_call(held, "lead", "child", call)
    task, tree = a.parent, a.parent.parent
    assert b.parent.parent == tree and b.parent != task  # one tree, two tasks
    for cgroup, n in ((tree, TREE_CALLS), (task, TASK_CALLS), (b.parent, TASK_CALLS), (a, 1)):
        assert fs.value(cgroup / "memory.max") == n * (256 << 20)
        assert fs.value(cgroup / "pids.max") == n * 64
        assert fs.value(cgroup / "cpu.weight") == WEIGHT  # a tree weighs one task
    assert fs.value(hierarchy.base / "cpu.weight") == TOOLS_WEIGHT  # beside the worker's 100
    assert fs.value(a / "memory.swap.max") == 0
    for parent in (hierarchy.base, tree, task):
        assert fs.read(parent / "cgroup.subtree_control").split() == list(CONTROLLERS)

    # A later call with more room raises its tree's caps, never lowers them.
    [(_, c)] = _cgroups.open_call(held, "lead", "lead", Bounds(512 << 20, 32))
    assert fs.value(tree / "memory.max") == TREE_CALLS * (512 << 20)
    assert fs.value(tree / "pids.max") == TREE_CALLS * 64

    _cgroups.close_call("lead", "lead", [a])
    assert task.exists() and not a.exists()  # the task's other call still runs
    _cgroups.close_call("lead", "lead", [c])
    assert not task.exists() and tree.exists()
    _cgroups.close_call("lead", "child", [b])
    assert not tree.exists() and hierarchy.base.exists()


def test_v2_without_delegation_says_why(fs: FakeCgroupFs) -> None:
    fs.write(fs.root / "cgroup.subtree_control", "+cpu +memory +pids")
    slice_ = fs.root / "user.slice"
    slice_.mkdir()
    own = slice_ / "session-1.scope"
    own.mkdir()
    fs.files[own / "cgroup.procs"] = "4242\n"
    fs.files[slice_ / "cgroup.procs"] = "17\n"  # not the worker's to manage
    hierarchy, problem = _cgroup_host._prepare(2, CONTROLLERS, [own, slice_])
    assert hierarchy is None
    assert "the worker's cgroup" in problem and "holds processes" in problem
    assert "its parent" in problem and "not delegated" in problem


def test_a_v2_host_is_found_from_the_worker_s_own_cgroup(
    fs: FakeCgroupFs, monkeypatch: pytest.MonkeyPatch
) -> None:
    delegated(fs)
    mount = _cgroup_host._Mount(2, frozenset(), "/", fs.root)
    monkeypatch.setattr(_cgroup_host, "_mounts", lambda: [mount])
    monkeypatch.setattr(_cgroup_host, "_own_paths", lambda: {"": "/subagents.service/worker"})
    found, why = _cgroup_host._find()
    assert [h.controllers for h in found] == [CONTROLLERS] and not why
    assert found[0].base.parent == fs.root / "subagents.service"
    found[0].base.rmdir()


def test_without_a_memory_cgroup_every_writable_tmpfs_is_sized(tmp_path: Path) -> None:
    profile = SandboxProfile(workspace=tmp_path)
    sized = bwrap_argv("bwrap", profile, ["true"], overlay="/o/mnt", tmpfs_bytes=64 << 20)
    text = " ".join(sized)
    assert f"--size {32 << 20} --tmpfs /tmp " in text
    assert f"--size {16 << 20} --tmpfs /var/tmp " in text
    assert f"--size {16 << 20} --tmpfs /dev/shm --remount-ro /dev " in text
    assert "--remount-ro / --chdir" in text  # the sandbox's root tmpfs holds no file
    plain = " ".join(bwrap_argv("bwrap", profile, ["true"], overlay="/o/mnt"))
    assert "--size" not in plain and "--remount-ro / " not in plain
