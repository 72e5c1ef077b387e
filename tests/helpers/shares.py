"""A worker's share of the machine in tests: with its cgroups, or as a worker without them."""

from __future__ import annotations

from pathlib import Path

import pytest

from durable_subagents import Settings
from durable_subagents.tools import _cgroup_host, _cgroups


def without_cgroups(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tool calls of this process get no cgroup, as on a worker that may not make them."""
    missing = dict.fromkeys(_cgroups.CONTROLLERS, "turned off by the test")
    monkeypatch.setattr(_cgroup_host, "_found", ([], missing))


def needs_cgroups(*controllers: str) -> list[_cgroups.Hierarchy]:
    """The hierarchies that hold ``controllers``; skips the test where this worker has none."""
    found = [h for h in _cgroup_host.available() if set(h.controllers) & set(controllers)]
    held = {c for h in found for c in h.controllers}
    if not set(controllers) <= held:
        lacking = ", ".join(c for c in controllers if c not in held)
        pytest.skip(f"no writable {lacking} cgroup for tool calls here (a root worker has them)")
    return found


def tree_dirs(hierarchy: _cgroups.Hierarchy) -> list[Path]:
    """The tree cgroups this process's worker holds now in ``hierarchy``."""
    return sorted(hierarchy.base.glob("tree-*"))


def written(settings: Settings, pattern: str) -> list[Path]:
    """Files matching ``pattern`` that running commands wrote at their workspace's top.

    They are in the commands' calls' upper layers until each call ends (what the test
    reads them from: ``settings.overlay_dir`` must be set).
    """
    assert settings.overlay_dir is not None
    return sorted(settings.overlay_dir.glob(f"*/up/{pattern}"))
