"""Custom agents from Claude Code and OpenCode agent files."""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path

import pytest
import yaml

from durable_subagents.agents import (
    BUILTIN_AGENTS,
    AgentSpec,
    PermissionRule,
    discover_agents,
    find_project_root,
    load_agent_file,
    load_agents,
    resolve_agent,
    scan_agents,
)
from durable_subagents.agents._file_formats import MODEL_PROVIDERS
from durable_subagents.config import Settings
from durable_subagents.errors import InvalidRequest
from tests.helpers.missing import missing

from ..helpers.agent_files import CLAUDE_REVIEWER, OPENCODE_DOCS, PLANTED_EXPLORE, write

# ---------------------------------------------------------------- Claude Code


def test_claude_agent_maps_every_field(tmp_path: Path) -> None:
    path = write(tmp_path / ".claude/agents/reviewer.md", CLAUDE_REVIEWER)
    warnings: list[str] = []
    spec = load_agent_file(path, warnings=warnings)
    assert spec == AgentSpec(
        name="reviewer",
        description="Reviews a change for bugs. Use after editing code.",
        system_prompt="You are a careful code reviewer.\n\nCite `path:line` for every finding.",
        model="anthropic:claude-sonnet-4-5",
        tools=["read_file", "grep", "list_files", "bash"],
        disallowed_tools=["bash"],
        permission_mode="accept_edits",
        max_turns=12,
    )
    assert spec.allowed_tools(["read_file", "list_files", "grep", "bash"]) == [
        "read_file",
        "list_files",
        "grep",
    ]
    assert warnings == []  # `color` is Claude Code's UI, silently ignored


def test_claude_defaults_and_tool_list_forms(tmp_path: Path) -> None:
    minimal = write(
        tmp_path / ".claude/agents/min.md", "---\nname: min\ndescription: d\n---\nprompt\n"
    )
    spec = load_agent_file(minimal)
    assert (spec.model, spec.tools, spec.disallowed_tools) == ("inherit", None, [])
    assert (spec.permission_mode, spec.max_turns) == ("default", 50)
    listed = write(
        tmp_path / ".claude/agents/l.md",
        "---\nname: l\ndescription: d\ntools: [Write, MultiEdit, Edit]\nmodel: inherit\n---\n",
    )
    spec = load_agent_file(listed)
    assert spec.tools == ["write_file", "edit_file"] and spec.system_prompt == ""


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("default", "default"), ("acceptEdits", "accept_edits"), ("plan", "plan"),
     ("dontAsk", "dont_ask"), ("bypassPermissions", "dont_ask")],
)  # fmt: skip
def test_claude_permission_modes(tmp_path: Path, mode: str, expected: str) -> None:
    path = write(
        tmp_path / ".claude/agents/a.md",
        f"---\nname: a\ndescription: d\npermissionMode: {mode}\n---\n",
    )
    assert load_agent_file(path).permission_mode == expected


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("inherit", "inherit"),
        ("sonnet", "anthropic:claude-sonnet-4-5"),
        ("opus", "anthropic:claude-opus-4-1"),
        ("haiku", "anthropic:claude-haiku-4-5"),
        ("claude-sonnet-4-5-20250929", "anthropic:claude-sonnet-4-5-20250929"),
        ("openai/gpt-4.1", "openai:gpt-4.1"),
        ("anthropic/claude-opus-4-1", "anthropic:claude-opus-4-1"),
        ("openai:gpt-4.1-mini", "openai:gpt-4.1-mini"),
        ("openai-responses:gpt-5-mini", "openai-responses:gpt-5-mini"),
        ("scripted", "scripted"),
        ("ollama:llama3.1", "ollama:llama3.1"),
        ("vllm-a:Qwen/Qwen3-8B", "vllm-a:Qwen/Qwen3-8B"),
    ],
)
def test_model_names(tmp_path: Path, model: str, expected: str) -> None:
    path = write(
        tmp_path / ".claude/agents/a.md", f"---\nname: a\ndescription: d\nmodel: {model}\n---\n"
    )
    assert load_agent_file(path).model == expected


