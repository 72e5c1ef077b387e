"""Builds and runs the worker: workflows, activities, data converter, limits."""

from durable_subagents.connection._connect import connect_client
from durable_subagents.worker._gc import collect_less
from durable_subagents.worker._models import worker_endpoints, worker_models
from durable_subagents.worker._plugin import SubagentsPlugin
from durable_subagents.worker._sweep import sweep_blobs, sweep_forever
from durable_subagents.worker._worker import (
    SearchAttributesMissing,
    check_search_attributes,
    check_worker,
    create_worker,
    exit_if_tool_calls_stuck,
    run_worker,
)
from durable_subagents.worker._workspace_secrets import warn_secrets_in_workspace

__all__ = [
    "SearchAttributesMissing",
    "SubagentsPlugin",
    "check_search_attributes",
    "check_worker",
    "collect_less",
    "connect_client",
    "create_worker",
    "exit_if_tool_calls_stuck",
    "run_worker",
    "sweep_blobs",
    "sweep_forever",
    "warn_secrets_in_workspace",
    "worker_endpoints",
    "worker_models",
]
