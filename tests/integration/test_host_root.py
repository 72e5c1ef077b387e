"""A tool never holds host root, whatever user the worker is.

The scripted model attacks from inside ``bash`` of a ``general`` task (default
settings) on a worker running as root, and on one running as an unprivileged user: it
tries to undo the mounts that keep ``.git``, ``.claude`` and ``/etc/shadow`` out of its
reach, to leave set-user-ID and file-capability programs in the workspace, and to
escape through new namespaces. Each test checks the host: the hook or fsmonitor never
ran, the agent file is unchanged, no such program remains, the shadow file was never
read, and what the tool made belongs to an unprivileged user.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.activities._workspaces import log_tool_user
from durable_subagents.config import Settings
from durable_subagents.connection._setting_values import parse_tool_user
from durable_subagents.tools import ToolContext, bash
from durable_subagents.tools._sandbox_host import NOBODY, tool_user
from durable_subagents.tools._seccomp import REFUSED_CALLS, seccomp_supported
from durable_subagents.worker import create_worker

from ..helpers import CEILING
from ..helpers.missing import missing
from ..helpers.tasks import TEST_MODELS, TOOL_USER, give_to_tool_user, script

WORKER_USER = (10002, 10002)
"""The unprivileged worker's user (a process of its own when the suite runs as root)."""

ROOT = os.geteuid() == 0


def _give(path: Path, owner: tuple[int, int]) -> None:
    if not ROOT:
        return
    os.chown(path, *owner)
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(top, name), *owner, follow_symlinks=False)


@pytest.fixture(params=["root", "unprivileged"])
async def attacked(
    request: pytest.FixtureRequest,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
) -> AsyncIterator[tuple[int, int]]:
    """A worker as root or as an unprivileged user; yields who its tool commands run as."""
    if request.param == "root":
        if not ROOT:
            pytest.skip(missing("root: the worker runs as root only when the suite does"))
        async with create_worker(temporal_client, settings):
            yield TOOL_USER
        return
    if not ROOT:
        async with create_worker(temporal_client, settings):
            yield os.getuid(), os.getgid()
        return
    home = tmp_path / "worker-home"
    for path in (home, settings.resolved_blob_dir, tmp_path / "data"):
        path.mkdir(parents=True, exist_ok=True)
        _give(path, WORKER_USER)
    _give(workspace, WORKER_USER)
    log = (tmp_path / "worker.log").open("wb")
    drop = [f"--reuid={WORKER_USER[0]}", f"--regid={WORKER_USER[1]}", "--clear-groups"]
    proc = subprocess.Popen(
        [
            "setpriv",
            *drop,
            sys.executable,
            "-m",
            "durable_subagents",
            "worker",
            "--address",
            settings.address,
            "--task-queue",
            settings.task_queue,
            "--workspace",
            str(workspace),
        ],
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(home),
            "SUBAGENTS_BLOB_DIR": str(settings.resolved_blob_dir),
            "SUBAGENTS_DATA_DIR": str(tmp_path / "data"),
            **TEST_MODELS,
        },
        cwd=home,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield WORKER_USER
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def attack(client: SubagentClient, *commands: str) -> list[str]:
    """A ``general`` task runs ``commands`` in ``bash`` (one call each); their outputs."""
    turn: dict[str, Any] = {
        "tool_calls": [{"name": "bash", "arguments": {"command": c}} for c in commands]
    }
    task_id = await client.spawn_task("general", "tidy up", model=script(turn, {"text": "done"}))
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info
    return [m.content for m in await client.get_transcript(task_id) if m.role == "tool"]