def test_unknown_tools_are_dropped_with_warnings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(
        tmp_path / ".claude/agents/web.md",
        "---\nname: web\ndescription: d\ntools: Read, WebFetch, Bash(git:*)\nskills: x\n---\n",
    )
    warnings: list[str] = []
    spec = load_agent_file(path, warnings=warnings)
    assert spec.tools == ["read_file"]  # narrower, never wider
    assert len(warnings) == 3 and all(str(path) in w for w in warnings)
    assert "field 'skills' is not used" in warnings[0]
    assert "'WebFetch'" in warnings[1] and "'Bash(git:*)'" in warnings[2]
    # without a list to put them in, warnings are logged
    with caplog.at_level(logging.WARNING, logger="durable_subagents.agents._files"):
        load_agent_file(path)
    assert [r.getMessage() for r in caplog.records] == warnings


# ---------------------------------------------------------------- OpenCode


def test_opencode_agent_maps_every_field(tmp_path: Path) -> None:
    path = write(tmp_path / ".opencode/agent/docs.md", OPENCODE_DOCS)
    warnings: list[str] = []
    spec = load_agent_file(path, warnings=warnings)
    assert spec.name == "docs"  # the file's stem
    assert spec.description == "Writes and fixes documentation"
    assert spec.system_prompt == "You write documentation."
    assert spec.model == "openai:gpt-4.1"
    assert spec.max_turns == 9
    assert spec.tools is None and spec.disallowed_tools == ["write_file", "edit_file"]
    assert spec.permission_mode == "dont_ask"  # OpenCode allows what no entry restricts
    # `*` first: our rules are last-match-wins, so the specific patterns come after
    assert spec.permissions == [
        PermissionRule(tool="write_file", pattern="*", action="ask"),
        PermissionRule(tool="edit_file", pattern="*", action="ask"),
        PermissionRule(tool="bash", pattern="*", action="ask"),
        PermissionRule(tool="bash", pattern="git *", action="allow"),
        PermissionRule(tool="bash", pattern="git push*", action="deny"),
    ]
    assert len(warnings) == 1 and "'webfetch'" in warnings[0]


def test_opencode_permission_decisions(tmp_path: Path) -> None:
    from durable_subagents import policy

    spec = load_agent_file(write(tmp_path / ".opencode/agents/docs.md", OPENCODE_DOCS))
    assert policy.decide(spec, "bash", {"command": "git status"}) == "allow"
    assert policy.decide(spec, "bash", {"command": "git push origin"}) == "deny"
    assert policy.decide(spec, "bash", {"command": "rm -rf build"}) == "ask"


def test_opencode_tool_globs_and_max_steps(tmp_path: Path) -> None:
    path = write(
        tmp_path / ".opencode/agent/ro.md",
        "---\nmaxSteps: 4\ntools:\n  '*': false\n  read: true\n  grep: true\n"
        "permission: deny\n---\nbody\n",
    )
    spec = load_agent_file(path)
    assert spec.max_turns == 4 and spec.description == ""
    assert spec.allowed_tools(["read_file", "list_files", "grep", "write_file", "bash"]) == [
        "read_file",
        "grep",
    ]
    assert spec.permissions == [PermissionRule(tool="*", pattern="*", action="deny")]


# ---------------------------------------------------------------- model settings


