"""The event loop a worker process runs on: uvloop where it is installed, else asyncio's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Literal

from durable_subagents.errors import InvalidRequest

EventLoopChoice = Literal["auto", "uvloop", "asyncio"]


def loop_factory(choice: EventLoopChoice) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What ``asyncio.Runner(loop_factory=...)`` should make for ``choice``.

    ``auto``: uvloop when it can be imported (it is a dependency everywhere but on
    Windows), asyncio's own loop otherwise. uvloop runs the same worker on libuv: the
    event loop's own bookkeeping and the sockets and pipes of model streams and tool
    processes cost less CPU (``bench/bench_scale.py``: 3-9 % less worker CPU per turn).

    Returns:
        uvloop's loop constructor, or None for asyncio's default loop.

    Raises:
        InvalidRequest: ``uvloop`` was asked for and cannot be imported.
    """
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise InvalidRequest(
                "SUBAGENTS_EVENT_LOOP=uvloop, but uvloop cannot be imported here: "
                "pip install uvloop (not on Windows), or set SUBAGENTS_EVENT_LOOP=auto"
            ) from None
        return None
    return uvloop.new_event_loop


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``: which loop ``loop`` is."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
