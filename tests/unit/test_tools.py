"""The @tool decorator, the built-in tools, the workspace jail and the process sandbox."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from durable_subagents.errors import InvalidRequest
from durable_subagents.tools import (
    BUILTIN_TOOLS,
    Tool,
    ToolContext,
    ToolError,
    ToolRegistry,
    bash,
    edit_file,
    grep,
    list_files,
    read_file,
    tool,
    write_file,
)

from ..helpers.tasks import give_to_tool_user


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return give_to_tool_user(root)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("TOP SECRET\n")
    return out


def context(root: Path, sandbox: str = "auto", **kwargs: Any) -> ToolContext:
    return ToolContext(workspace=root, task_id="task-1", sandbox=sandbox, **kwargs)


# ---------------------------------------------------------------- the decorator


@tool
async def sample(ctx: ToolContext, path: str, count: int = 3, tags: list[str] | None = None) -> str:
    """Do a sample thing.

    More detail for the model,
    over two lines.

    Args:
        ctx: Injected.
        path: Where to look,
            relative to the root.
        count (int): How many.
        tags: Optional labels.

    Returns:
        Something.
    """
    return f"{ctx.task_id}:{path}:{count}:{tags}"


def test_schema_from_signature_and_docstring() -> None:
    assert sample.name == "sample"
    assert sample.description == "Do a sample thing.\n\nMore detail for the model, over two lines."
    assert sample.read_only is False
    assert sample.parameters == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "path": {"type": "string", "description": "Where to look, relative to the root."},
            "count": {"type": "integer", "default": 3, "description": "How many."},
            "tags": {
                "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                "default": None,
                "description": "Optional labels.",
            },
        },
        "required": ["path"],
    }
    assert "title" not in json.dumps(sample.parameters)
    spec = sample.spec
    assert (spec.name, spec.description, spec.parameters) == (
        "sample",
        sample.description,
        sample.parameters,
    )


def test_description_keeps_lists_and_code() -> None:
    @tool
    def documented() -> str:
        """Summary line.

        A paragraph
        wrapped.

        - item one
        - item two
          continued
        ```
        code line
        another
        ```
        """
        return ""

    assert documented.description == (
        "Summary line.\n\nA paragraph wrapped.\n\n- item one\n- item two\n  continued\n"
        "```\ncode line\nanother\n```"
    )


def test_decorator_options_and_sync_functions() -> None:
    @tool(name="shout", description="Upper-case text.", read_only=True)
    def loud(text: str) -> str:
        return text.upper()

    assert isinstance(loud, Tool)
    assert (loud.name, loud.description, loud.read_only) == ("shout", "Upper-case text.", True)
    assert loud.parameters["required"] == ["text"]
    assert loud("hi") == "HI"

    with pytest.raises(TypeError, match=r"plain named parameter"):

        @tool
        def bad(*args: str) -> str:
            return ""


async def test_parameter_names_that_clash_with_pydantic(ws: Path) -> None:
    @tool
    def clash(json: str, model_config: int = 1) -> str:
        """Echo."""
        return f"{json}{model_config}"

    assert list(clash.parameters["properties"]) == ["json", "model_config"]
    assert await clash.run(context(ws), {"json": "a", "model_config": 2}) == "a2"


async def test_run_validates_and_injects_context(ws: Path) -> None:
    ctx = context(ws)
    assert await sample.run(ctx, {"path": "a", "count": "5"}) == "task-1:a:5:None"

    @tool
    def structured(n: int) -> dict[str, int]:
        """Return a mapping."""
        return {"n": n}

    assert json.loads(await structured.run(ctx, {"n": 2})) == {"n": 2}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "sample: argument 'path' is required"),
        ({"path": "a", "nope": 1}, "sample: unknown argument 'nope'; expected: path, count, tags"),
        ({"path": "a", "count": "many"}, "sample: argument 'count' is invalid: Input should be"),
        ({"path": 3}, "sample: argument 'path' is invalid"),
        (["a"], "sample: arguments must be a JSON object"),
    ],
)
async def test_argument_errors(ws: Path, arguments: Any, message: str) -> None:
    with pytest.raises(ToolError) as err:
        await sample.run(context(ws), arguments)
    assert str(err.value).startswith(message)


async def test_read_file_missing_path_message(ws: Path) -> None:
    with pytest.raises(ToolError, match=r"^read_file: argument 'path' is required$"):
        await read_file.run(context(ws), {})


# ---------------------------------------------------------------- file tools


async def test_read_file(ws: Path) -> None:
    (ws / "a.txt").write_text("one\ntwo\r\nthree\n")
    ctx = context(ws)
    assert await read_file.run(ctx, {"path": "a.txt"}) == "     1\tone\n     2\ttwo\n     3\tthree"
    out = await read_file.run(ctx, {"path": "a.txt", "offset": 1, "limit": 1})
    assert out.splitlines() == [
        "     2\ttwo",
        "[... truncated: showing lines 2-2 of 3; continue with offset=2 ...]",
    ]
    assert await read_file.run(ctx, {"path": str(ws / "a.txt"), "offset": 2}) == "     3\tthree"
    with pytest.raises(ToolError, match=r"offset 5 is past the end; 'a.txt' has 3 lines"):
        await read_file.run(ctx, {"path": "a.txt", "offset": 5})
    (ws / "empty.txt").write_text("")
    assert await read_file.run(ctx, {"path": "empty.txt"}) == "[empty file]"


async def test_read_file_refusals_and_caps(ws: Path) -> None:
    ctx = context(ws)
    (ws / "blob.bin").write_bytes(b"\x89PNG\0\0\x01")
    with pytest.raises(ToolError, match=r"'blob.bin' is a binary file"):
        await read_file.run(ctx, {"path": "blob.bin"})
    with pytest.raises(ToolError, match=r"file not found: 'nope.txt'"):
        await read_file.run(ctx, {"path": "nope.txt"})
    (ws / "d").mkdir()
    with pytest.raises(ToolError, match=r"'d' is a directory; use list_files"):
        await read_file.run(ctx, {"path": "d"})
    (ws / "wide.txt").write_text("x" * 5000 + "\n")
    assert "[... line cut: 3000 more characters]" in await read_file.run(ctx, {"path": "wide.txt"})
    (ws / "big.txt").write_text(("y" * 1000 + "\n") * 1000)
    out = await read_file.run(ctx, {"path": "big.txt"})
    assert len(out) <= 256_000 + 200
    assert out.splitlines()[-1].startswith("[... truncated: showing lines 1-")
    assert "of 1000; continue with offset=" in out.splitlines()[-1]


async def test_list_files(ws: Path, outside: Path) -> None:
    for name in ["b.py", "a.md", "src/x.py", "src/deep/y.ts", "src/deep/z.tsx", ".git/HEAD"]:
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text("x\n")
    (ws / "out_link.txt").symlink_to(outside / "secret.txt")
    (ws / "out_dir").symlink_to(outside)
    (ws / "in_link.md").symlink_to(ws / "a.md")
    ctx = context(ws)
    assert (await list_files.run(ctx, {})).splitlines() == [
        "a.md",
        "b.py",
        "in_link.md",
        "src/deep/y.ts",
        "src/deep/z.tsx",
        "src/x.py",
    ]
    assert await list_files.run(ctx, {"pattern": "*.py"}) == "b.py"
    assert (await list_files.run(ctx, {"pattern": "**/*.py"})).splitlines() == ["b.py", "src/x.py"]
    assert (
        await list_files.run(ctx, {"pattern": "**/*.{ts,tsx}", "path": "src"})
    ).splitlines() == [
        "src/deep/y.ts",
        "src/deep/z.tsx",
    ]
    assert "no files match" in await list_files.run(ctx, {"pattern": "*.rs"})


async def test_list_files_cap(ws: Path) -> None:
    for i in range(1005):
        (ws / f"f{i:04}.txt").write_text("")
    lines = (await list_files.run(context(ws), {})).splitlines()
    assert len(lines) == 1001
    assert lines[-1] == "[... 5 more files not shown; use a narrower pattern or path ...]"


async def test_grep(ws: Path, outside: Path) -> None:
    (ws / "a.py").write_text("import os\nprint('Hello')\n")
    (ws / "sub").mkdir()
    (ws / "sub" / "b.txt").write_text("hello world\nbye\n")
    (ws / "bin.dat").write_bytes(b"hello\0")
    (ws / "leak.txt").symlink_to(outside / "secret.txt")
    (ws / "leakdir").symlink_to(outside)
    ctx = context(ws)
    assert await grep.run(ctx, {"pattern": "hello"}) == "sub/b.txt:1: hello world"
    assert (await grep.run(ctx, {"pattern": "hello", "ignore_case": True})).splitlines() == [
        "a.py:2: print('Hello')",
        "sub/b.txt:1: hello world",
    ]
    assert (
        await grep.run(ctx, {"pattern": "o", "glob": "*.py"})
        == "a.py:1: import os\na.py:2: print('Hello')"
    )
    assert await grep.run(ctx, {"pattern": "bye", "path": "sub/b.txt"}) == "sub/b.txt:2: bye"
    assert "no matches" in await grep.run(ctx, {"pattern": "SECRET"})
    with pytest.raises(ToolError, match=r"grep: invalid regular expression '\(oops'"):
        await grep.run(ctx, {"pattern": "(oops"})


async def test_grep_cap(ws: Path) -> None:
    (ws / "many.txt").write_text("match\n" * 600)
    lines = (await grep.run(context(ws), {"pattern": "match"})).splitlines()
    assert len(lines) == 501
    assert lines[-1].startswith("[... stopped after 500 matches")


async def test_write_and_edit(ws: Path) -> None:
    ctx = context(ws)
    assert await write_file.run(ctx, {"path": "new/dir/f.txt", "content": "héllo\n"}) == (
        "wrote 7 bytes to new/dir/f.txt"
    )
    assert (ws / "new/dir/f.txt").read_text() == "héllo\n"
    (ws / "e.txt").write_bytes(b"a = 1\r\nb = 1\r\n")
    assert await edit_file.run(ctx, {"path": "e.txt", "old": "a = 1", "new": "a = 2"}) == (
        "replaced 1 occurrence in e.txt"
    )
    assert (ws / "e.txt").read_bytes() == b"a = 2\r\nb = 1\r\n"
    with pytest.raises(ToolError, match=r"occurs 2 times in 'e.txt'.*replace_all"):
        await edit_file.run(ctx, {"path": "e.txt", "old": " = ", "new": "="})
    with pytest.raises(ToolError, match=r"old text not found in 'e.txt'"):
        await edit_file.run(ctx, {"path": "e.txt", "old": "zzz", "new": "y"})
    out = await edit_file.run(ctx, {"path": "e.txt", "old": " = ", "new": "=", "replace_all": True})
    assert out == "replaced 2 occurrences in e.txt"
    assert (ws / "e.txt").read_bytes() == b"a=2\r\nb=1\r\n"


JAIL_CALLS = [
    (read_file, {}),
    (write_file, {"content": "pwned"}),
    (edit_file, {"old": "TOP", "new": "pwned"}),
    (list_files, {}),
    (grep, {"pattern": "SECRET"}),
]


@pytest.mark.parametrize(("t", "extra"), JAIL_CALLS, ids=lambda v: getattr(v, "name", ""))
@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink_file", "symlink_dir"])
async def test_jail_refusals(
    ws: Path, outside: Path, t: Tool, extra: dict[str, Any], how: str
) -> None:
    (ws / "file_link").symlink_to(outside / "secret.txt")
    (ws / "dir_link").symlink_to(outside)
    target = {
        "dotdot": "../outside/secret.txt",
        "absolute": str(outside / "secret.txt"),
        "symlink_file": "file_link",
        "symlink_dir": "dir_link/secret.txt",
    }[how]
    if t in (list_files, grep) and how != "symlink_file":
        target = str(Path(target).parent)
    with pytest.raises(ToolError) as err:
        await t.run(context(ws), {"path": target, **extra})
    message = str(err.value)
    assert f"'{target}'" in message and str(ws) in message
    assert ("symlink" in message) == how.startswith("symlink")
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"


async def test_writing_through_symlinks_is_refused(ws: Path, outside: Path) -> None:
    (ws / "dir_link").symlink_to(outside)
    (ws / "dangling").symlink_to(outside / "created.txt")
    ctx = context(ws)
    for path in ["dir_link/new.txt", "dir_link/sub/new.txt", "dangling"]:
        with pytest.raises(ToolError, match=r"through a symlink"):
            await write_file.run(ctx, {"path": path, "content": "x"})
    assert sorted(os.listdir(outside)) == ["secret.txt"]


async def test_paths_inside_the_root_are_fine(ws: Path) -> None:
    (ws / "real").mkdir()
    (ws / "link").symlink_to(ws / "real")
    ctx = context(ws)
    await write_file.run(ctx, {"path": str(ws / "link" / "f.txt"), "content": "ok\n"})
    assert await read_file.run(ctx, {"path": "real/../real/f.txt"}) == "     1\tok"


# ---------------------------------------------------------------- ignored paths


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


PACKAGE = {
    "pkg/a.py": "def one():\n    pass\ndef two():\n    pass\n",
    "pkg/sub/b.py": "def three():\n    pass\n",
    "dist/c.py": "def four():\n    pass\n",  # not a cache: skipped only when gitignored
    "Lib/venv/__init__.py": "def five():\n    pass\n",  # a package named venv, no pyvenv.cfg
}
IGNORED = {
    ".gitignore": "build/\n*.log\n",
    "build/gen.py": "def built():\n",
    "debug.log": "def logged():\n",
    "pkg/__pycache__/a.py": "def cached():\n",
    "pkg/.mypy_cache/x.py": "def typed():\n",
    "pkg.egg-info/SOURCES.py": "def egg():\n",
    "node_modules/left-pad/index.py": "def pad():\n",
    "env312/pyvenv.cfg": "home = /usr/bin\n",  # a virtualenv by another name
    "env312/lib/site.py": "def env():\n",
    ".venv/lib/site-packages/big.py": "def v():\n" * 600,
}


async def test_searches_skip_ignored_paths_and_caches_unless_asked(ws: Path) -> None:
    write_tree(ws, {**PACKAGE, **IGNORED})
    ctx = context(ws)
    assert (await grep.run(ctx, {"pattern": "def "})).splitlines() == [
        "Lib/venv/__init__.py:1: def five():",
        "dist/c.py:1: def four():",
        "pkg/a.py:1: def one():",
        "pkg/a.py:3: def two():",
        "pkg/sub/b.py:1: def three():",
    ]
    assert (await list_files.run(ctx, {})).splitlines() == [".gitignore", *sorted(PACKAGE)]
    assert await grep.run(ctx, {"pattern": "def v"}) == (
        "no matches for 'def v' under '.' (8 ignored paths skipped: debug.log, .venv, build, "
        "...; set include_ignored=true, or give one as path, to search them)"
    )

    everything = await grep.run(ctx, {"pattern": "def [a-z]+\\(", "include_ignored": True})
    assert everything.splitlines()[-1].startswith("[... stopped after 500 matches")
    assert ".venv/lib/site-packages/big.py:1: def v():" in everything
    listed = (await list_files.run(ctx, {"include_ignored": True})).splitlines()
    assert listed == sorted([*PACKAGE, *IGNORED])
    found = await grep.run(ctx, {"pattern": "def [^v]", "include_ignored": True})
    assert len(found.splitlines()) == len(PACKAGE) + 1 + len(IGNORED) - 3


async def test_nested_ignore_files_negations_and_git_exclude(ws: Path) -> None:
    write_tree(
        ws,
        {
            ".git/info/exclude": "secret_local.py\n*.tmp\n",
            ".git/HEAD": "ref: refs/heads/main\n",
            ".gitignore": "*.gen.py\n/only_top.txt\n!keep.tmp\n",
            ".ignore": "notes/\n",
            ".rgignore": "!b.gen.py\n",  # the later file wins in its directory
            "a.gen.py": "",
            "b.gen.py": "",
            "only_top.txt": "",
            "keep.tmp": "",
            "x.tmp": "",
            "secret_local.py": "",
            "notes/n.txt": "",
            "local/z.py": "",
            "other/keep.gen.py": "",
            "sub/.gitignore": "!keep.gen.py\nlocal/\n/here.txt\n",
            "sub/only_top.txt": "",
            "sub/x.gen.py": "",
            "sub/keep.gen.py": "",
            "sub/local/y.py": "",
            "sub/here.txt": "",
            "sub/secret_local.py": "",
            "sub/deeper/here.txt": "",
            "sub/deeper/keep.gen.py": "",
        },
    )
    ctx = context(ws)
    assert (await list_files.run(ctx, {})).splitlines() == [
        ".gitignore",
        ".ignore",
        ".rgignore",
        "b.gen.py",
        "keep.tmp",
        "local/z.py",
        "sub/.gitignore",
        "sub/deeper/here.txt",
        "sub/deeper/keep.gen.py",
        "sub/keep.gen.py",
        "sub/only_top.txt",
    ]
    # A search below the root still applies the root's rules, and its own directory's.
    assert (await list_files.run(ctx, {"path": "sub"})).splitlines() == [
        "sub/.gitignore",
        "sub/deeper/here.txt",
        "sub/deeper/keep.gen.py",
        "sub/keep.gen.py",
        "sub/only_top.txt",
    ]
    assert (await list_files.run(ctx, {"pattern": "**/*.gen.py", "include_ignored": True})) == (
        "a.gen.py\nb.gen.py\nother/keep.gen.py\nsub/deeper/keep.gen.py\nsub/keep.gen.py\n"
        "sub/x.gen.py"
    )


async def test_a_path_the_model_names_is_searched_even_when_ignored(ws: Path) -> None:
    write_tree(
        ws,
        {
            ".gitignore": "build/\nlogs/\n",
            ".venv/.gitignore": "*\n",  # what uv and virtualenv write
            ".venv/pyvenv.cfg": "home = /usr/bin\n",
            ".venv/lib/site.py": "def v():\n",
            "node_modules/left-pad/index.js": "function pad() {}\n",
            "node_modules/left-pad/node_modules/dep/x.js": "function dep() {}\n",
            "build/out.py": "def built():\n",
            "logs/2024/today.txt": "def logged():\n",
            "tmp/.gitignore": "*\n!.gitignore\n",
            "tmp/x.txt": "def tmp():\n",
        },
    )
    ctx = context(ws)
    for path in [".venv", ".venv/lib", ".venv/lib/site.py", str(ws / ".venv")]:
        assert await grep.run(ctx, {"pattern": "def", "path": path}) == (
            ".venv/lib/site.py:1: def v():"
        )
    assert await read_file.run(ctx, {"path": ".venv/lib/site.py"}) == "     1\tdef v():"
    assert (await list_files.run(ctx, {"path": "node_modules"})).splitlines() == [
        "node_modules/left-pad/index.js",
        "node_modules/left-pad/node_modules/dep/x.js",
    ]
    assert (
        await grep.run(ctx, {"pattern": "def", "path": "build"}) == "build/out.py:1: def built():"
    )
    assert await grep.run(ctx, {"pattern": "def", "path": "logs/2024"}) == (
        "logs/2024/today.txt:1: def logged():"
    )
    # Naming a directory undoes the rules that ignore it, not the directory's own.
    assert (await grep.run(ctx, {"pattern": "def", "path": "tmp"})).startswith(
        "no matches for 'def' under 'tmp' (1 ignored path skipped: tmp/x.txt;"
    )
    assert await grep.run(ctx, {"pattern": "def", "path": "tmp", "include_ignored": True}) == (
        "tmp/x.txt:1: def tmp():"
    )


async def test_ignore_files_are_never_followed_out_of_the_workspace(
    ws: Path, outside: Path
) -> None:
    (outside / "ignore_all").write_text("*\n")
    (outside / "gitdir" / "info").mkdir(parents=True)
    (outside / "gitdir" / "info" / "exclude").write_text("*\n")
    write_tree(ws, {"a.py": "def a():\n", "real_ignore": "*\n", "sub/b.py": "def b():\n"})
    (ws / ".gitignore").symlink_to(outside / "ignore_all")
    (ws / ".ignore").symlink_to(ws / "real_ignore")  # git reads no symlink, inside or out
    (ws / ".git").symlink_to(outside / "gitdir")
    os.mkfifo(ws / ".rgignore")  # opened without blocking, then passed over
    (ws / "sub" / ".gitignore").mkdir()
    ctx = context(ws)
    start = time.monotonic()
    assert await grep.run(ctx, {"pattern": "def"}) == "a.py:1: def a():\nsub/b.py:1: def b():"
    assert "a.py" in (await list_files.run(ctx, {"path": "sub/.."})).splitlines()
    assert time.monotonic() - start < 5
    assert (outside / "ignore_all").read_text() == "*\n"


async def test_ignore_rules_cannot_unhide_git_worker_data_or_links_out(
    ws: Path, outside: Path
) -> None:
    write_tree(
        ws,
        {
            ".gitignore": f"!.git/\n!.store/\n!**\n!/**/.git\n../outside\n{outside}\n!*\n",
            ".git/config": "TOP SECRET\n",
            ".store/blob": "TOP SECRET\n",
            "a.py": "visible = 1\n",
            "sub/.gitignore": "*\n",
            "sub/b.py": "visible = 2\n",
        },
    )
    (ws / "leak.txt").symlink_to(outside / "secret.txt")
    (ws / "leakdir").symlink_to(outside)
    # The worker's data may be a file that happens to sit where an ignore file would.
    ctx = context(ws, hidden=(ws / ".store", ws / "sub" / ".gitignore"))
    for extra in ({}, {"include_ignored": True}):
        assert await grep.run(ctx, {"pattern": "SECRET|visible", **extra}) == (
            "a.py:1: visible = 1\nsub/b.py:1: visible = 2"
        )
        assert (await list_files.run(ctx, extra)).splitlines() == [
            ".gitignore",
            "a.py",
            "sub/.gitignore",
            "sub/b.py",
        ]


# ---------------------------------------------------------------- registry


def test_registry() -> None:
    assert list(BUILTIN_TOOLS) == [
        "read_file",
        "list_files",
        "grep",
        "write_file",
        "edit_file",
        "bash",
    ]
    read_only = {name for name, t in BUILTIN_TOOLS.items() if t.read_only}
    assert read_only == {"read_file", "list_files", "grep"}
    registry = ToolRegistry()
    assert registry.names == list(BUILTIN_TOOLS)
    assert registry.get("bash") is bash and registry.get("nope") is None
    registry.register(sample)
    assert [s.name for s in registry.specs(["sample", "read_file"])] == ["sample", "read_file"]
    assert "sample" in registry and len(registry) == 7
    with pytest.raises(ValueError, match=r"already registered"):
        registry.register(tool(name="bash")(lambda: "x"))
    with pytest.raises(InvalidRequest, match=r"unknown tool 'nope'; known: read_file"):
        registry.specs(["nope"])
    empty = ToolRegistry([])
    assert empty.names == [] and empty.specs() == []
    assert ToolRegistry(dict(BUILTIN_TOOLS)).names == list(BUILTIN_TOOLS)


# ---------------------------------------------------------------- pathological input


async def test_file_tools_refuse_fifos_instead_of_blocking(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    ctx = context(ws)
    start = time.monotonic()
    with pytest.raises(ToolError, match=r"not a regular file"):
        await read_file.run(ctx, {"path": "pipe"})
    with pytest.raises(ToolError, match=r"symlink or a FIFO|not a regular file"):
        await write_file.run(ctx, {"path": "pipe", "content": "x"})
    (ws / "a.txt").write_text("needle\n")
    assert await grep.run(ctx, {"pattern": "needle"}) == "a.txt:1: needle"
    assert time.monotonic() - start < 5


async def test_catastrophic_patterns_run_in_linear_time(ws: Path) -> None:
    for i in range(20):
        (ws / f"f{i}.py").write_text(("word " * 2000 + "\n") * 20)
    ctx = context(ws)
    start = time.monotonic()
    assert (await grep.run(ctx, {"pattern": r"(\w+)+\x00"})).startswith("no matches")
    deep = "/".join(["**"] * 30) + "/*.py"
    listing = await list_files.run(ctx, {"pattern": deep})
    assert "f0.py" in listing
    assert time.monotonic() - start < 10
    with pytest.raises(ToolError, match=r"RE2 syntax"):
        await grep.run(ctx, {"pattern": r"(a)\1"})


async def test_undecodable_names_and_huge_lines_do_not_fail_the_tools(ws: Path) -> None:
    (ws / os.fsdecode(b"caf\xe9.txt")).write_text("needle\n")
    (ws / "ok.txt").write_text("needle\n")
    ctx = context(ws)
    found = await grep.run(ctx, {"pattern": "needle"})
    assert "ok.txt:1: needle" in found and "caf\ufffd.txt:1: needle" in found
    assert "caf\ufffd.txt" in await list_files.run(ctx, {})
    with (ws / "one-line.txt").open("w") as f:
        for _ in range(50):
            f.write("y" * 1_000_000)
        f.write("\nsecond\n")
    out = await read_file.run(ctx, {"path": "one-line.txt"})
    assert "[... line cut: 49998000 more characters]" in out
    assert out.endswith("second")


def test_a_worker_may_allow_more_than_the_default_limits(ws: Path) -> None:
    from durable_subagents.agents import ToolLimits
    from durable_subagents.agents._spec import DEFAULT_LIMITS

    raised = ToolLimits(memory_mb=8192, processes=1024)
    limits = context(ws, limits=raised).profile().effective_limits()
    assert (limits.memory_mb, limits.processes) == (8192, 1024)
    assert limits.file_size_mb == DEFAULT_LIMITS.file_size_mb  # unset: the default