def test_model_settings_in_either_format(tmp_path: Path) -> None:
    claude = write(
        tmp_path / ".claude/agents/thinker.md",
        "---\nname: thinker\ndescription: d\nreasoning_effort: High\ntemperature: 0.2\n"
        "max_output_tokens: 4000\n---\nThink.\n",
    )
    opencode = write(
        tmp_path / ".opencode/agent/planner.md",
        "---\ndescription: d\nreasoningEffort: low\ntemperature: 1\n---\nPlan.\n",
    )
    warnings: list[str] = []
    spec = load_agent_file(claude, warnings=warnings)
    assert (spec.reasoning_effort, spec.temperature, spec.max_output_tokens) == ("high", 0.2, 4000)
    spec = load_agent_file(opencode, warnings=warnings)
    assert (spec.reasoning_effort, spec.temperature, spec.max_output_tokens) == ("low", 1.0, None)
    assert warnings == []
    default = load_agent_file(write(tmp_path / ".claude/agents/p.md", "---\ndescription: d\n---\n"))
    assert (default.reasoning_effort, default.temperature, default.max_output_tokens) == (
        None,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("reasoning_effort: extreme", "reasoning_effort 'extreme' is not one of low, medium, high"),
        ("reasoningEffort: [high]", "reasoningEffort ['high'] is not one of"),
        ("temperature: 3", "temperature 3 is not a number from 0 to 2"),
        ("temperature: warm", "temperature 'warm' is not a number"),
        ("max_output_tokens: 0", "max_output_tokens 0 is not an integer from 1"),
        ("max_output_tokens: 1.5", "max_output_tokens 1.5 is not an integer"),
    ],
)
def test_a_model_setting_that_cannot_be_used_is_dropped_with_a_warning(
    tmp_path: Path, line: str, field: str
) -> None:
    path = write(tmp_path / ".claude/agents/x.md", f"---\nname: x\ndescription: d\n{line}\n---\n")
    warnings: list[str] = []
    spec = load_agent_file(path, warnings=warnings)
    assert (spec.reasoning_effort, spec.temperature, spec.max_output_tokens) == (None, None, None)
    [warning] = warnings
    assert f"{path}:4: {field}" in warning and "ignored" in warning


# ---------------------------------------------------------------- lenient front matter

RELEASE_NOTES = """\
---
name: release-notes
description: Use this agent when a release is cut. Examples:

<example>
Context: The user tagged v2.3.0.
user: "Write the notes for v2.3.0"
assistant: "I'll use the release-notes agent to draft them."
<commentary>
A tag was pushed: time for release notes.
</commentary>
</example>
model: sonnet
color: green
tools: Read, Grep, Glob
---
You write release notes.
"""


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_unquoted_colons_and_examples_load(tmp_path: Path, newline: str) -> None:
    """Front matter strict YAML rejects, shaped like Claude Code's own example agents."""
    text = RELEASE_NOTES.replace("\n", newline)
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load(text.split("---")[1])  # the premise: this is not valid YAML
    path = tmp_path / ".claude/agents/release-notes.md"
    path.parent.mkdir(parents=True)
    path.write_bytes(text.encode())
    warnings: list[str] = []
    spec = load_agent_file(path, warnings=warnings)
    assert spec.name == "release-notes"
    assert spec.description == (
        "Use this agent when a release is cut. Examples:\n\n<example>\n"
        "Context: The user tagged v2.3.0.\n"
        'user: "Write the notes for v2.3.0"\n'
        'assistant: "I\'ll use the release-notes agent to draft them."\n'
        "<commentary>\nA tag was pushed: time for release notes.\n</commentary>\n</example>"
    )
    assert spec.model == "anthropic:claude-sonnet-4-5"
    assert spec.tools == ["read_file", "grep", "list_files"]
    assert spec.system_prompt == "You write release notes."
    assert warnings == []


def test_a_colon_inside_a_one_line_description(tmp_path: Path) -> None:
    path = write(
        tmp_path / ".claude/agents/gdpr.md",
        "---\nname: gdpr\ndescription: Reviews data handling. Triggers on: 'GDPR', 'consent'\n"
        'model: haiku\n---\nCheck "lawful basis" first.\n',
    )
    spec = load_agent_file(path, warnings=[])
    assert spec.description == "Reviews data handling. Triggers on: 'GDPR', 'consent'"
    assert spec.model == "anthropic:claude-haiku-4-5"