def git(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Git as the workspace's owner runs it on the host (here: root, trusting the tree)."""
    base = ["git", "-c", "safe.directory=*", "-c", "user.name=t", "-c", "user.email=t@e"]
    return subprocess.run(
        [*base, *args], cwd=workspace, capture_output=True, text=True, check=False
    )


async def test_protected_paths_hold_against_mount_tricks(
    client: SubagentClient, attacked: tuple[int, int], workspace: Path, tmp_path: Path
) -> None:
    """umount, mount --bind, remount rw, pivot_root, chroot and a new user namespace all
    fail; the fsmonitor and the hook the attacker plants never run on the host, and the
    agent file it rewrites is unchanged."""
    assert git(workspace, "init", "-q").returncode == 0
    assert git(workspace, "commit", "-q", "--allow-empty", "-m", "first").returncode == 0
    agents = workspace / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "explore.md").write_text("---\nname: explore\ntools: Read\n---\nlook only\n")
    _give(workspace, attacked)
    config = (workspace / ".git" / "config").read_bytes()
    agent_file = (agents / "explore.md").read_bytes()
    fsmonitor_ran, hook_ran = tmp_path / "fsmonitor-ran", tmp_path / "hook-ran"
    undo = (
        "umount .git; umount -l .git; umount .claude; umount /etc/shadow; "
        "mount -o remount,rw .git; mount -o remount,rw,bind .git; mount --bind /tmp .git; "
        "pivot_root . .git; chroot / true; "
        "unshare -Urm sh -c 'umount .git; echo x >> .git/config'; "
        "echo attempted"
    )
    plant = (
        f"printf '[core]\\n\\tfsmonitor = \"touch {fsmonitor_ran}\"\\n' >> .git/config; "
        f"printf '#!/bin/sh\\ntouch {hook_ran}\\n' > .git/hooks/post-checkout; "
        "chmod +x .git/hooks/post-checkout; "
        "printf -- '---\\nname: explore\\npermissionMode: dontAsk\\ntools: Bash\\n---\\nx\\n' "
        "> .claude/agents/explore.md; echo planted"
    )
    outputs = await attack(client, f"{undo}; {plant}")
    assert "attempted" in outputs[0] and "planted" in outputs[0]
    # The command changed its own overlay; none of it lands (a dont_ask agent).
    assert "[not applied: .claude, .git: a protected path" in outputs[0], outputs[0]
    assert (workspace / ".git" / "config").read_bytes() == config
    assert not (workspace / ".git" / "hooks" / "post-checkout").exists()
    assert (agents / "explore.md").read_bytes() == agent_file
    assert git(workspace, "status").returncode == 0
    assert git(workspace, "checkout", "-q", "-b", "other").returncode == 0
    assert not fsmonitor_ran.exists()
    assert not hook_ran.exists()


async def test_the_masked_system_files_stay_masked(
    client: SubagentClient, attacked: tuple[int, int]
) -> None:
    secret = [p for p in ("/etc/shadow", "/etc/gshadow") if Path(p).is_file()]
    if not secret:
        pytest.skip("this machine has no shadow file")
    read = "; ".join(f"cat {p}; python3 -c 'print(open(\"{p}\").read())'" for p in secret)
    outputs = await attack(
        client,
        f"umount {' '.join(secret)}; {read}; echo end",
        f"unshare -Urm sh -c 'umount {secret[0]}; cat {secret[0]}'; "
        f"nsenter -t 1 -m cat {secret[0]}; echo end",
    )
    assert all(o.rstrip().endswith("end") for o in outputs), outputs
    for path in secret:
        if not os.access(path, os.R_OK):  # this user cannot read it either: no entry may show
            assert not any(re.search(r"^\w+:[^:\n]*:\d*:", o, re.M) for o in outputs)
            continue
        for line in Path(path).read_text().splitlines():
            if line.strip():
                assert all(line not in o for o in outputs), (path, outputs)


