"""What a process's last running subagent worker closes when it stops."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from temporalio.worker import Plugin, Replayer, ReplayerConfig, Worker, WorkerConfig

from durable_subagents.providers import close_providers

__all__ = ["RunOnlyPlugin", "SessionsClosed", "sessions_closed_after"]

_running = 0


@contextlib.asynccontextmanager
async def sessions_closed_after() -> AsyncIterator[None]:
    """Run a worker; when the last one of the process stops, close the model sessions.

    Providers and their HTTP sessions are cached per process and shared by its
    workers, so only the last worker to stop may close them. An open aiohttp session
    is reported as "Unclosed client session" when the process exits.
    """
    global _running
    _running += 1
    try:
        yield
    finally:
        _running -= 1
        if _running == 0:
            await close_providers()


class RunOnlyPlugin(Plugin):
    """A worker plugin that only wraps the worker's run; configuration and replays pass."""

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Leave the configuration as it is."""
        return config

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        """Leave the configuration as it is."""
        return config

    def run_replayer(
        self,
        replayer: Replayer,
        histories: AsyncIterator[Any],
        next: Callable[[Replayer, AsyncIterator[Any]], contextlib.AbstractAsyncContextManager[Any]],
    ) -> contextlib.AbstractAsyncContextManager[Any]:
        """Replay as usual: replays run no activities."""
        return next(replayer, histories)


class SessionsClosed(RunOnlyPlugin):
    """Runs a worker inside ``sessions_closed_after`` (``create_worker`` adds it)."""

    def name(self) -> str:
        """The plugin's name."""
        return "durable_subagents.SessionsClosed"

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Run ``worker``; close the model sessions if it is the last to stop."""
        async with sessions_closed_after():
            await next(worker)