def test_each_field_is_read_on_its_own(tmp_path: Path) -> None:
    """A description YAML rejects spoils none of the fields around it."""
    claude = write(
        tmp_path / ".claude/agents/fixer.md",
        "---\nname: fixer\ndescription: Fixes things. Use for: lint errors\ntools:\n  - Read\n"
        "  - Edit\n  - WebFetch\ndisallowedTools: [Bash]\nmaxTurns: 7\n"
        "permissionMode: acceptEdits\n---\nFix it.\n",
    )
    warnings: list[str] = []
    spec = load_agent_file(claude, warnings=warnings)
    assert spec.description == "Fixes things. Use for: lint errors"
    assert spec.tools == ["read_file", "edit_file"] and spec.disallowed_tools == ["bash"]
    assert (spec.max_turns, spec.permission_mode) == (7, "accept_edits")
    assert warnings == [f"{claude}:4: tools: tool 'WebFetch' is not one of ours; dropped"]
    opencode = write(
        tmp_path / ".opencode/agent/docs.md",
        OPENCODE_DOCS.replace(
            "description: Writes and fixes documentation",
            "description: Writes docs. Note: never code",
        ),
    )
    spec = load_agent_file(opencode, warnings=[])
    assert spec.description == "Writes docs. Note: never code"
    assert spec == load_agent_file(
        write(tmp_path / ".opencode/agent/docs2.md", OPENCODE_DOCS), warnings=[]
    ).model_copy(update={"name": "docs", "description": "Writes docs. Note: never code"})


def test_block_scalars_quotes_and_rules_of_dashes(tmp_path: Path) -> None:
    # a block scalar whose lines are not indented, as some generators write them
    block = write(
        tmp_path / ".claude/agents/a.md",
        "---\nname: a\ndescription: |\nFirst line.\nContext: second line.\nmodel: opus\n---\n",
    )
    spec = load_agent_file(block, warnings=[])
    assert spec.description == "First line.\nContext: second line."
    assert spec.model == "anthropic:claude-opus-4-1"
    # quotes inside a quoted value, which YAML rejects
    quoted = write(
        tmp_path / ".claude/agents/b.md",
        '---\nname: b\ndescription: "Use when the user says "ship it""\n---\n',
    )
    assert load_agent_file(quoted).description == 'Use when the user says "ship it"'
    # front matter closed by a longer rule of dashes
    dashes = write(
        tmp_path / ".claude/agents/c.md",
        "---\n\nname: c\ndescription: d\n----------------\n\nPrompt.\n",
    )
    spec = load_agent_file(dashes)
    assert (spec.name, spec.description, spec.system_prompt) == ("c", "d", "Prompt.")


def test_namespaced_names_are_addressed_with_a_dot_or_as_written(tmp_path: Path) -> None:
    write(
        tmp_path / ".claude/agents/runner.md",
        "---\nname: acme:test-runner\ndescription: Runs the tests.\n---\nRun them.\n",
    )
    found = scan_agents(tmp_path)
    assert list(found.agents) == ["acme.test-runner"] and found.warnings == []
    agents = load_agents(tmp_path)
    assert resolve_agent("acme.test-runner", agents).system_prompt == "Run them."
    assert resolve_agent("acme:test-runner", agents) is agents["acme.test-runner"]
    with pytest.raises(InvalidRequest, match="unknown agent 'acme:other'"):
        resolve_agent("acme:other", agents)


def test_a_name_we_cannot_use_gives_way_to_the_file_name(tmp_path: Path) -> None:
    path = write(
        tmp_path / ".claude/agents/security-expert.md",
        "---\nname: Python Security Expert\ndescription: d\n---\n",
    )
    warnings: list[str] = []
    assert load_agent_file(path, warnings=warnings).name == "security-expert"
    assert warnings == [
        f"{path}:2: agent name 'Python Security Expert' is not valid (1-64 letters, digits, "
        "'.', '_' or '-', starting with a letter or digit); named 'security-expert' after "
        "the file"
    ]
    both_bad = write(tmp_path / ".claude/agents/a b.md", "---\nname: x y\ndescription: d\n---\n")
    with pytest.raises(InvalidRequest, match=r"a b\.md:2: agent name 'x y' is not valid"):
        load_agent_file(both_bad)


@pytest.mark.parametrize("mode", ["auto", "yolo", "ignore", "3"])
def test_unknown_permission_mode_warns_and_uses_default(tmp_path: Path, mode: str) -> None:
    path = write(
        tmp_path / ".claude/agents/a.md",
        f"---\nname: a\ndescription: d\ntools: Read, Edit\npermissionMode: {mode}\n---\n",
    )
    warnings: list[str] = []
    spec = load_agent_file(path, warnings=warnings)
    assert spec.permission_mode == "default" and spec.tools == ["read_file", "edit_file"]
    assert len(warnings) == 1 and warnings[0].startswith(f"{path}:5: permissionMode ")
    assert "using default" in warnings[0]


