"""Model timeouts are worker settings, read from the settings alone."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from durable_subagents.config import Settings

# ------------------------------------------------------------------ settings


def test_model_timeouts_are_worker_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SUBAGENTS_MODEL_IDLE_TIMEOUT", raising=False)
    monkeypatch.delenv("SUBAGENTS_MODEL_TURN_TIMEOUT", raising=False)
    assert Settings().model_idle_timeout == 120.0
    assert Settings().model_turn_timeout is None
    monkeypatch.setenv("SUBAGENTS_MODEL_IDLE_TIMEOUT", "7.5")
    monkeypatch.setenv("SUBAGENTS_MODEL_TURN_TIMEOUT", "300")
    assert (Settings().model_idle_timeout, Settings().model_turn_timeout) == (7.5, 300.0)
    monkeypatch.setenv("SUBAGENTS_MODEL_TURN_TIMEOUT", " ")
    assert Settings().model_turn_timeout is None
    monkeypatch.setenv("SUBAGENTS_MODEL_IDLE_TIMEOUT", "0")
    with pytest.raises(ValidationError):
        Settings()
