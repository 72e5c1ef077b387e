"""The provider interface and the ``provider:model`` resolver.

A model name is ``openai:<model>``, ``openai-responses:<model>``,
``anthropic:<model>``, ``bedrock:<model id>``, ``vertex:<model>``, ``scripted[:script]``
or ``default`` (the worker's ``SUBAGENTS_MODEL``). Providers read their keys and
settings from the worker's environment when they are built, and are cached per
(provider, settings, key, idle timeout) so a worker reuses one HTTP client across turns.
Bedrock and Vertex read no credential here: their SDK clients find them. A model of an
endpoint (``SUBAGENTS_ENDPOINTS``, see ``_endpoints``) takes everything from its endpoint.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

from durable_subagents.errors import InvalidRequest
from durable_subagents.types import ModelRequest, ModelResponse

from ._cloud import aws_region, setup_problem
from ._endpoints import Endpoint
from ._errors import missing_key_error, model_request_error
from ._names import CLAUDE_PLATFORMS, PROVIDERS, parse_model
from ._profiles import detect_profile, profile_named
from .anthropic import AnthropicProvider
from .openai import OpenAIProvider
from .openai_responses import OpenAIResponsesProvider
from .scripted import ScriptedProvider

__all__ = [
    "PROVIDERS",
    "ModelProvider",
    "TextSink",
    "clear_provider_cache",
    "close_providers",
    "import_sdk",
    "missing_key",
    "parse_model",
    "resolve_provider",
]

_cache: dict[tuple[str, str, str, float | None], ModelProvider] = {}

TextSink = Callable[[str], None]
"""Receives the answer's text as it streams, one delta at a time (live text)."""


@runtime_checkable
class ModelProvider(Protocol):
    """One model API behind a provider-neutral request/response.

    Implementations translate ``ModelRequest`` to the provider's wire format, stream
    the answer, and raise ``temporalio.exceptions.ApplicationError`` for failures so
    Temporal's retry policy decides what happens next.
    """

    name: str
    """``openai``, ``openai-responses``, ``anthropic`` or ``scripted``."""

    async def complete(
        self,
        request: ModelRequest,
        on_text: TextSink | None = None,
        on_thinking: TextSink | None = None,
    ) -> ModelResponse:
        """Run one model turn.

        Args:
            request: The neutral request; ``request.model`` is the provider's own name.
            on_text: Called with each piece of the answer's text as it arrives; the
                pieces joined are the response's ``text``.
            on_thinking: Called with each piece of the model's thinking as it arrives
                (providers that show none never call it); the pieces joined are
                ``types.thinking_text`` of the response's ``reasoning``.

        Returns:
            The neutral response (text, tool calls, reasoning blocks, usage, stop
            reason). Its strings, and the pieces given to ``on_text`` and
            ``on_thinking``, hold no lone surrogate: they become U+FFFD where they
            arrive (``_text.encodable_response``), since no payload can carry one.
        """
        ...


def resolve_provider(
    model: str,
    *,
    default_model: str | None = None,
    idle_timeout: float | None = None,
    script_files: bool = False,
    prompt_cache_key: str = "auto",
    endpoints: Mapping[str, Endpoint] | None = None,
) -> tuple[ModelProvider, str, str]:
    """Find (or build) the provider for a model name.

    Runs on the worker: building an OpenAI (Chat Completions or Responses) or
    Anthropic provider reads ``OPENAI_API_KEY``/``OPENAI_BASE_URL`` or
    ``ANTHROPIC_API_KEY``/``ANTHROPIC_BASE_URL`` from the environment; Bedrock its
    region (``AWS_REGION``), Vertex ``CLOUD_ML_REGION`` and
    ``ANTHROPIC_VERTEX_PROJECT_ID`` (see ``_cloud``).

    Args:
        model: The task's model name (see ``parse_model``).
        default_model: The worker's ``SUBAGENTS_MODEL``, used for ``default``.
        idle_timeout: Seconds a streaming provider waits for data (response headers,
            then each stream event) before it abandons the attempt with a retryable
            error (the worker's ``SUBAGENTS_MODEL_IDLE_TIMEOUT``); None: no limit.
        script_files: Whether ``scripted:@FILE`` may be read (``SUBAGENTS_SCRIPT_FILES``).
        prompt_cache_key: Whether OpenAI requests carry ``prompt_cache_key``: ``on``,
            ``off``, or ``auto`` (only to api.openai.com; ``SUBAGENTS_PROMPT_CACHE_KEY``).
        endpoints: The worker's endpoints by name (``SUBAGENTS_ENDPOINTS``); a model
            whose prefix names none of them or a built-in provider is refused.

    Returns:
        ``(provider, full_name, provider_model)``; put ``provider_model`` into
        ``ModelRequest.model``.

    Raises:
        InvalidRequest: The model name is malformed, or names no provider or endpoint.
        temporalio.exceptions.ApplicationError: The provider's key, extra or region is
            not set on the worker (non-retryable, type ``ModelRequestError``).

    Example:
        >>> provider, full, name = resolve_provider("scripted:demo-explore")
        >>> (provider.name, full, name)
        ('scripted', 'scripted:demo-explore', 'demo-explore')
    """
    endpoints = endpoints or {}
    provider_name, full, provider_model = parse_model(
        model, default_model=default_model, endpoints=endpoints
    )
    if provider_name in endpoints:
        provider = _build_endpoint(endpoints[provider_name], idle_timeout, prompt_cache_key)
    else:
        provider = _build(provider_name, idle_timeout, script_files, prompt_cache_key)
    return provider, full, provider_model