@pytest.mark.parametrize(
    "model",
    [
        "fable",
        "gemini-2.5-pro",
        "google/gemini-2.5-pro",
        "opencode/big-pickle",
        "[x]",
        # An endpoint is named in our colon form only: OpenCode's slash form names
        # OpenCode's own providers, which a worker's endpoints need not match.
        "ollama/llama3.1",
        "Ollama:llama3.1",
    ],
)
def test_a_model_no_worker_runs_warns_and_inherits(tmp_path: Path, model: str) -> None:
    path = write(
        tmp_path / ".claude/agents/a.md", f"---\nname: a\ndescription: d\nmodel: {model}\n---\n"
    )
    warnings: list[str] = []
    assert load_agent_file(path, warnings=warnings).model == "inherit"
    assert len(warnings) == 1 and warnings[0].startswith(f"{path}:4: model ")
    assert "the spawner's or the worker's model is used" in warnings[0]


def test_model_providers_are_the_workers() -> None:
    from durable_subagents.agents._file_formats import ENDPOINT_NAME
    from durable_subagents.providers import PROVIDERS
    from durable_subagents.providers._names import ENDPOINT_NAME as PROVIDERS_ENDPOINT_NAME

    assert MODEL_PROVIDERS == PROVIDERS
    assert ENDPOINT_NAME.pattern == PROVIDERS_ENDPOINT_NAME.pattern


def test_opencode_unknown_mode_is_ignored_with_a_warning(tmp_path: Path) -> None:
    path = write(tmp_path / ".opencode/agent/x.md", "---\ndescription: d\nmode: boss\n---\nGo.\n")
    warnings: list[str] = []
    assert load_agent_file(path, warnings=warnings).system_prompt == "Go."
    assert warnings == [f"{path}:3: mode 'boss' is not one of primary, subagent, all; ignored"]


# ---------------------------------------------------------------- a corpus of real files


def _corpus() -> Path | None:
    """The corpus of public agent files (tests/data/agent_corpus/SOURCES.md lists it).

    It lives beside the repository in ``shared/agent_corpus`` (or where
    ``SUBAGENTS_AGENT_CORPUS`` says, or in tests/data/agent_corpus): third-party files
    are kept out of this repository's history.
    """
    here = Path(__file__).resolve().parents[1]
    candidates = [
        os.environ.get("SUBAGENTS_AGENT_CORPUS"),
        here / "data/agent_corpus",
        here.parent.parent / "shared/agent_corpus",
    ]
    for candidate in candidates:
        if candidate and any(Path(candidate).glob("*__*/**/*.md")):
            return Path(candidate)
    return None


def test_public_agent_files_load() -> None:
    corpus = _corpus()
    if corpus is None:
        # In CI a failure (.ci/run finds the corpus beside the repository, or beside the
        # one a clone was made from): the corpus is third-party files kept out of this
        # repository's history.
        pytest.skip(
            missing(
                "the agent corpus: ../shared/agent_corpus beside the repository, or "
                "SUBAGENTS_AGENT_CORPUS (tests/data/agent_corpus/SOURCES.md lists it)"
            )
        )
    files = sorted(corpus.glob("*__*/**/*.md"))
    # the corpus is the one SOURCES.md lists, byte for byte
    sources = (Path(__file__).parents[1] / "data/agent_corpus/SOURCES.md").read_text()
    listed = dict(
        re.findall(r"^\| `([^`]+)` \| `[0-9a-f]+` \| `([0-9a-f]{16})` \|$", sources, re.M)
    )
    assert {str(p.relative_to(corpus)): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
            for p in files} == listed  # fmt: skip
    failed: dict[str, str] = {}
    for path in files:
        fmt = "opencode" if ".opencode" in path.parts else "claude"
        try:
            load_agent_file(path, format=fmt, warnings=[])
        except InvalidRequest as err:
            failed[str(path.relative_to(corpus))] = str(err)
    repos = {path.relative_to(corpus).parts[0] for path in files}
    loaded = 1 - len(failed) / len(files)
    print(f"{len(files) - len(failed)} of {len(files)} files from {len(repos)} repositories load")
    for name, error in failed.items():
        print(f"  {name}: {error}")
    assert len(files) >= 100 and len(repos) >= 8
    assert loaded >= 0.95, failed
    # what does fail is reported with its file and line
    for name, error in failed.items():
        assert re.match(rf"agent file {re.escape(str(corpus / name))}:\d+: ", error), error


