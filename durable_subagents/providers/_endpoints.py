"""Named model endpoints: ``SUBAGENTS_ENDPOINTS``, so one worker serves several servers.

An endpoint is a server a worker reaches by name: ``ollama:llama3.1`` goes to the
endpoint named ``ollama``, with that endpoint's wire, base URL, key, headers and quirk
profile. The declaration is TOML or JSON, given as a file path or inline::

    [endpoints.ollama]
    wire = "openai"                   # openai (Chat Completions), openai-responses, anthropic
    base_url = "http://localhost:11434/v1"
    profile = "ollama"                # optional, wire openai only; else from the URL

    [endpoints.vllm-a]
    wire = "openai"
    base_url = "http://gpu-a:8000/v1"
    api_key = "${VLLM_A_KEY}"         # ${VAR} and ${VAR:-default}, from the worker's env
    headers = { "X-Team" = "${TEAM:-research}" }

An endpoint may not take a built-in provider's name, unless it says ``override =
true`` and speaks that provider's own wire (``openai``, ``openai-responses`` or
``anthropic``): then that provider's models go to it instead of the ``OPENAI_*`` or
``ANTHROPIC_*`` variables' server. ``bedrock``, ``vertex``, ``scripted`` and
``default`` are never endpoints.

Endpoints are the worker's resources, like MCP servers: their keys and headers never
enter a workflow's input, history, memo, span or log; a task carries only the model's
name. Anything wrong is one ``InvalidRequest`` line when the worker starts.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from durable_subagents.connection._setting_values import expand_variables
from durable_subagents.errors import InvalidRequest

from ._names import ENDPOINT_NAME, PROVIDERS
from ._profiles import PROFILES

__all__ = ["OVERRIDABLE", "WIRES", "Endpoint", "parse_endpoints"]

WIRES = ("openai", "openai-responses", "anthropic")
"""What an endpoint speaks: Chat Completions, the Responses API, Anthropic Messages."""
OVERRIDABLE = WIRES
"""Built-in providers an endpoint may replace (``override = true``, the same wire)."""
MAX_FILE_BYTES = 1 << 20
"""A larger endpoints file is not read."""

_SETTING = "SUBAGENTS_ENDPOINTS"
_FIELDS = {"wire", "base_url", "api_key", "profile", "headers", "override"}


@dataclass(frozen=True)
class Endpoint:
    """One server a worker's models may name, its ``${VAR}`` expanded.

    Attributes:
        name: The prefix of its models (``ollama`` in ``ollama:llama3.1``).
        wire: ``openai`` (Chat Completions), ``openai-responses`` or ``anthropic``.
        base_url: The server's API root, e.g. ``http://localhost:11434/v1``.
        api_key: The key it is sent (None: the server needs none).
        profile: The OpenAI-compatible quirk profile (wire ``openai``); None: the one
            the base URL suggests.
        headers: Sent with every request (may hold secrets).
        override: Whether it replaces the built-in provider of its name.
    """

    name: str
    wire: str
    base_url: str
    api_key: str | None = field(default=None, repr=False)
    profile: str | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    override: bool = False

    @property
    def secrets(self) -> list[str]:
        """What a provider's error messages must never show: the key, header values."""
        return [s for s in (self.api_key, *(v for _, v in self.headers)) if s]


def parse_endpoints(text: str, environ: Mapping[str, str]) -> dict[str, Endpoint]:
    """``SUBAGENTS_ENDPOINTS``' endpoints, by name, expanded from ``environ``.

    ``text`` is inline JSON when it starts with ``{``, inline TOML when it starts with
    ``[`` or holds a line break, else the path of a file: JSON when its name ends in
    ``.json``, TOML otherwise. Empty: no endpoints.

    Raises:
        InvalidRequest: One line naming the file (or the inline value), the endpoint and
            what is wrong: unreadable, not TOML or JSON, an unknown field or wire, a
            malformed or duplicate name, a built-in's name without ``override``, an
            unset ``${VAR}``.
    """
    text = text.strip()
    if not text:
        return {}
    document, where = _load(text)
    declared = document.get("endpoints", {})
    extra = sorted(set(document) - {"endpoints"})
    if extra or not isinstance(declared, dict):
        raise InvalidRequest(
            f"{_SETTING} ({where}): expected tables [endpoints.NAME] (JSON: "
            f'{{"endpoints": {{"NAME": {{...}}}}}}), found {", ".join(extra) or "endpoints"!r}'
        )
    endpoints: dict[str, Endpoint] = {}
    for name, raw in declared.items():
        # A name twice is refused by the parsers (tomllib; json through _pairs).
        endpoints[name] = _endpoint(name, raw, environ, f"{_SETTING} ({where}): endpoint {name!r}")
    return endpoints


