"""Which models a worker runs: ``SUBAGENTS_MODELS``, its default and the scripted model.

A worker pays for every model turn it runs, so it runs only the models its operator
allows: its default model (``SUBAGENTS_MODEL``), the models ``SUBAGENTS_MODELS``'
patterns match, and the offline ``scripted`` model only where it is enabled
(``subagents dev``, ``demo``, tests, ``SUBAGENTS_ALLOW_SCRIPTED``). Pure: no SDK, no
environment; clients check a spawn with it too when they are given the same settings.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from durable_subagents.errors import InvalidRequest

from ._names import ENDPOINT_NAME, PROVIDERS, parse_model

if TYPE_CHECKING:
    from ._endpoints import Endpoint

__all__ = ["ModelAllowlist", "parse_model_patterns"]


def parse_model_patterns(text: str, endpoints: Collection[str] | None = None) -> tuple[str, ...]:
    """``SUBAGENTS_MODELS``' patterns, checked: ``openai:gpt-4.1*,anthropic:*`` or ``*``.

    Args:
        text: The setting's value.
        endpoints: The worker's endpoint names, which patterns may name too; None: not
            known here (a client), so any well-formed endpoint name is taken.

    Raises:
        InvalidRequest: A pattern names no known provider or endpoint; the message says
            what to give.
    """
    patterns = tuple(p.strip() for p in text.split(",") if p.strip())
    for pattern in patterns:
        provider, sep, model = pattern.partition(":")
        if pattern == "*" or (sep and model and _named(provider, endpoints)):
            continue
        here = "" if endpoints is None else f" ({', '.join(sorted(endpoints)) or 'none'} here)"
        raise InvalidRequest(
            f"SUBAGENTS_MODELS: {pattern!r} is not a model pattern; give provider:model "
            "patterns separated by commas (openai:gpt-4.1*,anthropic:*), or * for any "
            f"model of {', '.join(p for p in PROVIDERS if p != 'scripted')} or of an "
            f"endpoint of SUBAGENTS_ENDPOINTS{here}"
        )
    return patterns


def _named(provider: str, endpoints: Collection[str] | None) -> bool:
    if provider in PROVIDERS:
        return True
    if endpoints is None:
        return ENDPOINT_NAME.fullmatch(provider) is not None
    return provider in endpoints


@dataclass(frozen=True)
class ModelAllowlist:
    """The models a worker runs.

    Attributes:
        patterns: ``SUBAGENTS_MODELS``' glob patterns over ``provider:model`` (empty:
            the default model only).
        default_model: The worker's ``SUBAGENTS_MODEL`` (None: scripted, if enabled).
        scripted: Whether the offline ``scripted`` model runs here.
        endpoints: The worker's endpoints by name (``SUBAGENTS_ENDPOINTS``), where
            their models go; None: not known (a client's view), so a well-formed
            endpoint name is taken.
    """

    patterns: tuple[str, ...] = ()
    default_model: str | None = None
    scripted: bool = False
    endpoints: Mapping[str, Endpoint] | None = None

    def refusal(self, model: str) -> str | None:
        """Why ``model`` (a task's model name) does not run here; None if it does.

        Raises:
            InvalidRequest: The name itself is malformed (see ``parse_model``).
        """
        provider, full_name, _ = parse_model(
            model, default_model=self.default_model, endpoints=self.endpoints
        )
        if provider == "scripted":
            if self.scripted:
                return None
            return (
                f"model {_shown(full_name)!r} is not allowed: the offline scripted model "
                "runs only where it is enabled (subagents dev, subagents demo, or "
                "SUBAGENTS_ALLOW_SCRIPTED=true on the workers)"
            )
        if self.allows(full_name):
            return None
        if self.patterns:
            return (
                f"model {full_name!r} is not allowed: SUBAGENTS_MODELS allows "
                f"{','.join(self.patterns)}; ask for one of those, or add it to "
                "SUBAGENTS_MODELS on the workers"
            )
        default = self.default_model or "scripted"
        return (
            f"model {full_name!r} is not allowed: this worker runs its SUBAGENTS_MODEL "
            f"({default}) only; ask for that one, or set SUBAGENTS_MODELS on the workers "
            f"(e.g. {provider}:*) to allow others"
        )

    def allows(self, full_name: str) -> bool:
        """Whether a ``provider:model`` name (not scripted) is the default or matched."""
        default = self.default_model
        if default and full_name == parse_model(default, endpoints=self.endpoints)[1]:
            return True
        return self.matched(full_name)

    def matched(self, full_name: str) -> bool:
        """Whether a pattern of ``SUBAGENTS_MODELS`` matches ``full_name``."""
        return any(fnmatch.fnmatchcase(full_name, p) for p in self.patterns)


def _shown(full_name: str) -> str:
    """A scripted model's name without its script, which may be long."""
    return "scripted" if full_name.startswith("scripted") else full_name
