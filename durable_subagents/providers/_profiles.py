"""What OpenAI-compatible Chat Completions servers do differently, by profile.

A profile lists the differences that break a tool loop: how a server reports usage,
whether it knows ``max_completion_tokens``. The rest
(tool-call ids missing or repeated, arguments streamed whole, ``reasoning_content``)
every profile takes as it comes, since a server may change them between releases. The
sources of each fact are in docs/models.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

__all__ = ["PROFILES", "Profile", "detect_profile", "profile_named"]

UsageMode = Literal["stream_options", "always", "never"]


@dataclass(frozen=True)
class Profile:
    """How to talk to one kind of OpenAI-compatible server.

    Attributes:
        name: The profile's name (``SUBAGENTS_OPENAI_PROFILE``).
        usage: ``stream_options``: usage comes in a last chunk when asked for with
            ``stream_options.include_usage``; ``always``: without asking (the option is
            not sent); ``never``: no usage, so it is estimated.
        max_tokens_field: ``max_completion_tokens`` (OpenAI's reasoning models refuse
            ``max_tokens``) or ``max_tokens`` (servers that do not know the new name).
    """

    name: str
    usage: UsageMode = "stream_options"
    max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens"


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("openai"),
        Profile("ollama", max_tokens_field="max_tokens"),
        Profile("vllm", max_tokens_field="max_tokens"),
        Profile("llamacpp", max_tokens_field="max_tokens"),
        Profile("litellm", max_tokens_field="max_tokens"),
        Profile("openrouter", usage="always", max_tokens_field="max_tokens"),
        Profile("compatible", max_tokens_field="max_tokens"),
    )
}
"""Every profile by name. ``compatible`` is any other server: the cautious choices."""


def profile_named(name: str) -> Profile:
    """The profile of a name, e.g. ``SUBAGENTS_OPENAI_PROFILE``'s value.

    Raises:
        ValueError: No such profile; the message lists those there are.
    """
    try:
        return PROFILES[name.strip().lower()]
    except KeyError:
        known = ", ".join(PROFILES)
        raise ValueError(f"unknown OpenAI-compatible profile {name!r}; known: {known}") from None


def detect_profile(base_url: str | None) -> Profile:
    """The profile a base URL suggests.

    No base URL or ``api.openai.com``: ``openai``. Port 11434 or a host named
    ``ollama``: ``ollama``. ``openrouter.ai``: ``openrouter``. Port 4000 or a host
    named ``litellm``: ``litellm``. Port 8000 or a host named ``vllm``: ``vllm``. Port
    8080 or a host named ``llama.cpp``, ``llamacpp`` or ``llama-server``:
    ``llamacpp``. Anything else: ``compatible``.
    """
    if not base_url:
        return PROFILES["openai"]
    parts = urlsplit(base_url if "://" in base_url else f"http://{base_url}")
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    labels = set(host.split("."))
    if host == "api.openai.com" or host.endswith(".openai.com"):
        return PROFILES["openai"]
    if host == "openrouter.ai" or host.endswith(".openrouter.ai"):
        return PROFILES["openrouter"]
    if port == 11434 or "ollama" in labels:
        return PROFILES["ollama"]
    if port == 4000 or "litellm" in labels:
        return PROFILES["litellm"]
    if labels & {"llamacpp", "llama-server", "llama-cpp"} or "llama.cpp" in host:
        return PROFILES["llamacpp"]
    if port == 8000 or "vllm" in labels:
        return PROFILES["vllm"]
    if port == 8080:
        return PROFILES["llamacpp"]
    return PROFILES["compatible"]
