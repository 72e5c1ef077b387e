"""Fake model providers for a test's worker, and reading their requests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.failure.v1 import Failure
from temporalio.client import Client
from temporalio.converter import DataConverter

from durable_subagents import AgentSpec, TaskEvent
from durable_subagents.client._live_turn import RESTARTED
from durable_subagents.providers import (
    clear_provider_cache,
    close_providers,
)
from durable_subagents.testing import (
    FakeAnthropicServer,
    FakeBedrockServer,
    FakeModelServer,
    FakeOpenAIServer,
    FakeVertexServer,
)
from durable_subagents.wire._payloads import ACTIVITY_OPTIONS_ACTIVITY


@contextlib.asynccontextmanager
async def fake_provider(
    monkeypatch: pytest.MonkeyPatch, server: FakeModelServer, prefix: str, key: str = "k"
) -> AsyncIterator[FakeModelServer]:
    """Serve a fake model API and point this process's worker at it (env + fresh clients)."""
    async with server as srv:
        monkeypatch.setenv(f"{prefix}_API_KEY", key)
        monkeypatch.setenv(f"{prefix}_BASE_URL", srv.base_url)
        clear_provider_cache()
        try:
            yield srv
        finally:
            await close_providers()


def turn_text(events: list[TaskEvent], turn: int) -> str:
    """The text a watcher would show for ``turn``: from its last restart on."""
    text = ""
    for event in events:
        if event.kind == "text" and event.turn == turn:
            text = (event.text or "") if event.summary == RESTARTED else text + (event.text or "")
    return text


PROVIDERS = ["openai", "anthropic"]


MODELS = {"openai": "openai:gpt-test", "anthropic": "anthropic:claude-test"}


@contextlib.asynccontextmanager
async def model_api(
    monkeypatch: pytest.MonkeyPatch, kind: str, key: str = "k", **options: Any
) -> AsyncIterator[FakeModelServer]:
    """Serve a fake ``kind`` API and point this process's worker at it."""
    server = FakeOpenAIServer(**options) if kind == "openai" else FakeAnthropicServer(**options)
    async with fake_provider(monkeypatch, server, kind.upper(), key) as srv:
        yield srv


@dataclass
class Attempt:
    """A finished activity execution: its name, final attempt and the last failure."""

    activity: str
    attempt: int
    last_failure: str
    last_failure_type: str
    local: bool = False


async def activity_runs(temporal: Client, task_id: str) -> list[Attempt]:
    """Every step's activity of the task, from its history; a local one from its marker.

    Temporal writes an activity's started event once, for the attempt that ended it,
    with the failure of the attempt before.
    """
    names: dict[int, str] = {}
    runs = []
    converter = temporal.data_converter.payload_converter
    async for e in temporal.get_workflow_handle(task_id).fetch_history_events():
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker = e.marker_recorded_event_attributes
            if marker.marker_name == "core_local_activity":
                data = converter.from_payload(marker.details["data"].payloads[0], dict)
                if data["activity_type"] == ACTIVITY_OPTIONS_ACTIVITY:
                    continue  # the worker's settings, asked once: no step of the task
                runs.append(Attempt(data["activity_type"], data["attempt"], "", "", local=True))
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = e.activity_task_started_event_attributes
            failure = attrs.last_failure
            runs.append(
                Attempt(
                    names[attrs.scheduled_event_id],
                    attrs.attempt,
                    failure.message,
                    failure.application_failure_info.type,
                )
            )
    return runs


def recorded_failure(error: Exception) -> str:
    """What Temporal would record in history for ``error``, cause chain included."""
    failure = Failure()
    DataConverter.default.failure_converter.to_failure(
        error, DataConverter.default.payload_converter, failure
    )
    return str(failure)


THINKER = AgentSpec(
    name="thinker",
    description="Thinks hard.",
    tools=["read_file"],
    permission_mode="plan",
    reasoning_effort="medium",
    temperature=0.3,
    max_output_tokens=2000,
)


BEDROCK = "bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0"
VERTEX = "vertex:claude-sonnet-4-5@20250929"
WIRES = ["bedrock", "vertex"]
CLOUD_MODELS = {"bedrock": BEDROCK, "vertex": VERTEX}
CLOUD_VARIABLES = (
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK",
    "ANTHROPIC_BEDROCK_BASE_URL",
    "CLOUD_ML_REGION",
    "ANTHROPIC_VERTEX_PROJECT_ID",
    "ANTHROPIC_VERTEX_BASE_URL",
    "GOOGLE_OAUTH_ACCESS_TOKEN",
    "GOOGLE_APPLICATION_CREDENTIALS",
)


@contextlib.asynccontextmanager
async def cloud(
    monkeypatch: pytest.MonkeyPatch, wire: str, **options: Any
) -> AsyncIterator[FakeAnthropicServer]:
    """A fake cloud this process's providers call, with its credentials."""
    kind = FakeBedrockServer if wire == "bedrock" else FakeVertexServer
    async with kind(**options) as srv:
        for name in CLOUD_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        for name, value in srv.environment().items():
            monkeypatch.setenv(name, value)
        clear_provider_cache()
        try:
            yield srv
        finally:
            await close_providers()