def _load(text: str) -> tuple[dict[str, Any], str]:
    """The document and how to name where it came from."""
    if text.startswith("{"):
        return _parse(text, "json", "inline JSON"), "inline JSON"
    if text.startswith("[") or "\n" in text:
        return _parse(text, "toml", "inline TOML"), "inline TOML"
    path = Path(text).expanduser()
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise InvalidRequest(
            f"{_SETTING}={text}: cannot read the file ({err.strerror or err}); give the path "
            "of a TOML or JSON file, or the declaration itself (inline JSON starts with "
            "{, inline TOML with [endpoints.NAME])"
        ) from None
    if len(data) > MAX_FILE_BYTES:
        raise InvalidRequest(f"{_SETTING}={text}: larger than {MAX_FILE_BYTES >> 10} KiB")
    kind = "json" if path.suffix.lower() == ".json" else "toml"
    try:
        decoded = data.decode()
    except UnicodeDecodeError:
        raise InvalidRequest(f"{_SETTING}={text}: not UTF-8 text") from None
    return _parse(decoded, kind, str(path)), str(path)


def _parse(text: str, kind: str, where: str) -> dict[str, Any]:
    try:
        if kind == "json":
            loaded = json.loads(text, object_pairs_hook=_pairs)
        else:
            loaded = tomllib.loads(text)
    except _Duplicate as err:
        raise InvalidRequest(f"{_SETTING} ({where}): {err}") from None
    except (ValueError, RecursionError) as err:
        # tomllib's and json's messages say where (line and column) and what.
        raise InvalidRequest(f"{_SETTING} ({where}): not valid {kind.upper()}: {err}") from None
    if not isinstance(loaded, dict):
        raise InvalidRequest(f"{_SETTING} ({where}): not a {kind.upper()} object")
    return loaded


class _Duplicate(ValueError):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object that refuses a repeated key (TOML refuses one itself)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(f"{key!r} is declared twice")
        out[key] = value
    return out


def _endpoint(name: object, raw: object, environ: Mapping[str, str], where: str) -> Endpoint:
    if not isinstance(name, str) or not ENDPOINT_NAME.fullmatch(name):
        raise InvalidRequest(
            f"{where}: not an endpoint name; use lower-case letters, digits, - and _, "
            "starting with a letter (at most 32), e.g. ollama or vllm-a"
        )
    if not isinstance(raw, dict):
        raise InvalidRequest(f"{where}: not a table of fields")
    unknown = sorted(set(raw) - _FIELDS)
    if unknown:
        raise InvalidRequest(
            f"{where}: unknown field {unknown[0]!r}; the fields are {', '.join(sorted(_FIELDS))}"
        )
    wire = raw.get("wire")
    if wire not in WIRES:
        raise InvalidRequest(
            f"{where}: wire {wire!r} is not one we speak; use one of {', '.join(WIRES)}"
        )
    override = raw.get("override", False)
    if not isinstance(override, bool):
        raise InvalidRequest(f"{where}: override must be true or false")
    if name in PROVIDERS or name == "default":
        if not override or name not in OVERRIDABLE:
            can = (
                f"set override = true to send {name}: models to this endpoint"
                if name in OVERRIDABLE
                else "it cannot be replaced"
            )
            raise InvalidRequest(f"{where}: {name!r} is a built-in provider's name ({can})")
        if wire != name:
            raise InvalidRequest(f"{where}: an override of {name} speaks wire {name!r}")
    elif override:
        raise InvalidRequest(f"{where}: override = true is only for a built-in provider's name")
    missing: list[str] = []
    strings: dict[str, str] = {}
    for key in ("base_url", "api_key", "profile"):
        value = raw.get(key)
        if value is not None and not isinstance(value, str):
            raise InvalidRequest(f"{where}: {key} must be a string")
        if value is not None:
            strings[key] = expand_variables(value, environ, missing)
    headers = raw.get("headers", {})
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise InvalidRequest(f"{where}: headers must be a table of strings")
    expanded = tuple((k, expand_variables(v, environ, missing)) for k, v in headers.items())
    if missing:
        raise InvalidRequest(
            f"{where}: the worker's environment lacks {', '.join(sorted(set(missing)))} "
            "(set it, or give a default: ${VAR:-default})"
        )
    base_url = strings.get("base_url", "").strip()
    if not base_url.startswith(("http://", "https://")):
        raise InvalidRequest(f"{where}: base_url must be an http:// or https:// URL")
    profile = strings.get("profile")
    if profile is not None:
        if wire != "openai":
            raise InvalidRequest(f"{where}: profile is for wire 'openai' (Chat Completions)")
        if profile.strip().lower() not in PROFILES:
            raise InvalidRequest(
                f"{where}: unknown profile {profile!r}; known: {', '.join(PROFILES)}"
            )
        profile = profile.strip().lower()
    return Endpoint(
        name=name,
        wire=wire,
        base_url=base_url,
        api_key=strings.get("api_key") or None,
        profile=profile,
        headers=expanded,
        override=override,
    )
