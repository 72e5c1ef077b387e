"""Model names: ``provider:model``, parsed without any provider SDK.

A client checks a spawn's model before spawning, and a span names the model of a turn;
neither runs a provider, so the parser lives apart from the providers that do.
"""

from __future__ import annotations

from durable_subagents.errors import InvalidRequest

from .scripted import check_script

__all__ = ["PROVIDERS", "parse_model"]

PROVIDERS = ("openai", "anthropic", "scripted")
"""Provider prefixes a model name may carry."""

_VALID_FORMS = "openai:<model>, anthropic:<model>, scripted[:script] or default"


def parse_model(model: str, *, default_model: str | None = None) -> tuple[str, str, str]:
    """Split a model name into provider, full name and the provider's model name.

    Pure: reads no environment, so a client can validate a name before spawning.

    Args:
        model: ``openai:<model>``, ``anthropic:<model>``, ``scripted[:script]`` or
            ``default``.
        default_model: What ``default`` means (the worker's ``SUBAGENTS_MODEL``);
            None means ``scripted``.

    Returns:
        ``(provider, "provider:model", "model")``; for ``scripted`` the third part is
        the script selector (empty for the default script).

    Raises:
        InvalidRequest: The name has no known provider prefix or no model part.
    """
    name = model.strip()
    if name == "default":
        if default_model is None or default_model.strip() in ("", "default"):
            name = "scripted"
        else:
            name = default_model.strip()
    if name == "scripted":
        return "scripted", "scripted", ""
    provider, sep, rest = name.partition(":")
    if not sep or provider not in PROVIDERS:
        origin = " (from the worker's SUBAGENTS_MODEL)" if name != model.strip() else ""
        raise InvalidRequest(
            f"unknown model {name!r}{origin}; use one of: {_VALID_FORMS} "
            f"(for example openai:gpt-4.1-mini or anthropic:claude-haiku-4-5)"
        )
    if provider == "scripted":
        check_script(rest)
        return "scripted", name, rest
    if not rest.strip():
        raise InvalidRequest(f"model {model!r} names no model; use {provider}:<model>")
    return provider, name, rest.strip()
