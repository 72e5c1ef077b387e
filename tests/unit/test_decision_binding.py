"""A decision binds what runs: a path is judged where it resolves, before anything opens it.

The rules and the walk on their own; the attacks through a real worker, sandbox and
dev server are in tests/integration/test_decision_binding.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from durable_subagents import AgentSpec, PermissionRule, policy
from durable_subagents.tools._confined_open import open_beneath


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_the_walk_is_checked_before_it_makes_or_opens_anything(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "real").mkdir(parents=True)
    (root / "link").symlink_to("real")
    seen: list[tuple[tuple[str, ...], bool]] = []

    def refuse(parts: tuple[str, ...], final: bool) -> None:
        seen.append((parts, final))
        raise PermissionError("no")

    with pytest.raises(PermissionError):
        open_beneath(root, "a/b/c", os.O_WRONLY | os.O_CREAT, make_parents=True, check=refuse)
    with pytest.raises(PermissionError):
        open_beneath(root, "link/x", os.O_WRONLY | os.O_CREAT, check=refuse)
    with pytest.raises(PermissionError):
        open_beneath(root, "link", os.O_RDONLY, check=refuse)
    assert seen == [(("a",), False), (("real", "x"), True), (("real",), True)]
    assert tree(root) == ["link", "real"]


def test_rules_judge_a_path_as_written_and_as_resolved() -> None:
    deny_env = [PermissionRule(tool="write_file", pattern=".env", action="deny")]
    spec = AgentSpec(name="a", permission_mode="dont_ask", restrictions=deny_env)
    args = {"path": ".env"}
    assert policy.decide(spec, "write_file", args, path="settings/app.txt") == "allow"
    assert (
        policy.decide(spec, "write_file", args, path="settings/app.txt", written=".env") == "deny"
    )
    assert policy.decide(spec, "write_file", {"path": "x"}, path=".env", written="x") == "deny"


def test_a_preview_names_where_the_path_leads() -> None:
    preview = policy.arguments_preview("write_file", {"path": "hk/x"}, resolved=".git/hooks/x")
    assert preview == "write_file · hk/x → .git/hooks/x"
    long = policy.arguments_preview(
        "write_file", {"path": "a/" * 200}, limit=200, resolved=".git/" + "b/" * 200
    )
    assert len(long) == len("write_file · ") + 200
    assert "… → .git/b/" in long
