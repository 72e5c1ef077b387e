"""Model names: ``provider:model``, parsed without any provider SDK.

A client checks a spawn's model before spawning, and spans and metrics name the model
of a turn; none runs a provider, so the parser lives apart from the providers that do.

Besides the built-in providers, a name may start with an endpoint of the worker's
``SUBAGENTS_ENDPOINTS`` (``ollama:llama3.1``). Only a worker knows its endpoints: a
caller that passes none (``endpoints=None``, a client) takes any well-formed
``NAME:model``, and the worker refuses a name it has no endpoint for.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

from durable_subagents.errors import InvalidRequest

from .scripted import check_script

__all__ = [
    "CLAUDE_PLATFORMS",
    "ENDPOINT_NAME",
    "PROVIDERS",
    "claude_model",
    "named_model",
    "parse_model",
]

PROVIDERS = ("openai", "openai-responses", "anthropic", "bedrock", "vertex", "scripted")
"""Provider prefixes a model name may carry."""
CLAUDE_PLATFORMS = ("bedrock", "vertex")
"""Providers that run Claude through a cloud's API (Amazon Bedrock, Google Vertex AI)."""

ENDPOINT_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
"""An endpoint's name, the prefix of its models: ``ollama``, ``vllm-a``, ``gpu_2``."""

_VALID_FORMS = (
    "openai:<model>, openai-responses:<model>, anthropic:<model>, bedrock:<model id>, "
    "vertex:<model>, scripted[:script] or default"
)
_BEDROCK_PREFIX = re.compile(r"^(?:[a-z]{2,6}\.)?anthropic\.")
_BEDROCK_VERSION = re.compile(r"-v\d+(?::\d+)?$")


def claude_model(provider: str, model: str) -> str:
    """The Claude model a cloud's model id names, as Anthropic's API names it.

    What a model can do (how it thinks, its window) goes by its Claude name: Bedrock's
    ``us.anthropic.claude-sonnet-4-5-20250929-v1:0`` (a geography, the maker, a version
    suffix; an ARN's last part) and Vertex's ``claude-sonnet-4-5@20250929`` (a date
    after ``@``) are both ``claude-sonnet-4-5...``. Other providers' names are returned
    as they are.
    """
    if provider == "bedrock":
        name = model.rsplit("/", 1)[-1]
        return _BEDROCK_VERSION.sub("", _BEDROCK_PREFIX.sub("", name))
    if provider == "vertex":
        return model.partition("@")[0]
    return model


def parse_model(
    model: str,
    *,
    default_model: str | None = None,
    origin: str | None = None,
    endpoints: Collection[str] | None = None,
) -> tuple[str, str, str]:
    """Split a model name into provider, full name and the provider's model name.

    Pure: reads no environment, so a client can validate a name before spawning.

    Args:
        model: ``openai:<model>``, ``openai-responses:<model>``, ``anthropic:<model>``,
            ``bedrock:<model id>``, ``vertex:<model>``, ``scripted[:script]`` or
            ``default``.
        default_model: What ``default`` means (the worker's ``SUBAGENTS_MODEL``);
            None means ``scripted``.
        origin: Where ``model`` came from, named in the error (``SUBAGENTS_MODEL``,
            ``the agent 'x'``); None: the caller gave it.
        endpoints: The names of the worker's endpoints (``SUBAGENTS_ENDPOINTS``); None:
            not known here, so any well-formed endpoint name is taken.

    Returns:
        ``(provider, "provider:model", "model")``, where provider is a built-in
        provider or an endpoint's name; for ``scripted`` the third part is the script
        selector (empty for the default script).

    Raises:
        InvalidRequest: The name has no known provider or endpoint prefix, or no
            model part.
    """
    name = model.strip()
    if name == "default":
        if default_model is None or default_model.strip() in ("", "default"):
            name = "scripted"
        else:
            name = default_model.strip()
    if name == "scripted":
        return "scripted", "scripted", ""
    if name != model.strip():
        origin = "the worker's SUBAGENTS_MODEL"
    source = f" (from {origin})" if origin else ""
    provider, sep, rest = name.partition(":")
    if not sep or not _known(provider, endpoints):
        raise InvalidRequest(
            f"unknown model {name!r}{source}; use one of: {_VALID_FORMS} "
            f"(for example openai:gpt-4.1-mini or anthropic:claude-haiku-4-5), or "
            f"NAME:<model> for an endpoint of SUBAGENTS_ENDPOINTS{_endpoints_here(endpoints)}"
        )
    if provider == "scripted":
        check_script(rest)
        return "scripted", name, rest
    if not rest.strip():
        raise InvalidRequest(f"model {name!r}{source} names no model; use {provider}:<model>")
    return provider, name, rest.strip()


def _known(provider: str, endpoints: Collection[str] | None) -> bool:
    """Whether ``provider`` is a built-in provider or an endpoint.

    Where the endpoints are not known (None), any well-formed endpoint name is one.
    """
    if provider in PROVIDERS:
        return True
    if endpoints is None:
        return ENDPOINT_NAME.fullmatch(provider) is not None
    return provider in endpoints


def _endpoints_here(endpoints: Collection[str] | None) -> str:
    if endpoints is None:
        return ""
    names = sorted(set(endpoints) - set(PROVIDERS))
    return f" (this worker has: {', '.join(names)})" if names else " (this worker has none)"


def named_model(
    name: str,
    default_model: str | None,
    models: Iterable[str] = (),
    endpoints: Collection[str] = (),
) -> str:
    """How metrics and spans name a model: as configured, or ``<provider>:other``.

    A subagent's model may be its parent model's choice, and a server that answers to
    any name (llama.cpp's, a proxy) runs whatever it is: only a model a person
    configured on the worker is named, so no name a model chose leaves in telemetry.

    Args:
        name: The model of a turn (``provider:model``, ``default`` or ``scripted...``).
        default_model: The worker's ``SUBAGENTS_MODEL`` (None: ``scripted``).
        models: Other ``provider:model`` names a person configured on the worker.
        endpoints: The worker's endpoint names (``SUBAGENTS_ENDPOINTS``), which a
            person configured too.

    Returns:
        ``provider:model`` when it is the worker's default or among ``models``;
        ``scripted`` for any scripted model (never its script); else
        ``<provider>:other`` (``other:other`` without a known provider or endpoint).
    """
    full_name = _full_name(name, default_model)
    if full_name == "scripted":
        return "scripted"
    known = {_full_name(m, None) for m in (default_model or "", *models) if m}
    if full_name in known and full_name.partition(":")[2]:
        return full_name
    provider = full_name.partition(":")[0]
    if provider not in PROVIDERS and provider not in endpoints:
        return "other:other"
    return f"{provider}:other"


def _full_name(name: str, default_model: str | None) -> str:
    """``provider:model`` as the worker runs it; ``scripted`` for any script (unread)."""
    if name.strip() in ("", "default"):
        configured = (default_model or "").strip()
        name = configured if configured not in ("", "default") else "scripted"
    name = name.strip()
    provider = name.partition(":")[0]
    if provider == "scripted":
        return "scripted"
    try:
        return parse_model(name)[1]
    except InvalidRequest:
        return f"{provider}:" if provider in PROVIDERS else name
