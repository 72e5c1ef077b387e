"""The models a worker runs, checked before it starts: one line naming what to set."""

from __future__ import annotations

import os
from collections.abc import Mapping

from durable_subagents.config import Settings
from durable_subagents.errors import InvalidRequest
from durable_subagents.providers._allowlist import ModelAllowlist, parse_model_patterns
from durable_subagents.providers._base import missing_key
from durable_subagents.providers._cloud import credentials_problem, setup_problem
from durable_subagents.providers._endpoints import Endpoint, parse_endpoints
from durable_subagents.providers._names import CLAUDE_PLATFORMS, parse_model
from durable_subagents.providers._profiles import profile_named

__all__ = ["worker_endpoints", "worker_models"]


def worker_endpoints(settings: Settings) -> dict[str, Endpoint]:
    """The worker's endpoints (``SUBAGENTS_ENDPOINTS``), ``${VAR}`` expanded from its env.

    Raises:
        InvalidRequest: The declaration is unreadable or wrong, or a variable it names
            is unset: one line.
    """
    if settings.endpoints is None:
        return {}
    return parse_endpoints(settings.endpoints.get_secret_value(), os.environ)


def worker_models(
    settings: Settings, endpoints: Mapping[str, Endpoint] | None = None
) -> ModelAllowlist:
    """The models a worker with ``settings`` runs, if its default model can run.

    Reads the provider keys from the environment, as the worker's activities do, and
    the endpoints (``worker_endpoints``, unless given); for
    Claude on a cloud (``bedrock:``, ``vertex:``), named by the default model or by a
    pattern of ``SUBAGENTS_MODELS``, it checks the extra, the region, the project and
    that the cloud's credential chain finds credentials.

    Raises:
        InvalidRequest: The default model is missing (and the scripted model not
            enabled), unknown, not among ``SUBAGENTS_MODELS``, or lacks its key; a
            pattern of ``SUBAGENTS_MODELS`` names no provider; or a cloud the models
            name lacks its extra, settings or credentials; or
            ``SUBAGENTS_OPENAI_PROFILE`` names no profile; or ``SUBAGENTS_ENDPOINTS``
            is wrong. One line, naming the setting to change.
    """
    if endpoints is None:
        endpoints = worker_endpoints(settings)
    names = frozenset(endpoints)
    chosen = os.environ.get("SUBAGENTS_OPENAI_PROFILE", "").strip()
    if chosen:
        try:
            profile_named(chosen)
        except ValueError as err:
            raise InvalidRequest(f"SUBAGENTS_OPENAI_PROFILE={chosen}: {err}") from None
    allowlist = ModelAllowlist(
        parse_model_patterns(settings.models, names),
        settings.model,
        settings.allow_scripted,
        dict(endpoints),
    )
    _check_clouds(allowlist.patterns, settings.model)
    model = (settings.model or "").strip()
    if model in ("", "default"):
        if settings.allow_scripted:
            return allowlist
        raise InvalidRequest(
            "this worker has no model: set SUBAGENTS_MODEL (for example "
            "openai:gpt-4.1-mini or anthropic:claude-haiku-4-5), or "
            "SUBAGENTS_ALLOW_SCRIPTED=true to serve the offline scripted model"
        )
    try:
        provider, full_name, _ = parse_model(model, endpoints=names)
    except InvalidRequest as err:
        raise InvalidRequest(f"SUBAGENTS_MODEL={model}: {err}") from None
    if provider == "scripted":
        if settings.allow_scripted:
            return allowlist
        raise InvalidRequest(
            f"SUBAGENTS_MODEL={full_name.split(':', 1)[0]}: the offline scripted model is not "
            "enabled on this worker; set SUBAGENTS_MODEL to a real model, or "
            "SUBAGENTS_ALLOW_SCRIPTED=true"
        )
    if allowlist.patterns and not allowlist.matched(full_name):
        raise InvalidRequest(
            f"SUBAGENTS_MODEL={full_name} is not among SUBAGENTS_MODELS "
            f"({','.join(allowlist.patterns)}): add it there, or change SUBAGENTS_MODEL"
        )
    key = None if provider in endpoints else missing_key(provider)
    if key is not None:
        alternative = (
            " (or OPENAI_BASE_URL, for a server that needs none)"
            if provider in ("openai", "openai-responses")
            else ""
        )
        raise InvalidRequest(
            f"SUBAGENTS_MODEL={full_name} needs {key}: set it in the worker's "
            f"environment{alternative}, or change SUBAGENTS_MODEL"
        )
    return allowlist


def _check_clouds(patterns: tuple[str, ...], model: str | None) -> None:
    """Refuse a worker whose models name a cloud it cannot call (``*`` names none)."""
    named: dict[str, str] = {}
    for pattern in patterns:
        provider = pattern.partition(":")[0]
        if provider in CLAUDE_PLATFORMS:
            named.setdefault(provider, f"SUBAGENTS_MODELS allows {pattern}")
    provider = (model or "").strip().partition(":")[0]
    if provider in CLAUDE_PLATFORMS:
        named[provider] = f"SUBAGENTS_MODEL={(model or '').strip()}"
    for provider, origin in named.items():
        problem = setup_problem(provider) or credentials_problem(provider)
        if problem is not None:
            raise InvalidRequest(f"{origin}, but {problem.partition(': ')[2]}")
