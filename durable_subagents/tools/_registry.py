"""The tools a worker offers, by name."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from durable_subagents.errors import InvalidRequest
from durable_subagents.tools._bash import bash
from durable_subagents.tools._decorator import Tool, tool
from durable_subagents.tools._files import edit_file, read_file, write_file
from durable_subagents.tools._search import grep, list_files
from durable_subagents.types import ToolSpec

__all__ = ["BUILTIN_TOOLS", "ToolRegistry"]

BUILTIN_TOOLS: dict[str, Tool] = {
    t.name: t for t in (read_file, list_files, grep, write_file, edit_file, bash)
}
"""The built-in tools, by name: file tools jailed to the workspace, and ``bash``."""


class ToolRegistry:
    """A name -> ``Tool`` mapping: the tools one worker can run.

    Example:
        ```python
        registry = ToolRegistry()  # the built-in tools
        registry.register(word_count)  # a function decorated with @tool
        specs = registry.specs(["read_file", "word_count"])
        ```
    """

    def __init__(self, tools: Mapping[str, Tool] | Iterable[Tool] | None = None) -> None:
        """Create a registry.

        Args:
            tools: The tools to hold, as a list or a name -> tool mapping; default:
                ``BUILTIN_TOOLS``. Pass ``[]`` for none.
        """
        self._tools: dict[str, Tool] = {}
        if tools is None:
            tools = BUILTIN_TOOLS
        if isinstance(tools, Mapping):
            self._tools.update(tools)
        else:
            for t in tools:
                self.register(t)

    def register(self, t: Tool | Callable[..., Any], *, replace: bool = False) -> Tool:
        """Add a tool (a plain function is wrapped with ``@tool`` first).

        Args:
            t: The tool.
            replace: Allow replacing a different tool of the same name.

        Returns:
            The registered ``Tool``.

        Raises:
            ValueError: Another tool already has this name and ``replace`` is false.
        """
        registered = t if isinstance(t, Tool) else tool(t)
        existing = self._tools.get(registered.name)
        if existing is not None and existing is not registered and not replace:
            raise ValueError(
                f"a tool named '{registered.name}' is already registered; "
                "pass replace=True to override it"
            )
        self._tools[registered.name] = registered
        return registered

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or None."""
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        """The registered names, in registration order."""
        return list(self._tools)

    def specs(self, names: Iterable[str] | None = None) -> list[ToolSpec]:
        """The specs of the named tools, in the order given (default: every tool).

        Raises:
            InvalidRequest: A name is not registered.
        """
        wanted = self.names if names is None else list(names)
        unknown = [n for n in wanted if n not in self._tools]
        if unknown:
            raise InvalidRequest(
                f"unknown tool {', '.join(repr(n) for n in unknown)}; "
                f"known: {', '.join(self._tools)}"
            )
        return [self._tools[n].spec for n in wanted]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)
