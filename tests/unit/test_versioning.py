"""A half-given worker version is refused, naming what to add."""

from __future__ import annotations

import pytest

from durable_subagents import InvalidRequest
from durable_subagents.config import Settings

"""Asks before bash: a task pauses on v1 until the test approves, after the upgrade."""
"""Asks before ``echo go`` only: a task waits on v1 until the upgrade, then runs on."""


@pytest.mark.parametrize(
    ("fields", "missing"),
    [({"deployment_name": "app"}, "--build-id"), ({"build_id": "v2"}, "--deployment-name")],
)
def test_a_half_given_version_is_refused_naming_what_to_add(
    fields: dict[str, str], missing: str
) -> None:
    with pytest.raises(InvalidRequest, match=f"add {missing}"):
        Settings(**fields).worker_deployment()
    assert Settings(deployment_name=" ", build_id="").worker_deployment() is None
    with pytest.raises(InvalidRequest, match="without one"):
        Settings(deployment_name="my.app", build_id="v1").worker_deployment()
