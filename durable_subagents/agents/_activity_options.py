"""Activity options: the timeouts and retry policy of model turns, tool calls and compactions.

A worker sets them (``SUBAGENTS_ACTIVITY_OPTIONS``, ``create_worker(activity_options=...)``,
``SubagentsPlugin(activity_options=...)``); an agent may only narrow them (shorter
timeouts, fewer attempts). The workflow gets its worker's options once, recorded in its
history, and narrows them by its agent: that is what each activity is scheduled with.
Pure and deterministic: workflow code calls this module.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from durable_subagents.errors import InvalidRequest

__all__ = [
    "ACTIVITY_KINDS",
    "AGENT_KEYS",
    "DEFAULT_ACTIVITY_OPTIONS",
    "ActivityConfig",
    "ActivityKind",
    "ActivityOptions",
    "agent_activity_options",
    "check_agent_options",
    "parse_activity_options",
]

ActivityKind = Literal["model_turn", "tool_call", "compaction"]
ACTIVITY_KINDS: tuple[ActivityKind, ...] = ("model_turn", "tool_call", "compaction")
"""The activities whose options are settings."""

DURATIONS = (
    "start_to_close",
    "heartbeat",
    "schedule_to_close",
    "initial_interval",
    "maximum_interval",
)
"""The options that are durations, in seconds."""
KEYS = (*DURATIONS, "backoff_coefficient", "maximum_attempts")
AGENT_KEYS = ("start_to_close", "heartbeat", "schedule_to_close", "maximum_attempts")
"""What an agent may narrow; the retry intervals are the worker's alone."""

MAX_SECONDS = 365 * 24 * 3600.0
"""The longest duration an option takes: a year (Temporal would take longer ones, but
one is a typo, and a number too large for a duration would fail the task's workflow)."""
MAX_ATTEMPTS = 1_000_000
"""The most attempts an option takes (Temporal's field is a 32-bit integer)."""

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*")


def _seconds(where: str, value: object) -> float:
    """A duration as seconds: a number, or text such as ``30``, ``30s``, ``10m``, ``1h``."""
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (found := _DURATION.fullmatch(value)):
        seconds = float(found.group(1)) * _UNITS[found.group(2) or "s"]
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        raise InvalidRequest(
            f"{where}: {value!r} is not a duration above 0; give seconds (30) or a "
            "duration with its unit (500ms, 30s, 10m, 1h)"
        )
    if seconds > MAX_SECONDS:
        raise InvalidRequest(
            f"{where}: {value!r} is longer than a year; give at most {MAX_SECONDS:g} s "
            "(8760h), or leave schedule_to_close unset for no limit"
        )
    return seconds


def _check(data: object, where: str) -> dict[str, Any]:
    """One activity's options, each checked; ``where`` prefixes the names in messages."""
    if isinstance(data, ActivityConfig):
        return data.model_dump()
    if not isinstance(data, Mapping):
        raise InvalidRequest(
            f"{where.rstrip('.') or 'activity options'}: {data!r} is not a set of options; "
            f"give some of {', '.join(KEYS)}"
        )
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key not in KEYS:
            raise InvalidRequest(
                f"unknown activity option {where}{key!s}; known: {', '.join(KEYS)}"
            )
        if value is None:
            out[key] = None
        elif key in DURATIONS:
            out[key] = _seconds(f"{where}{key}", value)
        elif key == "backoff_coefficient":
            number: float | None = None
            if isinstance(value, int | float) and not isinstance(value, bool):
                number = value
            elif isinstance(value, str):
                try:
                    number = float(value)
                except ValueError:
                    number = None
            if number is None or not math.isfinite(number) or number < 1:
                raise InvalidRequest(
                    f"{where}backoff_coefficient: {value!r}; give a number of 1 or more "
                    "(each retry waits that many times longer than the one before; 2 doubles it)"
                )
            out[key] = float(number)
        else:
            attempts = value if isinstance(value, int) and not isinstance(value, bool) else None
            if isinstance(value, str) and value.strip().isdigit():
                attempts = int(value)
            if attempts is None or attempts < 0 or attempts > MAX_ATTEMPTS:
                raise InvalidRequest(
                    f"{where}maximum_attempts: {value!r}; give a whole number of attempts "
                    f"up to {MAX_ATTEMPTS:,} (1: no retry) or 0 for no limit"
                )
            out[key] = attempts
    _check_together(out, where)
    return out