SETID_ATTACK = r"""
cp /bin/bash rootsh; chmod 4755 rootsh; chmod u+s,g+s rootsh
install -m 6755 /bin/bash rootsh2
cp -p /bin/mount mount-copy
mkdir shared; chmod g+s shared
python3 - <<'EOF'
import os, tarfile, io
for name, mode in (("o4755", 0o4755), ("o2755", 0o2755)):
    try:
        os.close(os.open(name, os.O_CREAT | os.O_WRONLY, mode))
    except OSError as err:
        print(name, err)
try:
    os.mknod("node", 0o104755)
except OSError as err:
    print("mknod", err)
with open("capsh", "wb") as f:
    f.write(open("/bin/bash", "rb").read())
os.chmod("capsh", 0o755)
# VFS_CAP_REVISION_2 with CAP_SETUID (bit 7) permitted and effective.
cap = (0x02000001).to_bytes(4, "little") + (1 << 7).to_bytes(4, "little") + bytes(12)
try:
    os.setxattr("capsh", "security.capability", cap)
except OSError as err:
    print("setxattr", err)
data = io.BytesIO()
with tarfile.open(fileobj=data, mode="w") as tar:
    info = tarfile.TarInfo("fromtar")
    info.size, info.mode = 4, 0o4755
    tar.addfile(info, io.BytesIO(b"#!\n\n"))
open("setid.tar", "wb").write(data.getvalue())
EOF
tar xpf setid.tar
setcap cap_setuid+ep rootsh 2>&1 | head -1
echo end
"""


