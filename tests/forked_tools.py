"""Tools that run in the file tools' child processes and misbehave on purpose.

The fork server imports a forked tool by its module, so these live in a module of
their own rather than in a test file.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import time

from durable_subagents.tools import ToolContext, tool
from durable_subagents.tools._processes import forked

PR_GET_PDEATHSIG = 2


@forked
@tool
def misbehave(ctx: ToolContext, how: str) -> str:
    """Crash, hog memory, raise or hang, as ``how`` says.

    Args:
        ctx: The call's context.
        how: ``segv``, ``exit``, ``memory``, ``raise``, ``sleep``, ``whoami``,
            ``policy`` (its scheduling policy as it starts, then half a second asleep)
            or ``burn`` (its policy after 0.3 s of CPU).
    """
    if how == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif how == "exit":
        os._exit(3)
    elif how == "memory":
        hog = bytearray(4 << 30)
        return str(len(hog))
    elif how == "raise":
        raise ValueError("a bug in the tool")
    elif how == "sleep":
        (ctx.workspace / "sleeping").write_text(str(os.getpid()))
        time.sleep(300)
    elif how == "policy":
        started = os.sched_getscheduler(0)
        time.sleep(0.5)
        return str(started)
    elif how == "burn":
        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass
        return str(os.sched_getscheduler(0))
    elif how == "whoami":
        limits = {
            name: resource.getrlimit(getattr(resource, f"RLIMIT_{name.upper()}"))
            for name in ("cpu", "data", "fsize", "nofile")
        }
        ids = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups()}
        death_signal = ctypes.c_int(0)
        ctypes.CDLL(None).prctl(PR_GET_PDEATHSIG, ctypes.byref(death_signal))
        return json.dumps({**ids, **limits, "death_signal": death_signal.value})
    return how