# ---------------------------------------------------------------- broken files


@pytest.mark.parametrize(
    ("where", "text", "line", "problem"),
    [
        (".claude/agents/x.md", "no front matter here\n", 1, "has no front matter"),
        (".claude/agents/x.md", "", 1, "is empty"),
        (".claude/agents/x.md", b"---\nname: x\n\xff\xfe\x00\x01\n---\n", 3, "not UTF-8"),
        (".claude/agents/x.md", "---\nname: x\ndescription: d\n", 1, "never closes"),
        (".claude/agents/x.md", "---\n- a\n- b\n---\n", 2, "'- a' is not a 'key: value'"),
        (".claude/agents/x.md", "---\nname: x\n---\nbody\n", 1, "'description' is missing"),
        (".claude/agents/x.md", "---\nname: x\ndescription:\n---\n", 3, "'description' is missing"),
        (".claude/agents/x.md", "---\nname: x\ndescription: d\nmaxTurns: 0\n---\n", 4, "maxTurns"),
        (".claude/agents/x.md", "---\nname: x\ndescription: d\ntools: 3\n---\n", 4, "'tools' must"),
        (".opencode/agent/x.md", "---\nmodel: sonnet\ntools: [read]\n---\n", 3, "'tools' must map"),
        (".opencode/agent/x.md", "---\npermission:\n  bash: maybe\n---\n", 2, "is 'maybe'"),
    ],
)  # fmt: skip
def test_broken_file_names_file_and_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, where: str, text: str | bytes, line: int,
    problem: str,
) -> None:  # fmt: skip
    path = tmp_path / where
    path.parent.mkdir(parents=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(InvalidRequest) as err:
        load_agent_file(path)
    message = str(err.value)
    assert message.startswith(f"agent file {path}:{line}: ") and problem in message
    # in a project the file is skipped with one warning, and only its spawn fails
    write(tmp_path / ".claude/agents/good.md", "---\nname: good\ndescription: d\n---\nGo.\n")
    with caplog.at_level(logging.WARNING, logger="durable_subagents.agents._files"):
        agents = load_agents(tmp_path)
    assert [r.getMessage() for r in caplog.records] == [f"{message} (agent 'x' skipped)"]
    assert resolve_agent("good", agents).system_prompt == "Go."
    with pytest.raises(InvalidRequest) as spawn_err:
        resolve_agent("x", agents)
    assert str(spawn_err.value) == f"agent 'x' cannot be used: {message}"


def test_broken_file_keeps_the_name_it_gives(tmp_path: Path) -> None:
    """A broken file's agent is the one its ``name`` says, so a spawn of it fails."""
    write(
        tmp_path / ".claude/agents/a.md", "---\nname: explore\ndescription: d\nmaxTurns: no\n---\n"
    )
    write(tmp_path / ".claude/agents/b.md", "---\nname: reviewer\ndescription: d\ntools: 7\n---\n")
    write(tmp_path / ".opencode/agents/reviewer.md", "---\ndescription: the OpenCode one\n---\n")
    found = scan_agents(tmp_path)
    assert list(found.agents) == ["reviewer"] and list(found.broken) == ["explore"]
    assert len(found.warnings) == 2
    assert found.warnings[0].startswith(f"agent file {tmp_path / '.claude/agents/a.md'}:4: ")
    assert found.warnings[1].startswith(f"agent file {tmp_path / '.claude/agents/b.md'}:4: ")
    agents = load_agents(tmp_path, warnings=[])
    # the broken explore.md stands in front of the built-in: its spawn names the file
    with pytest.raises(InvalidRequest, match=r"a\.md:4: 'maxTurns' must be an integer"):
        resolve_agent("explore", agents)
    # a broken file does not take a name a good file has
    assert resolve_agent("reviewer", agents).description == "the OpenCode one"


def test_every_invalid_field_of_a_file_is_reported(tmp_path: Path) -> None:
    path = write(
        tmp_path / ".claude/agents/bad.md",
        "---\nname: bad\ndescription: d\npermissionMode: yolo\nmaxTurns: lots\ntools: 3\n"
        "network: maybe\n---\n",
    )
    found = scan_agents(tmp_path)
    assert found.warnings == [
        f"{path}:4: permissionMode 'yolo' is not one we know (default, acceptEdits, plan, "
        "dontAsk, bypassPermissions); using default (edits and commands ask first)",
        f"agent file {path}:5: 'maxTurns' must be an integer >= 1, got 'lots'; line 6: 'tools' "
        "must be a comma-separated string or a list of tool names, got 3; line 7: 'network' "
        "must be true or false, got 'maybe' (agent 'bad' skipped)",
    ]
    warnings: list[str] = []
    with pytest.raises(InvalidRequest) as err:
        load_agent_file(path, warnings=warnings)
    assert str(err.value) == found.warnings[1].removesuffix(" (agent 'bad' skipped)")
    assert warnings == found.warnings[:1]


def test_readme_in_an_agents_directory_is_not_an_agent(tmp_path: Path) -> None:
    write(tmp_path / ".claude/agents/README.md", "# Our agents\n\nSee each file.\n")
    write(tmp_path / ".claude/agents/good.md", "---\nname: good\ndescription: d\n---\n")
    found = scan_agents(tmp_path)
    assert list(found.agents) == ["good"] and found.warnings == [] and found.broken == {}


def test_missing_agents_dir_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="does not exist"):
        load_agents(tmp_path / "nope")