def _check_together(
    values: Mapping[str, Any], where: str, defaults: Mapping[str, Any] | None = None
) -> None:
    """Options that contradict each other: a heartbeat longer than an attempt, and so on.

    ``defaults``: the values not given, named as defaults in the message.
    """
    defaults = defaults or {}

    def said(key: str) -> str:
        value = values.get(key)
        shown = defaults.get(key) if value is None else value
        return f"{where}{key} ({shown:g} s{', the default' if value is None else ''})"

    def get(key: str) -> float | None:
        value = values.get(key)
        return defaults.get(key) if value is None else value

    for short, long, fix in (
        ("heartbeat", "start_to_close", "a heartbeat timeout must fit in one attempt"),
        ("heartbeat", "schedule_to_close", "a heartbeat timeout must fit in all attempts"),
        ("start_to_close", "schedule_to_close", "one attempt cannot outlast all of them"),
        ("initial_interval", "maximum_interval", "the first wait cannot exceed the longest"),
    ):
        a, b = get(short), get(long)
        if values.get(short) is None and values.get(long) is None:
            continue  # both defaults: consistent by construction, or clamped (heartbeat)
        if short == "heartbeat" and values.get(short) is None:
            continue  # the default heartbeat is shortened to fit
        if a is not None and b is not None and a > b:
            raise InvalidRequest(
                f"{said(short)} is longer than {said(long)}: {fix}; shorten {where}{short} "
                f"or lengthen {where}{long}"
            )


class ActivityConfig(BaseModel):
    """One activity's timeouts and retry policy; a field left ``None`` keeps the default.

    For a worker, ``None`` is the library's default (``DEFAULT_ACTIVITY_OPTIONS``); for an
    agent, the worker's value. Durations are seconds (text such as ``10m`` is read too).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    start_to_close: float | None = None
    """Longest one attempt may run. A tool call's attempt is also bounded by the call's own
    ``timeout`` argument plus 60 s."""
    heartbeat: float | None = None
    """Longest an attempt may go without a heartbeat before Temporal counts its worker as
    gone and retries it elsewhere (not for reads run as local activities)."""
    schedule_to_close: float | None = None
    """Longest all attempts together may take, waits between them included (None: no
    limit)."""
    initial_interval: float | None = None
    """Wait before the first retry."""
    backoff_coefficient: float | None = None
    """How much longer each next wait is."""
    maximum_interval: float | None = None
    """Longest wait between two attempts (None for tool calls: Temporal's default, 100
    times ``initial_interval``)."""
    maximum_attempts: int | None = None
    """Attempts in all, the first included (1: no retry, 0: no limit)."""

    @model_validator(mode="before")
    @classmethod
    def _checked(cls, data: object) -> object:
        return _check(data, "") if not isinstance(data, ActivityConfig) else data

    def given(self) -> dict[str, Any]:
        """The options set here (not ``None``)."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class ActivityOptions(BaseModel):
    """The activity options of model turns, tool calls and compactions.

    Example::

        ActivityOptions(tool_call=ActivityConfig(start_to_close=300, maximum_attempts=1))
        parse_activity_options("tool_call.start_to_close=5m,model_turn.maximum_attempts=3")
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_turn: ActivityConfig = ActivityConfig()
    """A model turn (``model_turn``): the model's call, streamed, and the reads it runs."""
    tool_call: ActivityConfig = ActivityConfig()
    """A tool call (``run_tool``), run as an activity on the tool queue or, for a read, as
    a local activity."""
    compaction: ActivityConfig = ActivityConfig()
    """A compaction (``compact_context``): the summary is a model call."""

    @model_validator(mode="before")
    @classmethod
    def _checked(cls, data: object) -> object:
        if isinstance(data, ActivityOptions) or not isinstance(data, Mapping):
            return data
        out: dict[str, Any] = {}
        for kind, value in data.items():
            if kind not in ACTIVITY_KINDS:
                raise InvalidRequest(
                    f"unknown activity {kind!s} in activity options; known: "
                    f"{', '.join(ACTIVITY_KINDS)}"
                )
            out[kind] = _check(value, f"{kind}.") if value is not None else ActivityConfig()
        return out

    def of(self, kind: ActivityKind) -> ActivityConfig:
        """The options of one kind of activity."""
        config: ActivityConfig = getattr(self, kind)
        return config

    def with_defaults(self) -> ActivityOptions:
        """Every option set: these, and ``DEFAULT_ACTIVITY_OPTIONS`` where these have none.

        A default heartbeat timeout longer than a start-to-close timeout set here is
        shortened to it.

        Raises:
            InvalidRequest: An option set here contradicts a default (a heartbeat longer
                than the default start-to-close).
        """
        out: dict[str, ActivityConfig] = {}
        for kind in ACTIVITY_KINDS:
            given = self.of(kind).given()
            defaults = DEFAULT_ACTIVITY_OPTIONS.of(kind).model_dump()
            _check_together(given, f"{kind}.", defaults)
            merged = {**defaults, **given}
            out[kind] = ActivityConfig.model_construct(**_fitted(merged))
        return ActivityOptions.model_construct(None, **out)

    def narrowed(self, agent: ActivityOptions | None) -> tuple[ActivityOptions, list[str]]:
        """These options (every one set) narrowed by an agent's: the shorter, the fewer.

        Returns:
            The options, and what the agent asked for beyond them (kept at these).
        """
        if agent is None:
            return self, []
        out: dict[str, ActivityConfig] = {}
        wider: list[str] = []
        for kind in ACTIVITY_KINDS:
            values = self.of(kind).model_dump()
            for key, asked in agent.of(kind).given().items():
                have = values[key]
                if key == "maximum_attempts":
                    narrower = have == 0 or (asked != 0 and asked < have)
                else:
                    narrower = have is None or asked < have
                if narrower:
                    values[key] = asked
                elif asked != have:
                    wider.append(f"{kind}.{key} {asked:g} (kept at {have:g})")
            out[kind] = ActivityConfig.model_construct(**_fitted(values))
        return ActivityOptions.model_construct(None, **out), wider

    def changed(self) -> dict[str, Any]:
        """``kind.option`` -> value for what differs from the defaults (for a log line)."""
        out: dict[str, Any] = {}
        for kind in ACTIVITY_KINDS:
            default = DEFAULT_ACTIVITY_OPTIONS.of(kind).model_dump()
            for key, value in self.of(kind).model_dump().items():
                if value != default[key]:
                    out[f"{kind}.{key}"] = value
        return out


