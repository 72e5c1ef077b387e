"""A task's tree: how deep it may grow, which agents it spawns, how many tasks it holds.

A task that may spawn carries a copy of the agents it may spawn (``TaskInput.agents``)
and the levels left below it (``max_depth``); each child gets one level fewer and the
agents its own agent names among its parent's. The top task counts its tree's tasks
(``TreeCount``, ``max_tasks``). Tasks a client spawned under this one register with it
(``RegisteredTasks``) and are cancelled with it.

Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from durable_subagents.workflows._background import Background

with workflow.unsafe.imports_passed_through():
    from durable_subagents.agents import AgentSpec, resolve_agent
    from durable_subagents.agents._spec import SPAWN_TOOLS
    from durable_subagents.errors import InvalidRequest
    from durable_subagents.spawn._options import TASK_ID
    from durable_subagents.types import ToolSpec
    from durable_subagents.wire._payloads import OWN_TASKS_ACTIVITY, TaskInput
    from durable_subagents.wording._markdown import one_line

__all__ = [
    "MAX_REGISTERED",
    "OWN_TASKS_PATCH",
    "SPAWN_TOOL_SPECS",
    "RegisteredTasks",
    "TreeCount",
    "agents_below",
    "depth_left",
    "spawn_tool_specs",
    "spawnable_agent",
    "spawns",
]

SPAWN_SUBAGENT, WAIT_SUBAGENTS = SPAWN_TOOLS

MAX_REGISTERED = 256
"""Client-spawned tasks one task takes as its own (``register_child``)."""


SPAWN_TOOL_SPECS = [
    ToolSpec(
        name=SPAWN_SUBAGENT,
        description=(
            "Start a subagent on a self-contained part of your task; it runs in parallel "
            "and returns its task_id at once. Give it everything it needs in the prompt: "
            "it sees nothing else. Then call wait_subagents for its result. Agents: "
            "explore (find things), plan (write a plan), research (answer from the "
            "workspace), general (edit and run commands). A subagent never gets tools "
            "you do not have."
        ),
        parameters={
            "type": "object",
            "properties": {
                "agent": {
                    "type": "string",
                    "enum": ["explore", "plan", "research", "general"],
                    "description": "Which agent to start.",
                },
                "prompt": {"type": "string", "description": "The complete task."},
                "description": {"type": "string", "description": "A 3-8 word label."},
                "model": {
                    "type": "string",
                    "description": "'provider:model'; default: the same model as yours.",
                },
            },
            "required": ["agent", "prompt"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        name=WAIT_SUBAGENTS,
        description=(
            "Wait for subagents you started: returns when all of them have finished, or "
            "as soon as one is paused waiting for the user's approval (then call it again "
            "to keep waiting). Returns each one's status and result."
        ),
        parameters={
            "type": "object",
            "properties": {
                "task_ids": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Which subagents; default: every one you started.",
                }
            },
            "additionalProperties": False,
        },
    ),
]


def depth_left(inp: TaskInput) -> int:
    """Levels of subagents this task may still have below it.

    A run recorded before depths has none in its input: a task a client spawned may
    have children then, and a child may not.
    """
    if inp.max_depth is not None:
        return inp.max_depth
    return 0 if inp.parent_is_subagent else 1


def spawns(inp: TaskInput) -> bool:
    """Whether this task is offered ``spawn_subagent`` (and may call it)."""
    return inp.agent.may_spawn and depth_left(inp) > 0


AGENT_LINE_CHARS = 160
"""Longest line of an agent's description in the ``spawn_subagent`` tool's."""


def spawn_tool_specs(inp: TaskInput) -> list[ToolSpec]:
    """The spawn tools this task is offered: none, or the two, naming its agents."""
    if not spawns(inp):
        return []
    if inp.agents is None:
        return SPAWN_TOOL_SPECS  # a run recorded before the copy: the built-ins
    names = sorted(inp.agents)
    lines = [
        f"{name}: {one_line(inp.agents[name].description, limit=AGENT_LINE_CHARS)}"
        for name in names
    ]
    spawn, wait = SPAWN_TOOL_SPECS
    description = (
        "Start a subagent on a self-contained part of your task; it runs in parallel "
        "and returns its task_id at once. Give it everything it needs in the prompt: "
        "it sees nothing else. Then call wait_subagents for its result. A subagent "
        "never gets tools you do not have. Agents:\n" + "\n".join(lines)
    )
    parameters = json.loads(json.dumps(spawn.parameters))
    parameters["properties"]["agent"]["enum"] = names
    return [
        spawn.model_copy(update={"description": description, "parameters": parameters}),
        wait,
    ]


def spawnable_agent(parent: TaskInput, name: str) -> AgentSpec:
    """The agent ``name`` among those ``parent`` may spawn.

    Raises:
        InvalidRequest: it may spawn no agent of that name (the message lists those it may).
    """
    if parent.agents is None:
        return resolve_agent(name)  # a run recorded before the copy: the built-ins
    spec = parent.agents.get(name)
    if spec is None and ":" in name:
        spec = parent.agents.get(name.replace(":", "."))
    if spec is None:
        known = ", ".join(sorted(parent.agents)) or "none"
        raise InvalidRequest(f"unknown agent {name[:100]!r}; this task may spawn: {known}")
    return spec


def agents_below(agents: dict[str, AgentSpec] | None, child: AgentSpec) -> dict[str, AgentSpec]:
    """The agents a child may spawn: its parent's, narrowed to those it names."""
    known = agents or {}
    if child.spawnable is None:
        return dict(known)
    return {n: known[n] for n in child.spawnable if n in known}