# ---------------------------------------------------------------- loading a project


def test_load_agents_scans_both_layouts_later_overrides(tmp_path: Path) -> None:
    write(tmp_path / ".claude/agents/reviewer.md", CLAUDE_REVIEWER)
    write(tmp_path / ".claude/agents/explore.md", "---\nname: explore\ndescription: mine\n---\n")
    write(tmp_path / ".claude/agents/notes.txt", "not an agent")
    write(tmp_path / ".opencode/agent/docs.md", OPENCODE_DOCS)
    write(tmp_path / ".opencode/agents/reviewer.md", "---\ndescription: the OpenCode one\n---\n")
    write(tmp_path / ".opencode/agents/off.md", "---\ndescription: unused\ndisable: true\n---\n")
    found = scan_agents(tmp_path)
    assert list(found.agents) == ["explore", "reviewer", "docs"]
    assert found.agents["reviewer"].description == "the OpenCode one"
    assert found.sources["reviewer"] == tmp_path / ".opencode/agents/reviewer.md"
    assert any("overrides" in w and "reviewer" in w for w in found.warnings)
    # given an agents directory itself, its project is read
    assert list(scan_agents(tmp_path / ".claude/agents").agents) == list(found.agents)
    # shadowing a built-in is allowed: the project's agent wins
    agents = load_agents(tmp_path, warnings=[])
    assert resolve_agent("explore", agents).description == "mine"
    assert resolve_agent("plan", agents).name == "plan"


def test_discovery_walks_up_to_the_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    write(project / ".claude/agents/reviewer.md", CLAUDE_REVIEWER)
    write(project / "README.md", "# not an agent\n")
    deep = project / "src/pkg/sub"
    deep.mkdir(parents=True)
    assert find_project_root(deep) == project
    assert list(discover_agents(deep, warnings=[])) == ["reviewer"]
    monkeypatch.chdir(deep)
    assert list(discover_agents()) == ["reviewer"]
    # the nearest marker wins: a nested repository has its own agents (here none)
    (deep / ".git").mkdir()
    write(deep / "NOTES.md", "# not an agent either\n")
    assert find_project_root(deep) == deep and discover_agents(deep) == {}


