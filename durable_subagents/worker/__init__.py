"""Builds and runs the worker: workflows, activities, data converter, limits."""

from durable_subagents.worker._worker import (
    SearchAttributesMissing,
    check_search_attributes,
    connect_client,
    create_worker,
    run_worker,
)

__all__ = [
    "SearchAttributesMissing",
    "check_search_attributes",
    "connect_client",
    "create_worker",
    "run_worker",
]
