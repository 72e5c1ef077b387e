"""Worker versioning: upgrades through Temporal Worker Deployments.

A versioned worker polls as one Worker Deployment Version (a deployment name and a
build ID). Its workflows are PINNED: a task run stays on the version that ran its first
step and finishes on that code, while new tasks start on the deployment's current
version. Continue-as-new and follow-up runs start on the current version (see
``SubagentWorkflow._continue_as_new``); children of a pinned run start on its version.

Pinning is the worker's default behavior rather than a ``@workflow.defn`` argument:
the server refuses a workflow task that names a behavior from an unversioned worker
("versioning behavior cannot be specified without deployment options"), so a
decorated workflow could no longer run on unversioned workers.
"""

from __future__ import annotations

import asyncio
import shlex
import time

from temporalio.api.deployment.v1 import WorkerDeploymentInfo
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
)
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import WorkerDeploymentConfig

from durable_subagents.config import DEFAULT_ADDRESS, DEFAULT_NAMESPACE
from durable_subagents.errors import SubagentError


def deployment_config(version: WorkerDeploymentVersion) -> WorkerDeploymentConfig:
    """The worker options of a versioned worker: its version, task runs pinned to it."""
    return WorkerDeploymentConfig(
        version=version,
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


async def _describe(client: Client, deployment_name: str) -> WorkerDeploymentInfo | None:
    try:
        response = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(
                namespace=client.namespace, deployment_name=deployment_name
            )
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    return response.worker_deployment_info


async def current_build_id(
    client: Client, deployment_name: str, *, registered: str | None = None, wait: float = 5.0
) -> str | None:
    """The build ID of the deployment's current version.

    ``None`` when the deployment has no current version (new tasks then go to
    unversioned workers) or does not exist yet.

    Args:
        client: A client of the deployment's namespace.
        deployment_name: The Worker Deployment.
        registered: A build ID whose workers just started: wait up to ``wait`` seconds
            for the server to list it (their first poll registers it), so that the
            answer, and a ``set-current-version`` run right after, see it.
        wait: See ``registered``.
    """
    deadline = time.monotonic() + wait
    while True:
        info = await _describe(client, deployment_name)
        builds = {s.deployment_version.build_id for s in info.version_summaries} if info else ()
        if registered is None or registered in builds or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    if info is None:
        return None
    return info.routing_config.current_deployment_version.build_id or None


async def make_current(
    client: Client, version: WorkerDeploymentVersion, *, timeout: float = 15.0
) -> None:
    """Make ``version`` its deployment's current version, as ``set-current-version`` does.

    The server knows a version only once one of its workers has polled, so a refusal is
    retried until ``timeout``.

    Raises:
        SubagentError: The server still refused at the timeout; the message has its reason.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            await client.workflow_service.set_worker_deployment_current_version(
                SetWorkerDeploymentCurrentVersionRequest(
                    namespace=client.namespace,
                    deployment_name=version.deployment_name,
                    build_id=version.build_id,
                    identity=client.identity,
                )
            )
            return
        except RPCError as err:
            if time.monotonic() > deadline:
                raise SubagentError(
                    f"could not make {version.deployment_name} build {version.build_id} "
                    f"current: {err.message}; try: "
                    + set_current_command(
                        version, client.service_client.config.target_host, client.namespace
                    )
                ) from err
        await asyncio.sleep(0.2)


def _connection_flags(address: str, namespace: str) -> list[str]:
    flags = [] if address == DEFAULT_ADDRESS else ["--address", address]
    return flags + ([] if namespace == DEFAULT_NAMESPACE else ["--namespace", namespace])


def _version_flags(version: WorkerDeploymentVersion) -> list[str]:
    return ["--deployment-name", version.deployment_name, "--build-id", version.build_id]


def set_current_command(
    version: WorkerDeploymentVersion, address: str, namespace: str = DEFAULT_NAMESPACE
) -> str:
    """The ``temporal`` command that makes ``version`` current."""
    return shlex.join(
        [
            *("temporal", "worker", "deployment", "set-current-version"),
            *_connection_flags(address, namespace),
            *_version_flags(version),
            "--yes",
        ]
    )


def describe_version_command(
    version: WorkerDeploymentVersion, address: str, namespace: str = DEFAULT_NAMESPACE
) -> str:
    """The ``temporal`` command that shows ``version``'s drainage status."""
    return shlex.join(
        [
            *("temporal", "worker", "deployment", "describe-version"),
            *_connection_flags(address, namespace),
            *_version_flags(version),
        ]
    )


def upgrade_steps(
    version: WorkerDeploymentVersion, address: str, namespace: str, task_queue: str
) -> list[tuple[str, str]]:
    """The upgrade from ``version`` to a new build: (what to do, the command) per step."""
    new = WorkerDeploymentVersion(version.deployment_name, "NEW_BUILD_ID")
    worker = [
        *("subagents", "worker"),
        *_connection_flags(address, namespace),
        *("--task-queue", task_queue),
        *_version_flags(new),
    ]
    old = version.build_id
    return [
        ("Start workers of the new code under a new build ID:", shlex.join(worker)),
        (
            f"Make it current: new tasks start on it, runs started on {old} stay there:",
            set_current_command(new, address, namespace),
        ),
        (
            f"Watch {old} drain (DrainageStatus becomes drained once its last pinned run "
            "has closed):",
            describe_version_command(version, address, namespace),
        ),
        (f"Then stop the {old} workers.", ""),
    ]
