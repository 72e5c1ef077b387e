"""Subagents as child workflows of your own Temporal workflows.

A subagent started here is a child workflow with parent close policy
``REQUEST_CANCEL``: cancelling (or terminating) the parent cancels the subagent, its
model call and its tool processes, durably. The child carries the same memo and search
attributes as a task spawned by ``SubagentClient``, so ``check_task``, ``list_tasks``
(``parent_id`` = the parent's workflow id) and the CLI see it like any other task.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Unpack

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from durable_subagents.agents import AgentSpec, resolve_agent
    from durable_subagents.errors import InvalidRequest
    from durable_subagents.spawn import (
        SpawnKwargs,
        SpawnOptions,
        build_task_input,
        refuse_protected_workspace,
        takes_spawn_options,
    )
    from durable_subagents.types import TaskResult
    from durable_subagents.workflows._subtasks import start_child


__all__ = ["start_subagent"]


@takes_spawn_options
async def start_subagent(
    agent: str | AgentSpec,
    prompt: str,
    description: str = "",
    *,
    task_queue: str | None = None,
    agents: Mapping[str, AgentSpec] | None = None,
    **options: Unpack[SpawnKwargs],
) -> workflow.ChildWorkflowHandle[Any, TaskResult]:
    """Start a subagent as a child of the calling workflow; await the handle for its result.

    Call it from workflow code. It takes the options ``SubagentClient.spawn_task``
    takes, meaning the same, and they may only narrow the agent.

    Example:
        >>> handle = await start_subagent("explore", "Where is the retry logic?")
        >>> result = await handle          # a TaskResult
        >>> result.status, result.result

    Args:
        agent: A built-in agent's name, a name in ``agents``, or an ``AgentSpec``.
        prompt: The task for the subagent.
        description: A short label for the Web UI and listings.
        task_queue: The subagent workers' queue (default: the caller's).
        agents: Extra agents by name, besides the built-ins.
        **options: The spawn options, as keywords (see ``SpawnKwargs``). The model
            defaults to the agent's, else the worker's; ``task_id`` is the child's
            workflow id (default ``subagent-<agent>-<hex>``).

    Returns:
        The child workflow's handle; ``handle.id`` is the task id.

    Raises:
        ApplicationError: type ``InvalidRequest``, non-retryable, for a bad request
            (unknown agent or option, empty prompt, an option that would widen the
            agent, a workspace spelled through a protected path...).
    """
    info = workflow.info()
    try:
        spec = agent if isinstance(agent, AgentSpec) else resolve_agent(agent, agents)
        checked = SpawnOptions(**options)
        task_input = build_task_input(
            spec,
            prompt,
            checked,
            description=description,
            parent_id=info.workflow_id,
            default_model=None,
            created_at=workflow.now(),
            check_model=False,
            agents=agents,
        )
        refuse_protected_workspace(checked.workspace)
    except InvalidRequest as err:
        # A plain exception would fail the caller's workflow task over and over.
        raise ApplicationError(str(err), type="InvalidRequest", non_retryable=True) from None
    child_id = checked.task_id or f"subagent-{spec.name}-{workflow.uuid4().hex[:12]}"
    return await start_child(task_input, child_id, task_queue or info.task_queue)
