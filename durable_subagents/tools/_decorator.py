"""The ``@tool`` decorator: a Python function becomes a tool a model can call.

The JSON schema comes from the signature (through pydantic) and the per-argument
descriptions from the Google-style ``Args:`` section of the docstring, so a tool is
documented once, in the place a Python reader looks too.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import re
import sys
import threading
import time
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from durable_subagents.agents._spec import PROTECTED_PATHS, ToolLimits
from durable_subagents.policy import PathRules
from durable_subagents.tools._limits import Share
from durable_subagents.tools._sandbox_profile import SandboxProfile
from durable_subagents.types import ToolSpec

__all__ = ["DecidedPath", "Tool", "ToolContext", "ToolError", "tool"]


class ToolError(Exception):
    """An error the model should see as the tool's result, not a crash.

    Raise it for anything the model can act on: a missing file, an ambiguous edit,
    a command that timed out. The message is what the model reads, so say what was
    wrong and what to do instead.
    """


@dataclass(frozen=True)
class DecidedPath:
    """The path a call's permission decision saw: the file tools run only where it leads.

    Attributes:
        path: The call's path argument as given (or its default).
        resolved: Where it led when the call was judged (and shown to any approver):
            symlinks followed, relative to the workspace, ``.`` for the root (absolute
            when it did not resolve inside the workspace).
    """

    path: str
    resolved: str


@dataclass
class ToolContext:
    """What a tool knows about the call it serves; injected, never chosen by the model.

    Attributes:
        workspace: The root the file tools are jailed to (resolved on creation).
        task_id: The id of the task the call belongs to.
        sandbox: How commands are isolated: ``auto`` or ``bwrap`` (the sandbox), or
            ``none`` (on the host; see ``detect_sandbox``).
        on_output: Called whenever a long-running tool makes progress, so the caller
            can heartbeat; optional.
        network: Whether commands may use the network.
        env: The environment commands get (an allowlist, never the worker's own).
        limits: Resource limits of each command.
        protected: Workspace entries commands see read-only (empty: opted in to writes).
        hidden: Host paths no tool may read (the blob store, data and config directories).
        read_paths: Extra host paths commands see read-only.
        run_as: The uid and gid commands and the file tools' processes run as (a root
            worker's tool user; see ``tool_user``), the file tools with no
            supplementary groups; None: the worker's own. Only a root worker can
            switch.
        time_limit: Seconds a call of a sync tool may run; then it is stopped (its
            thread is told to stop, or its process killed, and the model gets a tool
            error).
        decided: The path the call was judged on: opening the call's path anywhere
            else is refused (see ``open_in_workspace``). None: not known.
        rules: The permission rules that judged the call: what the file tools open
            beyond the decided path is judged by them too. None: not known.
        workspace_fd: A descriptor of the workspace, held from the check of the task's
            step to its end: the file tools walk from it and commands' changes land
            through it, so the workspace's path is never resolved again. None: the
            path is opened when needed (a context made by hand).
        overlay_dir: Where commands' overlays are made (None: the data directory's).
        hold: What becomes of a command's changes to protected paths: ``pause`` (kept
            for a person's decision), ``refuse``, or ``apply`` (``protected`` empty).
        landings: What became of each command's changes (``spawn_sandboxed`` adds
            them), for the call's result.
        seen_output: Called with each piece of a command's output as it comes, so the
            call's heartbeats carry its latest output (what a retry reports of a call
            its worker's death cut off); optional.
        handing_back: Whether a cancelled call is being handed back to be run again
            (its worker is stopping): a command's changes are then dropped, not landed.
        tree_id: The top task of the call's tree (the task that spawned this one, or
            this one): its commands share the machine with the tree's (see
            ``CallCgroup``). None: the task is its own tree.
        images: Images the call's result carries beside its text (``CheckedImage``s,
            see ``check_image``): a tool adds them here; the model is shown them with
            the result where its provider takes images.

    The context is plain data: it is pickled to the file tools' processes (without
    ``on_output``, which stays with the caller, and the workspace's descriptor, which
    goes along as a descriptor).
    """

    workspace: Path
    task_id: str
    sandbox: str = "auto"
    on_output: Callable[[], None] | None = None
    network: bool = False
    env: dict[str, str] = field(default_factory=dict)
    limits: ToolLimits = field(default_factory=ToolLimits)
    protected: tuple[str, ...] = PROTECTED_PATHS
    hidden: tuple[Path, ...] = ()
    read_paths: tuple[Path, ...] = ()
    run_as: tuple[int, int] | None = None
    time_limit: float = 120.0
    decided: DecidedPath | None = None
    rules: PathRules | None = None
    workspace_fd: int | None = None
    overlay_dir: Path | None = None
    hold: str = "pause"
    landings: list[Any] = field(default_factory=list)
    handing_back: Callable[[], bool] | None = None
    seen_output: Callable[[bytes], None] | None = None
    tree_id: str | None = None
    images: list[Any] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _deadline: float | None = field(default=None, repr=False)
    _waiting: bool = field(default=False, repr=False)
    """Waiting for its turn behind the task's other calls (``TASK_PARALLEL``)."""

    def check(self) -> None:
        """Raise ``ToolError`` once the call is cancelled or over its time limit.

        Long-running sync tools call it between steps (each file, each line), so a
        cancelled call stops instead of running on in its thread.
        """
        if self._deadline is not None and time.monotonic() > self._deadline:
            self._stop.set()
        if self._stop.is_set():
            raise ToolError(self._stopped_message())

    def _stopped_message(self) -> str:
        if self._deadline is not None and time.monotonic() > self._deadline:
            return (
                f"ran over its {self.time_limit:g} s time limit and was stopped; "
                "narrow the path or pattern"
            )
        return "the call was cancelled"

    @property
    def stopped(self) -> bool:
        """Whether the call was cancelled or timed out."""
        return self._stop.is_set()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["on_output"] = None
        state["workspace_fd"] = None
        state["landings"] = []
        state["images"] = []
        state["handing_back"] = None
        state["seen_output"] = None
        del state["_stop"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._stop = threading.Event()

    def __post_init__(self) -> None:
        self.workspace = Path(os.path.abspath(self.workspace))
        # A hidden directory that holds the workspace (a data dir above it) hides only
        # what lies beside the workspace, which the jail refuses anyway.
        self.hidden = tuple(h for h in self.hidden if not self.workspace.is_relative_to(h))

    def profile(self) -> SandboxProfile:
        """The sandbox profile for a command of this call (see ``spawn_sandboxed``)."""
        return SandboxProfile(
            workspace=self.workspace,
            network=self.network,
            env=self.env,
            limits=self.limits,
            protected=self.protected,
            hidden=self.hidden,
            read_paths=self.read_paths,
            run_as=self.run_as,
            workspace_fd=self.workspace_fd,
            overlay_dir=self.overlay_dir,
            hold=self.hold if self.protected else "apply",
            landings=self.landings,
            share=Share(self.task_id, self.tree_id or self.task_id),
        )


MAX_THREADS_PER_TASK = 8
"""Sync tool calls one task may have running at once (see ``Tool._in_thread``)."""


class _ThreadCounts:
    """Threads of sync tool calls per task, counted until they return."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def take(self, task_id: str) -> bool:
        with self._lock:
            count = self._counts.get(task_id, 0)
            if count >= MAX_THREADS_PER_TASK:
                return False
            self._counts[task_id] = count + 1
            return True

    def give_back(self, task_id: str) -> None:
        with self._lock:
            count = self._counts.pop(task_id, 1) - 1
            if count > 0:
                self._counts[task_id] = count

    def running(self, task_id: str | None = None) -> int:
        """Threads alive for ``task_id``, or for every task."""
        with self._lock:
            if task_id is None:
                return sum(self._counts.values())
            return self._counts.get(task_id, 0)


_THREADS = _ThreadCounts()


class Tool:
    """A function a model can call, with its name, description and JSON schema.

    Build one with ``@tool``. ``run`` validates the model's arguments against the
    schema and calls the function; invalid arguments become a ``ToolError``.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        read_only: bool = False,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
        self.description = description if description is not None else summary
        self.read_only = read_only
        self.in_process: Callable[[Tool, ToolContext, dict[str, Any]], Awaitable[str]] | None
        self.in_process = None
        """What runs a call in a process of its own (``_processes.forked`` sets it); None:
        calls run in a thread, or on the event loop for an async tool."""
        self._takes_context, fields = _signature_fields(fn, arg_docs)
        # Fields get neutral names and the parameters' names as aliases, so a parameter
        # may be called ``json`` or ``model_config`` without clashing with BaseModel.
        self._names = {f"arg{i}": name for i, name in enumerate(fields)}
        self._arguments: type[BaseModel] = create_model(
            f"{self.name}_arguments",
            __config__=ConfigDict(extra="forbid"),
            **{field: fields[name] for field, name in self._names.items()},
        )
        self.parameters: dict[str, Any] = _strip_titles(self._arguments.model_json_schema())
        self._is_async = inspect.iscoroutinefunction(fn)

    @property
    def forked(self) -> bool:
        """Whether calls run in a process of their own (see ``_processes.forked``)."""
        return self.in_process is not None

    @property
    def spec(self) -> ToolSpec:
        """What a model is told about this tool."""
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> str:
        """Validate ``arguments`` and call the tool.

        Args:
            ctx: The call's context, passed to the function if it asks for one.
            arguments: The arguments the model sent (a JSON object).

        Returns:
            The tool's output as text (non-string results are rendered as JSON).

        Raises:
            ToolError: The arguments are invalid, or the tool itself refused.
        """
        if not isinstance(arguments, dict):
            raise ToolError(f"{self.name}: arguments must be a JSON object")
        try:
            validated = self._arguments.model_validate(arguments)
        except ValidationError as e:
            raise ToolError(self._describe(e)) from None
        kwargs = {name: getattr(validated, field) for field, name in self._names.items()}
        args = (ctx,) if self._takes_context else ()
        if self._is_async:
            result = await self.fn(*args, **kwargs)
        elif self.in_process is not None and sys.platform.startswith("linux"):
            # Elsewhere (no SOCK_SEQPACKET pairs, no PR_SET_PDEATHSIG) in a thread.
            return await self.in_process(self, ctx, kwargs)
        else:
            result = await self._in_thread(ctx, args, kwargs)
        return _as_text(result)

    async def _in_thread(self, ctx: ToolContext, args: tuple[Any, ...], kwargs: Any) -> Any:
        """Run the sync function in a thread of its own, within the call's time limit.

        Not a shared pool: a call that blocks (a slow disk, a custom tool that hangs)
        holds only its own thread, so it cannot starve other tasks' calls. A task may
        have ``MAX_THREADS_PER_TASK`` such threads alive, counting calls that were
        cancelled or timed out but have not returned yet. The threads are daemons: a
        stuck one never stops the worker from exiting.
        """
        loop = asyncio.get_running_loop()
        started = loop.time()
        while not _THREADS.take(ctx.task_id):
            if loop.time() - started > ctx.time_limit:
                raise ToolError(
                    f"{self.name}: {MAX_THREADS_PER_TASK} earlier calls of this task are "
                    "still running (cancelled or over their time limit); try again later"
                )
            await asyncio.sleep(0.05)
        ctx._deadline = time.monotonic() + ctx.time_limit - (loop.time() - started)
        done: asyncio.Future[Any] = loop.create_future()
        # A call whose awaiter was cancelled or timed out ends with nobody to read its
        # error: mark it read, or asyncio logs a traceback per abandoned call.
        done.add_done_callback(lambda f: f.cancelled() or f.exception())

        def settle(result: Any, error: Exception | None) -> None:
            if done.done():
                return
            if error is None:
                done.set_result(result)
            else:
                done.set_exception(error)

        def target() -> None:
            result: Any = None
            error: Exception | None = None
            try:
                result = self.fn(*args, **kwargs)
            except Exception as err:  # handed to the awaiting side
                error = err
            finally:
                _THREADS.give_back(ctx.task_id)
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(settle, result, error)

        threading.Thread(target=target, name=f"tool-{self.name}", daemon=True).start()
        try:
            return await asyncio.wait_for(
                asyncio.shield(done), max(0.0, ctx._deadline - time.monotonic())
            )
        except TimeoutError:
            ctx._stop.set()
            raise ToolError(f"{self.name} {ctx._stopped_message()}") from None
        except ToolError as err:
            if ctx.stopped:  # the thread saw the deadline first
                raise ToolError(f"{self.name} {ctx._stopped_message()}") from None
            raise err
        except asyncio.CancelledError:
            ctx._stop.set()
            raise

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the undecorated function directly (no validation)."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r}, read_only={self.read_only})"

    def _describe(self, error: ValidationError) -> str:
        expected = ", ".join(self._names.values()) or "no arguments"
        problems = []
        for item in error.errors():
            where = ".".join(str(part) for part in item["loc"]) or "arguments"
            kind = item["type"]
            if kind == "missing":
                problems.append(f"argument '{where}' is required")
            elif kind == "extra_forbidden":
                problems.append(f"unknown argument '{where}'; expected: {expected}")
            else:
                got = json.dumps(item.get("input"), default=repr)[:100]
                problems.append(f"argument '{where}' is invalid: {item['msg']} (got {got})")
        return f"{self.name}: " + "; ".join(problems)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, read_only: bool = False
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a function into a ``Tool``; usable bare or with options.

    The first parameter, if annotated ``ToolContext``, receives the call's context and
    is left out of the schema. Sync functions run in a thread.

    Args:
        fn: The function (when used bare, as ``@tool``).
        name: The tool's name; default: the function's name.
        description: What the model reads; default: the docstring without ``Args:``.
        read_only: Whether the tool never changes anything (policies may allow it freely).

    Returns:
        A ``Tool``, or a decorator that makes one.

    Example:
        ```python
        @tool(read_only=True)
        async def word_count(ctx: ToolContext, path: str) -> str:
            # The docstring (summary, then an Args section with one line per
            # parameter) becomes the description the model reads.
            return str(len((ctx.workspace / path).read_text().split()))
        ```
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(f, name=name, description=description, read_only=read_only)

    return wrap(fn) if fn is not None else wrap


_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Returns?|Yields?|Raises|Examples?|"
    r"Notes?|Attributes|Warnings?|See Also|Todo):\s*$"
)
_ARG_SECTIONS = {"Args", "Arguments", "Parameters", "Params", "Keyword Args"}
_ARG_LINE = re.compile(r"^\**(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a cleaned Google-style docstring into its description and argument docs."""
    lines = doc.splitlines()
    summary: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    arg_indent: int | None = None
    for line in lines:
        header = _SECTION.match(line)
        if header:
            section, current, arg_indent = header.group(1), None, None
            continue
        if section is None:
            summary.append(line)
            continue
        if section not in _ARG_SECTIONS or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if arg_indent is None:
            arg_indent = indent
        match = _ARG_LINE.match(line.strip()) if indent == arg_indent else None
        if match:
            current = match.group(1)
            args[current] = match.group(2).strip()
        elif current is not None:
            args[current] = f"{args[current]} {line.strip()}".strip()
    return _unwrap("\n".join(summary).strip()), args


_KEEPS_LINE_BREAK = re.compile(r"^(\s|[-*+>] |\d+[.)] |```|#)")


def _unwrap(text: str) -> str:
    """Join hard-wrapped lines of a paragraph; keep lists, code and blank lines as they are."""
    out: list[str] = []
    in_fence = False
    for line in text.splitlines():
        fence = line.lstrip().startswith("```")
        joinable = out and out[-1].strip() and line.strip() and not in_fence
        if joinable and not fence and not _KEEPS_LINE_BREAK.match(line):
            if not out[-1].lstrip().startswith("```"):
                out[-1] = f"{out[-1]} {line.strip()}"
                continue
        out.append(line)
        if fence:
            in_fence = not in_fence
    return "\n".join(out)


def _signature_fields(
    fn: Callable[..., Any], arg_docs: dict[str, str]
) -> tuple[bool, dict[str, Any]]:
    """The pydantic fields of a function's parameters, and whether it takes a context."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception as e:
        raise TypeError(
            f"tool {fn.__name__}: cannot resolve its type annotations ({e}); "
            "define the types it uses at module level"
        ) from e
    params = list(inspect.signature(fn).parameters.values())
    takes_context = bool(params) and hints.get(params[0].name) is ToolContext
    fields: dict[str, Any] = {}
    for param in params[1:] if takes_context else params:
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise TypeError(
                f"tool {fn.__name__}: parameter '{param.name}' must be a plain named "
                "parameter (no *args, **kwargs or positional-only parameters)"
            )
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (
            hints.get(param.name, Any),
            Field(default, alias=param.name, description=arg_docs.get(param.name)),
        )
    return takes_context, fields


def _strip_titles(schema: Any) -> Any:
    """Drop pydantic's ``title`` keys: models read them as noise."""
    if isinstance(schema, list):
        return [_strip_titles(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    cleaned: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("default", "examples", "enum", "const"):
            cleaned[key] = value
        elif key in ("properties", "$defs") and isinstance(value, dict):
            cleaned[key] = {name: _strip_titles(sub) for name, sub in value.items()}
        else:
            cleaned[key] = _strip_titles(value)
    return cleaned


def _as_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if result is None:
        return ""
    if isinstance(result, BaseModel):
        return result.model_dump_json()
    if isinstance(result, dict | list | tuple | int | float | bool):
        return json.dumps(result, default=str)
    return str(result)
