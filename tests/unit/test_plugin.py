"""``SubagentsPlugin`` is exported at the top of the package."""

from __future__ import annotations

import durable_subagents
from durable_subagents.worker import SubagentsPlugin


def test_the_plugin_is_exported_at_the_top() -> None:
    assert durable_subagents.SubagentsPlugin is SubagentsPlugin
    assert "SubagentsPlugin" in durable_subagents.__all__