def test_a_planted_agent_below_the_root_shadows_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model that can write files plants a bash, dontAsk ``explore`` in ``src/``."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    write(project / ".claude/agents/reviewer.md", CLAUDE_REVIEWER)
    write(project / "src/.claude/agents/explore.md", PLANTED_EXPLORE)
    write(project / "src/.opencode/agent/helper.md", OPENCODE_DOCS)
    src = project / "src"
    assert find_project_root(src) == project
    warnings: list[str] = []
    agents = discover_agents(src, warnings=warnings)
    monkeypatch.chdir(src)
    assert discover_agents(warnings=[]) == agents
    assert list(agents) == ["reviewer"]
    assert resolve_agent("explore", agents) is BUILTIN_AGENTS["explore"]
    # read, the planted file would have warned that it replaces the built-in
    assert warnings == []
    # a root's own .claude, though, may replace a built-in (and says so)
    write(project / ".claude/agents/explore.md", PLANTED_EXPLORE)
    agents = discover_agents(src, warnings=warnings)
    assert resolve_agent("explore", agents).permission_mode == "dont_ask"
    assert len(warnings) == 1 and "replaces the built-in 'explore'" in warnings[0]
    assert str(project / ".claude/agents/explore.md") in warnings[0]


def test_a_worktree_git_file_marks_the_root(tmp_path: Path) -> None:
    worktree = tmp_path / "wt"
    write(worktree / ".git", f"gitdir: {tmp_path / 'main/.git/worktrees/wt'}\n")
    write(worktree / ".claude/agents/reviewer.md", CLAUDE_REVIEWER)
    write(worktree / "src/pkg/.claude/agents/explore.md", PLANTED_EXPLORE)
    assert find_project_root(worktree / "src/pkg") == worktree
    assert list(discover_agents(worktree / "src/pkg", warnings=[])) == ["reviewer"]


def test_without_a_repository_only_the_start_directory_is_read(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    write(outer / ".claude/agents/reviewer.md", CLAUDE_REVIEWER)
    (outer / "inner").mkdir()
    assert not any((d / ".git").exists() for d in (tmp_path, *tmp_path.parents))
    assert find_project_root(outer) == outer
    assert list(discover_agents(outer, warnings=[])) == ["reviewer"]
    # from a directory below, no directory in between is walked up to
    assert find_project_root(outer / "inner") == outer / "inner"
    assert discover_agents(outer / "inner", warnings=[]) == {}
    assert discover_agents(outer / "gone", warnings=[]) == {}


def test_subagents_agents_dir_names_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUBAGENTS_AGENTS_DIR", str(tmp_path))
    assert Settings().agents_dir == tmp_path
    monkeypatch.setenv("SUBAGENTS_AGENTS_DIR", " ")
    assert Settings().agents_dir is None  # blank is unset, not the current directory
    monkeypatch.delenv("SUBAGENTS_AGENTS_DIR")
    assert Settings().agents_dir is None


def test_sandbox_fields_in_front_matter(tmp_path: Path) -> None:
    path = write(
        tmp_path / ".claude/agents/fetcher.md",
        "---\nname: fetcher\ndescription: Fetches docs.\nnetwork: true\n"
        "env: [PIP_INDEX_URL, HTTPS_PROXY]\nlimits: {memory_mb: 512, processes: 32}\n---\nGo.\n",
    )
    warnings: list[str] = []
    spec = load_agent_file(path, warnings=warnings)
    assert spec.network is True
    assert spec.env == ["PIP_INDEX_URL", "HTTPS_PROXY"]
    assert (spec.limits.memory_mb, spec.limits.processes, spec.limits.cpu_seconds) == (
        512,
        32,
        None,
    )
    assert warnings == []
    bad = write(
        tmp_path / ".claude/agents/bad.md",
        "---\nname: bad\ndescription: x\nlimits: {memory_mb: 1}\n---\nGo.\n",
    )
    with pytest.raises(InvalidRequest, match=r"invalid 'limits'.*memory_mb"):
        load_agent_file(bad)
    also_bad = write(
        tmp_path / ".opencode/agent/net.md", "---\ndescription: x\nnetwork: sometimes\n---\nGo.\n"
    )
    with pytest.raises(InvalidRequest, match=r"'network' must be true or false"):
        load_agent_file(also_bad)