class TreeCount:
    """The top task's count of its tree's tasks (``max_tasks``, itself included).

    Its own children count here directly; a task below asks with the
    ``reserve_tree_task`` update before it starts one. An id counts once, however often
    it is asked for (a retried reservation). Carried over a continue-as-new.
    """

    def __init__(self, spend_refusal: Callable[[], str | None] = lambda: None) -> None:
        self.ids: list[str] = []
        self.limit: int | None = None
        self._spend_refusal = spend_refusal

    def refusal(self, task_id: str) -> str | None:
        """Why ``task_id`` may not join the tree; None: it may.

        A new id needs room in the tree (``max_tasks``) and, where the tree has a
        budget in money, enough of it left for a turn.
        """
        if self.limit is None:
            return "this task is not the top of a tree that counts its tasks"
        if task_id in self.ids:
            return None
        if 1 + len(self.ids) < self.limit:
            return self._spend_refusal()
        return (
            f"the task tree holds {self.limit} tasks, the most its spawn allows "
            "(max_tasks); wait for your subagents and use their results, or do the work "
            "yourself"
        )

    def check(self, task_id: str) -> None:
        """Refuse a reservation (``reserve_tree_task``'s validator).

        Raises:
            ValueError: no task id, or no room for it (the update is rejected).
        """
        if not isinstance(task_id, str) or not TASK_ID.fullmatch(task_id):
            raise ValueError(f"{task_id!r:.80} is no task id")
        refusal = self.refusal(task_id)
        if refusal is not None:
            raise ValueError(refusal)

    def take(self, task_id: str) -> None:
        """Count ``task_id`` (checked with ``refusal`` first)."""
        if task_id not in self.ids:
            self.ids.append(task_id)


OWN_TASKS_PATCH = "registered-tasks-checked"
"""Runs from here on check each registered task's parent before cancelling it."""


CHECKED_PATCH = "registrations-checked-on-arrival"
"""Runs from here on check each registration when it arrives, not only at the end."""


