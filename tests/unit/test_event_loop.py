"""The event loop a CLI worker runs on: ``SUBAGENTS_EVENT_LOOP``."""

from __future__ import annotations

import asyncio
import inspect
import sys

import pytest
import typer
from pydantic import BaseModel, Field, ValidationError

from durable_subagents.cli._common import _first_error, make_settings, run
from durable_subagents.config import Settings
from durable_subagents.errors import InvalidRequest
from durable_subagents.runtime._event_loop import loop_factory, loop_name


async def _running_loop() -> str:
    return loop_name(asyncio.get_running_loop())


def test_auto_is_uvloop_where_it_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SUBAGENTS_EVENT_LOOP", raising=False)
    assert Settings().event_loop == "auto"
    assert run(_running_loop(), event_loop="auto") == "uvloop"
    assert run(_running_loop(), event_loop="uvloop") == "uvloop"
    assert run(_running_loop(), event_loop="asyncio") == "asyncio"
    assert run(_running_loop()) == "asyncio"  # a client command's


def test_without_uvloop_auto_falls_back_and_uvloop_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert loop_factory("auto") is None
    assert run(_running_loop(), event_loop="auto") == "asyncio"
    with pytest.raises(InvalidRequest, match=r"pip install uvloop.*SUBAGENTS_EVENT_LOOP=auto"):
        loop_factory("uvloop")
    coro = _running_loop()
    with pytest.raises(typer.Exit) as exit_info:
        run(coro, event_loop="uvloop")
    assert exit_info.value.exit_code == 1
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED  # no "never awaited"
    err = capsys.readouterr().err
    assert "SUBAGENTS_EVENT_LOOP=uvloop, but uvloop cannot be imported" in err
    assert len(err.strip().splitlines()) == 1


def test_an_unknown_loop_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBAGENTS_EVENT_LOOP", "trio")
    with pytest.raises(ValidationError, match="'auto', 'uvloop' or 'asyncio'"):
        Settings()
    with pytest.raises(typer.BadParameter) as caught:
        make_settings()
    assert str(caught.value) == (
        "SUBAGENTS_EVENT_LOOP=trio: Input should be 'auto', 'uvloop' or 'asyncio'"
    )


def test_a_bad_secret_is_named_without_its_value() -> None:
    class Secretive(BaseModel):
        secret: int = Field(validation_alias="SUBAGENTS_NOTIFY_SECRET")

    with pytest.raises(ValidationError) as caught:
        Secretive.model_validate({"SUBAGENTS_NOTIFY_SECRET": "hunter2-is-the-secret"})
    message = _first_error(caught.value)
    assert message.startswith("SUBAGENTS_NOTIFY_SECRET: Input should be a valid integer")
    assert "hunter2" not in message