def _fingerprint(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def missing_key(provider_name: str) -> str | None:
    """The variable this process must set to run ``provider_name``'s models, or None.

    An OpenAI-compatible server (``OPENAI_BASE_URL``) may need no key; Anthropic's API
    always does; the scripted model none.
    """
    if provider_name in ("openai", "openai-responses"):
        set_ = os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")
        return None if set_ else "OPENAI_API_KEY"
    if provider_name == "anthropic":
        return None if os.environ.get("ANTHROPIC_API_KEY") else "ANTHROPIC_API_KEY"
    return None


def _build(
    provider_name: str, idle_timeout: float | None, script_files: bool, prompt_cache_key: str
) -> ModelProvider:
    if provider_name in CLAUDE_PLATFORMS:
        return _build_cloud(provider_name, idle_timeout)
    if provider_name == "scripted":
        cache_key: tuple[str, str, str, float | None] = ("scripted", str(script_files), "", None)
        if cache_key not in _cache:
            _cache[cache_key] = ScriptedProvider(script_files=script_files)
        return _cache[cache_key]
    if provider_name in ("openai", "openai-responses"):
        base_url = os.environ.get("OPENAI_BASE_URL") or None
        key = os.environ.get("OPENAI_API_KEY") or ("not-needed" if base_url else None)
        if key is None:
            raise missing_key_error(provider_name, "OPENAI_API_KEY")
        official = base_url is None or "api.openai.com" in base_url
        send_key = prompt_cache_key == "on" or (prompt_cache_key == "auto" and official)
        chosen = os.environ.get("SUBAGENTS_OPENAI_PROFILE", "").strip()
        try:
            profile = profile_named(chosen) if chosen else detect_profile(base_url)
        except ValueError as err:
            raise InvalidRequest(f"SUBAGENTS_OPENAI_PROFILE={chosen}: {err}") from None
        cache_key = (
            provider_name,
            f"{base_url or ''} {send_key} {profile.name}",
            _fingerprint(key),
            idle_timeout,
        )
        if cache_key not in _cache:
            if provider_name == "openai":
                _cache[cache_key] = OpenAIProvider(
                    api_key=key,
                    base_url=base_url,
                    idle_timeout=idle_timeout,
                    prompt_cache_key=send_key,
                    profile=profile,
                )
            else:
                _cache[cache_key] = OpenAIResponsesProvider(
                    api_key=key,
                    base_url=base_url,
                    idle_timeout=idle_timeout,
                    prompt_cache_key=send_key,
                )
        return _cache[cache_key]
    base_url = os.environ.get("ANTHROPIC_BASE_URL") or None
    key = os.environ.get("ANTHROPIC_API_KEY") or None
    if key is None:
        raise missing_key_error("anthropic", "ANTHROPIC_API_KEY")
    cache_key = ("anthropic", base_url or "", _fingerprint(key), idle_timeout)
    if cache_key not in _cache:
        _cache[cache_key] = AnthropicProvider(
            api_key=key, base_url=base_url, idle_timeout=idle_timeout
        )
    return _cache[cache_key]


def _build_endpoint(
    endpoint: Endpoint, idle_timeout: float | None, prompt_cache_key: str
) -> ModelProvider:
    """The provider of an endpoint: its wire, with its URL, key, headers and profile."""
    key = endpoint.api_key or "not-needed"
    official = "api.openai.com" in endpoint.base_url
    send_key = prompt_cache_key == "on" or (prompt_cache_key == "auto" and official)
    profile = profile_named(endpoint.profile) if endpoint.profile else None
    settings = (
        f"{endpoint.name} {endpoint.base_url} {send_key} {endpoint.profile or ''} "
        f"{_fingerprint(repr(endpoint.headers))}"
    )
    cache_key = (f"endpoint:{endpoint.wire}", settings, _fingerprint(key), idle_timeout)
    if cache_key in _cache:
        return _cache[cache_key]
    headers = dict(endpoint.headers)
    provider: ModelProvider
    if endpoint.wire == "openai":
        provider = OpenAIProvider(
            api_key=key,
            base_url=endpoint.base_url,
            idle_timeout=idle_timeout,
            prompt_cache_key=send_key,
            profile=profile or detect_profile(endpoint.base_url),
            headers=headers,
        )
    elif endpoint.wire == "openai-responses":
        provider = OpenAIResponsesProvider(
            api_key=key,
            base_url=endpoint.base_url,
            idle_timeout=idle_timeout,
            prompt_cache_key=send_key,
            headers=headers,
        )
    else:
        provider = AnthropicProvider(
            api_key=key, base_url=endpoint.base_url, idle_timeout=idle_timeout, headers=headers
        )
    _cache[cache_key] = provider
    return provider


def _build_cloud(provider_name: str, idle_timeout: float | None) -> ModelProvider:
    """Claude on Bedrock or Vertex, with the settings of the worker's environment.

    Raises:
        temporalio.exceptions.ApplicationError: The extra, the region (or for Vertex
            without a token, google-auth) is missing: non-retryable, naming what to set.
    """
    problem = setup_problem(provider_name)
    if problem is not None:
        raise model_request_error(problem)
    cache_key: tuple[str, str, str, float | None]
    if provider_name == "bedrock":
        from .bedrock import BedrockProvider

        region = aws_region() or ""
        base_url = os.environ.get("ANTHROPIC_BEDROCK_BASE_URL") or None
        bearer = os.environ.get("AWS_BEARER_TOKEN_BEDROCK") or ""
        fingerprint = _fingerprint(bearer) if bearer else ""
        cache_key = ("bedrock", f"{region} {base_url or ''}", fingerprint, idle_timeout)
        if cache_key not in _cache:
            _cache[cache_key] = BedrockProvider(
                region=region, base_url=base_url, idle_timeout=idle_timeout
            )
        return _cache[cache_key]
    from .vertex import VertexProvider, vertex_settings

    settings = vertex_settings()
    token = settings.pop("access_token")
    cache_key = (
        "vertex",
        " ".join(str(v or "") for v in settings.values()),
        _fingerprint(token) if token else "",
        idle_timeout,
    )
    if cache_key not in _cache:
        _cache[cache_key] = VertexProvider(
            region=settings["region"] or "",
            project=settings["project"],
            access_token=token,
            base_url=settings["base_url"],
            idle_timeout=idle_timeout,
        )
    return _cache[cache_key]


def import_sdk(model: str | None, endpoints: Mapping[str, Endpoint] | None = None) -> None:
    """Import the SDK of the provider ``model`` names, if it has one.

    A provider imports its SDK when it is first built, so a worker loads only the SDKs
    of the providers its tasks name. A worker imports its default model's in a thread
    while it starts, so that its first task does not wait for it (OpenAI's took about
    half a second, Anthropic's two). A malformed name is left for the task that uses it.
    An endpoint's model (``endpoints``) imports its wire's SDK.
    """
    try:
        provider, _, _ = parse_model(model or "scripted", endpoints=endpoints or {})
    except InvalidRequest:
        return
    if endpoints and provider in endpoints:
        provider = endpoints[provider].wire
    if provider in ("openai", "openai-responses", "anthropic", *CLAUDE_PLATFORMS):
        module = provider.replace("-", "_")
        importlib.import_module(f"{__package__}.{module}").import_sdk()


def clear_provider_cache() -> None:
    """Forget cached providers (tests that change the environment call this)."""
    _cache.clear()


async def close_providers() -> None:
    """Close the HTTP sessions cached providers opened on the running loop, and forget them.

    Call it once the process's workers have stopped: an open aiohttp session is
    reported as "Unclosed client session" when the process exits. A later model turn
    builds a new provider.
    """
    providers = list(_cache.values())
    _cache.clear()
    for provider in providers:
        aclose = getattr(provider, "aclose", None)
        if aclose is not None:
            await aclose()
