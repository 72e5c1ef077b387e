"""The four custom search attributes a namespace needs (never rename them)."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

STATUS = SearchAttributeKey.for_keyword("SubagentStatus")
AGENT = SearchAttributeKey.for_keyword("SubagentAgent")
PARENT = SearchAttributeKey.for_keyword("SubagentParent")
TURNS = SearchAttributeKey.for_int("SubagentTurns")

ALL = (STATUS, AGENT, PARENT, TURNS)
"""Every custom search attribute the workflow writes."""


def cli_flags() -> list[str]:
    """``--search-attribute NAME=Type`` flags for ``temporal server start-dev``."""
    out = []
    for key in ALL:
        out += ["--search-attribute", f"{key.name}={_type_name(key)}"]
    return out


def register_command(namespace: str = "default") -> str:
    """The ``temporal operator`` commands that register the attributes on any server."""
    return "\n".join(
        f"temporal operator search-attribute create --namespace {namespace} "
        f"--name {key.name} --type {_type_name(key)}"
        for key in ALL
    )


def _type_name(key: SearchAttributeKey) -> str:
    return "Int" if key is TURNS else "Keyword"