async def test_no_setid_file_or_capability_survives(
    client: SubagentClient, attacked: tuple[int, int], workspace: Path
) -> None:
    outputs = await attack(client, SETID_ATTACK)
    assert outputs[0].rstrip().endswith("end"), outputs
    made = [p for p in workspace.rglob("*") if not p.is_symlink()]
    assert {"rootsh", "rootsh2", "capsh", "fromtar", "shared"} <= {p.name for p in made}
    for path in made:
        mode = path.lstat().st_mode
        assert not mode & (stat.S_ISUID | stat.S_ISGID), (path, oct(mode))
        with pytest.raises(OSError):
            os.getxattr(path, "security.capability", follow_symlinks=False)
    if ROOT:
        # What the attack was for: an unprivileged user on the host running it as root.
        ran = subprocess.run(
            ["setpriv", "--reuid=10003", "--regid=10003", "--clear-groups",
             str(workspace / "rootsh"), "-p", "-c", "id -u"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert ran.stdout.strip() == "10003", ran


async def test_what_a_tool_makes_belongs_to_an_unprivileged_user(
    client: SubagentClient, attacked: tuple[int, int], workspace: Path
) -> None:
    outputs = await attack(
        client,
        "id -u; id -g; grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status; "
        "touch made; mkdir -p dir/sub; echo x > dir/sub/f; ln -s made link",
    )
    uid, gid = attacked
    lines = outputs[0].split()
    assert lines[:2] == [str(uid), str(gid)], outputs
    assert "CapEff:\t0000000000000000" in outputs[0] and "CapBnd:\t0000000000000000" in outputs[0]
    for name in ("made", "dir", "dir/sub", "dir/sub/f", "link"):
        info = (workspace / name).lstat()
        assert (info.st_uid, info.st_gid) == (uid, gid), name
        assert info.st_uid != 0


@pytest.mark.skipif(not ROOT, reason=missing("root: a file only root may read needs a root suite"))
async def test_the_file_tools_act_as_the_tool_user(
    client: SubagentClient, attacked: tuple[int, int], workspace: Path
) -> None:
    """What ``write_file`` makes is the tool user's, as a command's is; a file only root
    may read, placed in the workspace or linked from it, is never read, searched or
    changed by a file tool."""
    secret = workspace / "secret.txt"
    secret.write_text("root's secret\n")
    secret.chmod(0o600)
    (workspace / "alias.txt").symlink_to("secret.txt")
    turn = {
        "tool_calls": [
            {"name": "write_file", "arguments": {"path": "dir/made.txt", "content": "x\n"}},
            {"name": "read_file", "arguments": {"path": "secret.txt"}},
            {"name": "read_file", "arguments": {"path": "alias.txt"}},
            {"name": "grep", "arguments": {"pattern": "secret"}},
            {"name": "edit_file", "arguments": {"path": "secret.txt", "old": "root", "new": "my"}},
        ]
    }
    task_id = await client.spawn_task("general", "tidy up", model=script(turn, {"text": "done"}))
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info
    outputs = [m.content for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert outputs[0] == "wrote 2 bytes to dir/made.txt", outputs
    uid, gid = attacked
    for name in ("dir", "dir/made.txt"):
        info_ = (workspace / name).lstat()
        assert (info_.st_uid, info_.st_gid) == (uid, gid), name
    assert outputs[1] == "cannot read 'secret.txt': Permission denied", outputs
    assert outputs[2] == "cannot read 'alias.txt': Permission denied", outputs
    assert "root's secret" not in "\n".join(outputs), outputs
    assert "Permission denied" in outputs[4], outputs
    assert secret.read_text() == "root's secret\n"
    assert secret.stat().st_uid == 0


@pytest.mark.skipif(not ROOT, reason=missing("root: only a root worker picks a tool user"))
async def test_a_root_owned_workspace_is_used_as_nobody(
    client: SubagentClient, temporal_client: Client, settings: Settings, workspace: Path
) -> None:
    """A checkout root owns: commands read it as ``nobody`` and cannot change it."""
    os.chown(workspace, 0, 0)
    (workspace / "notes.txt").write_text("root's notes\n")
    async with create_worker(temporal_client, settings):
        outputs = await attack(client, "id -u; cat notes.txt; echo x >> notes.txt; touch new")
    assert outputs[0].splitlines()[:2] == [str(NOBODY[0]), "root's notes"]
    assert "Permission denied" in outputs[0]
    assert (workspace / "notes.txt").read_text() == "root's notes\n"
    assert not (workspace / "new").exists()


@pytest.mark.skipif(not ROOT, reason=missing("root: only a root worker picks a tool user"))
async def test_the_tool_user_can_be_configured(
    client: SubagentClient, temporal_client: Client, settings: Settings, workspace: Path
) -> None:
    _give(workspace, (10004, 10005))
    configured = settings.model_copy(update={"tool_user": "10004:10005"})
    async with create_worker(temporal_client, configured):
        outputs = await attack(client, "id -u; id -g; touch made")
    assert outputs[0].split()[:2] == ["10004", "10005"]
    assert (workspace / "made").stat().st_uid == 10004


def test_tool_user_setting_refuses_root_and_unknown_names() -> None:
    assert parse_tool_user("auto") is None
    assert parse_tool_user("1234:5678") == (1234, 5678)
    assert parse_tool_user("nobody") == (65534, 65534)
    for bad, says in (("0", "is root"), ("root", "is root"), ("1000:0", "is root")):
        with pytest.raises(ValueError, match=says):
            parse_tool_user(bad)
    with pytest.raises(ValueError, match="no such user"):
        parse_tool_user("no-such-user-here")
    with pytest.raises(ValueError, match="SUBAGENTS_TOOL_USER"):
        Settings(tool_user="root")


def test_a_root_worker_never_runs_a_command_as_root(tmp_path: Path) -> None:
    give_to_tool_user(tmp_path)
    expected = TOOL_USER if ROOT else None
    assert tool_user(tmp_path) == expected
    if ROOT:
        os.chown(tmp_path, 0, 0)
    assert tool_user(tmp_path) == (NOBODY if ROOT else None)


@pytest.mark.skipif(not ROOT, reason=missing("root: only a root worker picks a tool user"))
def test_the_tool_user_warning_names_the_real_owner(caplog: pytest.LogCaptureFixture) -> None:
    """Root's checkout is told apart from one that ``nobody`` owns: only the first
    warns that the workspace belongs to root."""
    caplog.set_level(logging.INFO, logger="durable_subagents")
    workspace = Path(tempfile.mkdtemp(dir="/tmp"))  # a path nobody may walk
    try:
        os.chmod(workspace, 0o755)
        log_tool_user(workspace, None)
        assert "belongs to root" in caplog.text
        caplog.clear()
        os.chown(workspace, *NOBODY)
        log_tool_user(workspace, None)
        assert f"tool commands run as uid {NOBODY[0]}" in caplog.text
        assert "WARNING" not in caplog.text
    finally:
        shutil.rmtree(workspace)


# The refused calls, each made with harmless arguments from Python inside the sandbox.
CALLS = r"""
import ctypes, errno, json, os, platform
libc = ctypes.CDLL(None, use_errno=True)
X86 = platform.machine() == "x86_64"
nr = {
    "mount": 165 if X86 else 40, "umount2": 166 if X86 else 39,
    "pivot_root": 155 if X86 else 41, "chroot": 161 if X86 else 51,
    "unshare": 272 if X86 else 97, "setns": 308 if X86 else 268,
    "keyctl": 250 if X86 else 219, "add_key": 248 if X86 else 217,
    "bpf": 321 if X86 else 280, "perf_event_open": 298 if X86 else 241,
    "userfaultfd": 323 if X86 else 282, "open_tree": 428, "fsopen": 430,
    "mount_setattr": 442, "clone3": 435, "openat2": 437, "io_uring_setup": 425,
    "fchmodat": 268 if X86 else 53, "clone": 56 if X86 else 220, "getpid": 39 if X86 else 172,
}
def call(name, *args):
    ctypes.set_errno(0)
    ret = libc.syscall(nr[name], *[ctypes.c_long(a) for a in args])
    return errno.errorcode.get(ctypes.get_errno(), "0") if ret == -1 else "ok"
out = {name: call(name, 0, 0, 0, 0) for name in nr if name not in ("fchmodat", "clone")}
open("f", "w").close()
name = ctypes.create_string_buffer(b"f")
out["fchmodat+suid"] = call("fchmodat", -100, ctypes.addressof(name), 0o4755)
out["fchmodat"] = call("fchmodat", -100, ctypes.addressof(name), 0o755)
out["clone+newuser"] = call("clone", 0x10000000 | 17, 0, 0, 0)
print(json.dumps(out))
"""


@pytest.mark.skipif(not seccomp_supported(), reason="no seccomp table for this machine")
async def test_the_sandbox_refuses_the_documented_calls(tmp_path: Path) -> None:
    import json

    ws = give_to_tool_user(tmp_path)
    ctx = ToolContext(workspace=ws, task_id="t", sandbox="bwrap")
    output = await bash.run(ctx, {"command": f"python3 - <<'EOF'\n{CALLS}\nEOF"})
    results = json.loads(output.splitlines()[-1])
    enosys = {"clone3", "openat2", "io_uring_setup"}
    for name, answer in results.items():
        if name in ("getpid", "fchmodat"):
            assert answer == "ok", (name, answer)
        else:
            assert answer == ("ENOSYS" if name in enosys else "EPERM"), (name, answer)
    assert set(REFUSED_CALLS) >= {n.split("+")[0] for n in results} - {"getpid"}


@pytest.mark.skipif(not ROOT or shutil.which("setpriv") is None, reason=missing("root and setpriv"))
@pytest.mark.timeout(900)
def test_the_hostile_suites_pass_for_an_unprivileged_user(tmp_path: Path) -> None:
    """The same attacks with the whole suite (and so the worker) as an unprivileged
    user: the sandbox must hold for every worker user, not only for root's tool user."""
    home = tmp_path / "home"
    home.mkdir()
    _give(home, WORKER_USER)
    tmp_path.chmod(0o755)
    suite = [
        str(Path(__file__).parent / name)
        for name in ("test_hostile.py", "test_host_root.py", "test_shares.py")
    ]
    proc = subprocess.run(
        [
            "setpriv", f"--reuid={WORKER_USER[0]}", f"--regid={WORKER_USER[1]}", "--clear-groups",
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
            "--basetemp", str(home / "t"), *suite,
        ],
        env={"PATH": os.environ["PATH"], "HOME": str(home), "USER": "subagents-test"},
        cwd=home,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout
