"""A tool call's payloads: the ``run_tool`` activity's input and result, held changes.

Recorded in histories: the compatibility rule of ``_payloads`` holds here.
``_payloads`` exports these with the other payloads.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from durable_subagents.agents._spec import AgentSpec, ToolLimits
from durable_subagents.policy import PathRules
from durable_subagents.types import Message, ToolCall, ToolImage
from durable_subagents.wire._compact import Compact

__all__ = [
    "HELD_PATHS_SHOWN",
    "UNRECORDED_READ_BYTES",
    "HeldChanges",
    "SettleInput",
    "ToolCallInput",
    "ToolCallResult",
    "protected_changes",
]


class ToolCallInput(Compact):
    """Input of the ``run_tool`` activity."""

    task_id: str
    call: ToolCall
    workspace: str | None = None
    network: bool = False
    """Whether the call's processes may use the network (the agent's ``network``)."""
    env: list[str] | None = None
    """The agent's ``env``: worker variables the call's processes may see."""
    limits: ToolLimits = Field(default_factory=ToolLimits)
    """The agent's resource limits (the worker's own are the ceiling)."""
    write_protected_paths: bool = False
    """The agent opted in to writes to ``.git``, ``.claude`` and the like."""
    rules: PathRules | None = None
    """The agent's and the spawn's rules for this tool: the file tools judge by them
    what they open beyond the path the call was decided on. None: not sent."""
    unrecorded_reads: bool = False
    """Whether the workflow reads ``ToolCallResult.recorded``: then a read-only tool's
    result of at most ``UNRECORDED_READ_BYTES`` is not written as a record (a retry
    runs the read again, which changes nothing, and the workflow never passes so short
    a result by name). A workflow that does not say so gets every result recorded."""
    rerun: bool = False
    """A person approved running the call again after its worker died while it ran."""
    on_interrupted: Literal["report", "rerun", "ask"] = "rerun"
    """What a retry does when the call's worker died while it ran (the agent's
    ``on_interrupted``; a workflow that does not say so reruns, as before)."""
    protected_changes: Literal["pause", "refuse", "apply"] = "refuse"
    """What becomes of a command's changes to protected paths: ``pause`` (kept, and the
    result's ``held`` asks the workflow for a person's decision), ``refuse`` (what a
    workflow that does not know ``held`` gets), or ``apply`` (the agent opted in)."""
    tree_id: str | None = None
    """The top task of the task's tree (the subagent that spawned it): its commands
    share the machine with the whole tree's. None: the task is its own tree."""

    @classmethod
    def of(
        cls,
        task_id: str,
        call: ToolCall,
        spec: AgentSpec,
        workspace: str | None,
        *,
        read_only: bool,
        tree_id: str | None = None,
    ) -> ToolCallInput:
        """The input of an approved ``call`` of a task of agent ``spec``.

        ``read_only``: whether the tool never changes anything (its path rules judge it
        so). A ``bash`` call carries no path rules: its sandbox is what bounds it.
        ``tree_id``: the task's tree, when the task is not its top.
        """
        rules = None if call.name == "bash" else PathRules.of(spec, call.name, read_only=read_only)
        return cls(
            task_id=task_id,
            call=call,
            workspace=workspace,
            network=spec.network,
            env=spec.env,
            limits=spec.limits,
            write_protected_paths=spec.write_protected_paths,
            rules=rules,
            unrecorded_reads=True,
            protected_changes=protected_changes(spec),
            on_interrupted=spec.on_interrupted,
            tree_id=tree_id,
        )


def protected_changes(spec: AgentSpec) -> Literal["pause", "refuse", "apply"]:
    """What becomes of an agent's commands' changes to protected paths.

    Opted in (``write_protected_paths``): they land. An agent that runs without asking
    (``dont_ask``): refused, the model told so. Any other: a person decides.
    """
    if spec.write_protected_paths:
        return "apply"
    return "refuse" if spec.permission_mode == "dont_ask" else "pause"


UNRECORDED_READ_BYTES = 1024
"""A read-only tool's result up to this size is not recorded (``unrecorded_reads``).
At most ``MAX_CALLS_PER_TURN`` of them, 64 KiB, stay inline in the next turn's input."""


class HeldChanges(Compact):
    """A command's changes to protected paths, kept in the blob store for a decision.

    Attributes:
        arguments_ref: The blob of the decision's arguments: the call, the changes as a
            person reads them (a diff for text, sizes and modes otherwise) and
            ``changes_ref``. An approval binds this reference, so exactly these bytes land.
        changes_ref: The blob of the changes themselves (what ``settle_changes`` applies).
        paths: The paths changed (the first ``HELD_PATHS_SHOWN``).
        count: How many changes.
        preview: The start of the diff, for a one-line view.
    """

    arguments_ref: str
    changes_ref: str
    paths: list[str] = Field(default_factory=list)
    count: int = 0
    preview: str = ""


HELD_PATHS_SHOWN = 20
"""Paths of held changes a result names (the rest are counted)."""


class ToolCallResult(Compact):
    """Result of the ``run_tool`` activity: the output, or a preview and a blob reference."""

    call_id: str
    tool_name: str
    content: str = ""
    content_ref: str | None = None
    is_error: bool = False
    size: int = 0
    recorded: bool = True
    """Whether the result is in the blob store as the call's record (a short read's is
    not; see ``ToolCallInput.unrecorded_reads``)."""
    interrupted: bool = False
    """The call's worker died while it ran and the agent asks a person before it runs
    again (``on_interrupted`` ``ask``): the workflow pauses, and runs it once more only if
    approved (``ToolCallInput.rerun``)."""
    held: HeldChanges | None = None
    """Changes the call's command made to protected paths, kept for a person's decision
    (``ToolCallInput.protected_changes`` ``pause``): the workflow pauses for it and runs
    ``settle_changes`` before the model reads this result."""
    images: list[ToolImage] = Field(default_factory=list)
    """Images the result carries, by blob reference (the text names each)."""

    def to_message(self) -> Message:
        """The tool message the model sees next turn."""
        return Message(
            role="tool",
            content=self.content,
            content_ref=self.content_ref,
            tool_call_id=self.call_id,
            tool_name=self.tool_name,
            is_error=self.is_error,
            images=self.images,
        )


class SettleInput(Compact):
    """Input of the ``settle_changes`` activity: a call's held changes, and the decision.

    Attributes:
        task_id: The task.
        workspace: The task's workspace (as in ``ToolCallInput``).
        result: The call's result, with its ``held`` changes.
        record: Where the settled result is recorded (the model turn reads it there).
        approved: Whether a person approved the changes.
        reason: Why not, as the model reads it (a rejection's reason, a timeout).
    """

    task_id: str
    workspace: str | None = None
    result: ToolCallResult
    record: str
    approved: bool
    reason: str | None = None