def _fitted(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with the heartbeat timeout no longer than an attempt, or all of them."""
    bounds = [values[k] for k in ("start_to_close", "schedule_to_close") if values.get(k)]
    if values.get("heartbeat") is not None and bounds:
        values["heartbeat"] = min(values["heartbeat"], *bounds)
    return values


def _model_defaults() -> ActivityConfig:
    return ActivityConfig(
        start_to_close=600,
        heartbeat=15,
        schedule_to_close=None,
        initial_interval=1,
        backoff_coefficient=2,
        maximum_interval=60,
        maximum_attempts=10,
    )


DEFAULT_ACTIVITY_OPTIONS = ActivityOptions(
    model_turn=_model_defaults(),
    tool_call=ActivityConfig(
        start_to_close=660,
        heartbeat=10,
        schedule_to_close=None,
        initial_interval=1,
        backoff_coefficient=2,
        maximum_interval=None,
        maximum_attempts=3,
    ),
    compaction=_model_defaults(),
)
"""The options a worker gives unless configured otherwise (those of 0.2.0). A tool call's
attempt runs at most its own ``timeout`` argument (120 s unless the model asks for up to
600) plus 60 s, so 660 s bounds none of them."""


def parse_activity_options(value: object) -> ActivityOptions:
    """Activity options from what a setting holds, checked, every option set.

    Takes an ``ActivityOptions``, a mapping (``{"tool_call": {"start_to_close": 30}}``),
    JSON of one, or ``kind.option=value`` pairs separated by commas
    (``tool_call.start_to_close=30s,model_turn.maximum_attempts=3``); empty: the defaults.

    Raises:
        InvalidRequest: an unknown activity or option, a value out of range, or options
            that contradict each other; the message names the option and what to give.
    """
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as err:
                raise InvalidRequest(
                    f"activity options: not valid JSON ({err.msg}); give JSON such as "
                    '{"tool_call": {"start_to_close": 30}} or tool_call.start_to_close=30'
                ) from None
        else:
            value = _pairs(text)
    if value is None:
        value = {}
    try:
        options = ActivityOptions.model_validate(value)
    except ValidationError as err:
        raise InvalidRequest(_first_message(err)) from None
    return options.with_defaults()


def _pairs(text: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for entry in text.split(","):
        if not entry.strip():
            continue
        name, sep, setting = entry.partition("=")
        kind, dot, key = name.strip().partition(".")
        if not sep or not dot or not key:
            raise InvalidRequest(
                f"activity options: {entry.strip()!r} is not kind.option=value; e.g. "
                "tool_call.start_to_close=30s (kinds: " + ", ".join(ACTIVITY_KINDS) + ")"
            )
        out.setdefault(kind, {})[key] = setting.strip()
    return out


def _first_message(err: ValidationError) -> str:
    """Our own message where a check of ours failed, else pydantic's first, on one line."""
    first = err.errors()[0]
    cause = first.get("ctx", {}).get("error")
    if cause is not None:
        return str(cause)
    where = ".".join(str(p) for p in first.get("loc", ()))
    return f"activity options: {where}: {first['msg']}".replace("\n", " ")


def check_agent_options(options: ActivityOptions) -> ActivityOptions:
    """An agent's activity options, if they hold only what an agent may narrow.

    Raises:
        InvalidRequest: A retry interval or backoff is set: those are the worker's.
    """
    for kind in ACTIVITY_KINDS:
        for key in options.of(kind).given():
            if key not in AGENT_KEYS:
                raise InvalidRequest(
                    f"activity_options: an agent may narrow {', '.join(AGENT_KEYS)}, "
                    f"not {kind}.{key}: retry intervals are the worker's "
                    "(SUBAGENTS_ACTIVITY_OPTIONS); remove it from the agent"
                )
    return options


def agent_activity_options(value: object) -> ActivityOptions:
    """An agent's activity options from what its file holds, checked (none defaulted).

    Raises:
        InvalidRequest: An unknown activity or option, a value out of range, or an
            option an agent may not set; the message names it and what to give.
    """
    try:
        options = ActivityOptions.model_validate(value)
    except ValidationError as err:
        raise InvalidRequest(_first_message(err)) from None
    return check_agent_options(options)
