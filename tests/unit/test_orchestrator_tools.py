"""The orchestrator tools' decisions: ``all`` means every call shown, names must have been shown."""

from __future__ import annotations

import pytest

from durable_subagents import (
    TaskStatus,
    UnknownCallId,
)
from durable_subagents.client._decisions import shown_only
from durable_subagents.client._task_state import InternalInfo
from durable_subagents.types import PendingApproval


def test_all_means_every_call_shown_and_names_must_have_been_shown() -> None:
    """A second child paused after the view: "all" decides only what the view showed."""
    seen = PendingApproval(
        call_id="a/p1/c", tool_name="bash", arguments_preview="x", arguments_hash="h1"
    )
    later = PendingApproval(
        call_id="b/p2/c", tool_name="bash", arguments_preview="y", arguments_hash="h2"
    )
    info = InternalInfo(
        id="t", status=TaskStatus.PAUSED, pause_id="a:p1", pending_approvals=[seen, later]
    )
    shown = {("a/p1/c", "bash", "h1")}
    assert shown_only(info, None, shown) == ["a/p1/c"]
    assert shown_only(info, ["a/p1/c"], shown) == ["a/p1/c"]
    with pytest.raises(UnknownCallId, match="b/p2/c of pause a:p1 were not shown"):
        shown_only(info, ["a/p1/c", "b/p2/c"], shown)
    with pytest.raises(UnknownCallId, match="not shown"):
        shown_only(info, None, set())
    changed = {("a/p1/c", "bash", "h0")}  # same id, other arguments
    with pytest.raises(UnknownCallId, match="a/p1/c"):
        shown_only(info, ["a/p1/c"], changed)
