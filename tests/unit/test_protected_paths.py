"""Protected paths: the list, and how an entry matches anywhere and in any case.

The attacks on protected paths through a real worker are in
tests/integration/test_protected_paths.py.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from durable_subagents import (
    policy,
)
from durable_subagents.agents import PROTECTED_PATHS
from durable_subagents.config import Settings

# ---------------------------------------------------------------- the list


def test_each_kind_of_entry_is_matched_anywhere_and_in_any_case() -> None:
    def protected(path: str) -> str | None:
        arguments = {"path": path}
        return policy.protected_write(
            "write_file", arguments, read_only=False, protected=PROTECTED_PATHS
        )

    for path, entry in [
        (".pre-commit-config.yaml", ".pre-commit-config.yaml"),
        ("svc/lefthook-local.jsonc", "lefthook-local.jsonc"),
        ("svc/.config/lefthook.yml", ".config/lefthook.yml"),
        ("./a/../.cursor/mcp.json", ".cursor"),
        ("/abs/ws/.gemini/settings.json", ".gemini"),
        (".GIT/config", ".git"),
        ("pkg/.Vscode/tasks.json", ".vscode"),
        (".github/hooks/audit.json", ".github/hooks"),
        ("tools/.config/mise/config.toml", ".config/mise"),
        ("mise/config.toml", "mise/config.toml"),
        ("sub\\.envrc", ".envrc"),
        (".github/workflows/ci.yml", ".github/workflows"),
        ("lib/.hg/hgrc", ".hg"),
        ("x/.pdbrc", ".pdbrc"),
        ("vendor/dep/.gitmodules", ".gitmodules"),
    ]:
        assert protected(path) == entry, path
    for path in [
        ".github/ISSUE_TEMPLATE/bug.md",
        "hooks/pre-commit",
        ".config/other.toml",
        "mise/notes.md",
        "my.git/config",
        "docs/lefthook.md",
        "src/cursor.py",
    ]:
        assert protected(path) is None, path
    # No list reported: the built-in one, in any case.
    assert policy.protected_write("write_file", {"path": ".GIT/x"}, read_only=False) == ".git"
    assert policy.protected_write("write_file", {"path": ".cursor/x"}, read_only=False) == ".cursor"


def test_a_worker_setting_adds_entries_and_refuses_what_is_not_a_plain_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SUBAGENTS_PROTECTED_PATHS", " ./deploy/hooks/ , release.cfg,.git ")
    extended = Settings().protected_path_list
    assert extended[: len(PROTECTED_PATHS)] == PROTECTED_PATHS
    assert extended[len(PROTECTED_PATHS) :] == ("deploy/hooks", "release.cfg")
    for bad in ["../up", "/etc/x", "a//b", "hooks/*.sh", "a/./b"]:
        monkeypatch.setenv("SUBAGENTS_PROTECTED_PATHS", bad)
        with pytest.raises(ValidationError, match="SUBAGENTS_PROTECTED_PATHS entry"):
            Settings()