async def _own(task_ids: list[str]) -> list[str]:
    """Those of ``task_ids`` whose ``SubagentParent`` is this task (``own_registered_tasks``)."""
    own: list[str] = await workflow.execute_activity(
        OWN_TASKS_ACTIVITY,
        args=[workflow.info().workflow_id, task_ids],
        result_type=list[str],
        start_to_close_timeout=timedelta(seconds=60),
        retry_policy=RetryPolicy(maximum_attempts=5),
        summary="check registered tasks",
    )
    return own


class RegisteredTasks:
    """Tasks spawned through the client that named this one as their parent.

    They are cancelled when this task is cancelled, fails or times out, as child
    workflows would be; the registration (``register_child``) is durable, so this holds
    even when the process that spawned them is gone.

    Attributes:
        ids: The registered task ids, not yet cancelled (carried over a continue-as-new).
    """

    def __init__(self, background: Background | None = None) -> None:
        self.ids: list[str] = []
        self._background = background
        self._unchecked: list[str] = []
        """Registered, not yet checked to name this task as their parent."""
        self._checking: list[str] = []
        """Those being checked now (``own_registered_tasks``)."""

    @property
    def carried(self) -> list[str]:
        """What a continue-as-new carries: every registration, checked or not."""
        return [*self.ids, *self._checking, *self._unchecked]

    def register(self, task_id: str) -> None:
        """Take a ``register_child`` signal's task, if it may be one.

        Only an id a task may have, never this task's own, and at most
        ``MAX_REGISTERED`` of them (a signal anyone may send must not grow the task
        without bound). Each is checked, in the background, to name this task as its
        parent (``SubagentParent``) before it counts: a flood of forged ids is dropped
        within an activity's time and cannot keep this task's own children out.
        """
        if not isinstance(task_id, str) or not TASK_ID.fullmatch(task_id):
            workflow.logger.warning("registration dropped: %.80r is no task id", task_id)
            return
        if task_id == workflow.info().workflow_id or task_id in self.carried:
            return
        checked = self._background is not None and workflow.patched(CHECKED_PATCH)
        waiting = self._unchecked if checked else self.ids
        if len(waiting) >= MAX_REGISTERED:
            workflow.logger.warning("registration dropped: %d tasks registered", MAX_REGISTERED)
            return
        waiting.append(task_id)
        if checked and not self._checking and self._background is not None:
            self._background.start(self._check(), "checking registered tasks")

    async def _check(self) -> None:
        """Keep those of the registrations that name this task as their parent."""
        while self._unchecked:
            self._checking, self._unchecked = self._unchecked, []
            try:
                own = await _own(self._checking)
            finally:
                batch, self._checking = self._checking, []
            for task_id in own:
                if len(self.ids) < MAX_REGISTERED and task_id not in self.ids:
                    self.ids.append(task_id)
            if len(own) < len(batch):
                workflow.logger.warning(
                    "registrations dropped: %d of %d name another parent, or no task",
                    len(batch) - len(own),
                    len(batch),
                )

    def add(self, task_id: str) -> None:
        """Register a task (once however often its signal comes)."""
        if task_id not in self.ids:
            self.ids.append(task_id)

    def restore(self, carried: list[str]) -> None:
        """Take the tasks an earlier run registered, before those registered since."""
        self.ids = [*carried, *self.ids]

    async def cancel(self) -> None:
        """Request cancellation of the registered tasks that name this one as parent.

        A registration is a signal anyone may send: only the ids whose task's
        ``SubagentParent`` is this task are cancelled (``own_registered_tasks``), so a
        forged registration cannot reach a stranger's task.
        """
        ids, self.ids, self._unchecked = self.carried, [], []
        if ids and workflow.patched(OWN_TASKS_PATCH):
            ids = await _own(ids)

        async def cancel(task_id: str) -> None:
            try:
                await workflow.get_external_workflow_handle(task_id).cancel()
            except Exception:  # it finished already, or never started
                workflow.logger.info("registered child %s was not cancelled", task_id)

        await asyncio.gather(*(cancel(t) for t in ids))
