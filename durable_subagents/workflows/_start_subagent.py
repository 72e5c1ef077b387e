"""Subagents as child workflows of your own Temporal workflows.

A subagent started here is a child workflow with parent close policy
``REQUEST_CANCEL``: cancelling (or terminating) the parent cancels the subagent, its
model call and its tool processes, durably. The child carries the same memo and search
attributes as a task spawned by ``SubagentClient``, so ``check_task``, ``list_tasks``
(``parent_id`` = the parent's workflow id) and the CLI see it like any other task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from durable_subagents.agents import AgentSpec, PermissionRule, resolve_agent
    from durable_subagents.errors import InvalidRequest
    from durable_subagents.spawn import (
        SpawnOptions,
        build_task_input,
        refuse_protected_workspace,
        validate_task_id,
    )
    from durable_subagents.types import TaskResult
    from durable_subagents.workflows._subtasks import start_child


__all__ = ["start_subagent"]


async def start_subagent(
    agent: str | AgentSpec,
    prompt: str,
    description: str = "",
    *,
    model: str | None = None,
    max_turns: int | None = None,
    metadata: dict[str, Any] | None = None,
    tools: Sequence[str] | None = None,
    disallowed_tools: Sequence[str] | None = None,
    permission_mode: str | None = None,
    permissions: Sequence[PermissionRule | dict[str, str]] | None = None,
    approval_timeout: float | None = None,
    time_limit: float | None = None,
    workspace: str | None = None,
    network: bool | None = None,
    task_id: str | None = None,
    task_queue: str | None = None,
    agents: Mapping[str, AgentSpec] | None = None,
    token_budget: int | None = None,
    reasoning_effort: str | None = None,
    output_schema: Mapping[str, Any] | type[BaseModel] | None = None,
) -> workflow.ChildWorkflowHandle[Any, TaskResult]:
    """Start a subagent as a child of the calling workflow; await the handle for its result.

    Call it from workflow code. The options mean what they mean for
    ``SubagentClient.spawn_task``, and may only narrow the agent.

    Example:
        >>> handle = await start_subagent("explore", "Where is the retry logic?")
        >>> result = await handle          # a TaskResult
        >>> result.status, result.result

    Args:
        agent: A built-in agent's name, a name in ``agents``, or an ``AgentSpec``.
        prompt: The task for the subagent.
        description: A short label for the Web UI and listings.
        model: ``provider:model``; default: the agent's, else the worker's default.
        max_turns: Turn limit (default: the agent's).
        metadata: Free-form JSON data kept with the task.
        tools: Restrict the agent to these of its tools.
        disallowed_tools: Tools to take away.
        permission_mode: A mode at most as permissive as the agent's.
        permissions: Extra ``deny`` or ``ask`` rules.
        approval_timeout: Seconds a pause may wait for a decision.
        time_limit: Seconds the subagent may run; then it stops as ``timed_out``.
        token_budget: Tokens the subagent (and its children) may use in all.
        reasoning_effort: ``low``, ``medium`` or ``high``; at most the agent's.
        output_schema: A JSON Schema for an object, or a pydantic model class: the
            result's ``output`` is then the answer, validated against it.
        workspace: A directory inside the worker's workspace root.
        network: False takes the network away from the subagent's tools; True keeps
            it, if the agent has it.
        task_id: The child's workflow id (default ``subagent-<agent>-<hex>``).
        task_queue: The subagent workers' queue (default: the caller's).
        agents: Extra agents by name, besides the built-ins.

    Returns:
        The child workflow's handle; ``handle.id`` is the task id.

    Raises:
        ApplicationError: type ``InvalidRequest``, non-retryable, for a bad request
            (unknown agent, empty prompt, an option that would widen the agent, a
            workspace spelled through a protected path...).
    """
    info = workflow.info()
    try:
        spec = agent if isinstance(agent, AgentSpec) else resolve_agent(agent, agents)
        options = SpawnOptions(
            model=model,
            max_turns=max_turns,
            metadata=metadata,
            tools=tools,
            disallowed_tools=disallowed_tools,
            permission_mode=permission_mode,
            permissions=permissions,
            approval_timeout=approval_timeout,
            time_limit=time_limit,
            workspace=workspace,
            network=network,
            token_budget=token_budget,
            reasoning_effort=reasoning_effort,
            output_schema=output_schema,
        )
        task_input = build_task_input(
            spec,
            prompt,
            options,
            description=description,
            parent_id=info.workflow_id,
            default_model=None,
            created_at=workflow.now(),
            check_model=False,
        )
        if task_id is not None:
            validate_task_id(task_id)
        refuse_protected_workspace(workspace)
    except InvalidRequest as err:
        # A plain exception would fail the caller's workflow task over and over.
        raise ApplicationError(str(err), type="InvalidRequest", non_retryable=True) from None
    child_id = task_id or f"subagent-{spec.name}-{workflow.uuid4().hex[:12]}"
    return await start_child(task_input, child_id, task_queue or info.task_queue)
