"""What the project relies on in its dependencies: bounded majors, and SDK internals.

A new major of Temporal's SDK or of a model SDK is a reviewed upgrade, not something a
fresh install picks up; and the one private SDK attribute the providers touch,
``_idempotency_key``, is checked for the meaning they rely on, so an SDK that changes
it fails here, loudly, instead of sending requests that differ in silence.
"""

from __future__ import annotations

import inspect
import re
import tomllib
from importlib import import_module
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from durable_subagents.providers._stream import without_unsent_keys

ROOT = Path(__file__).parents[2]
BOUNDED = ("temporalio", "openai", "anthropic")
"""Dependencies whose next major may break the project: each has an upper bound."""


def requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [Requirement(r) for r in project["dependencies"]]
    return {r.name: r for r in found}


@pytest.mark.parametrize("name", BOUNDED)
def test_the_sdks_majors_are_bounded_above_the_installed_one(name: str) -> None:
    requirement = requirements()[name]
    uppers = [s for s in requirement.specifier if s.operator == "<"]
    assert uppers, f"{name} has no upper bound in pyproject.toml: {requirement}"
    installed = version(name)
    major = int(installed.split(".")[0])
    # below the next major, and the installed one within it
    assert [s.version for s in uppers] == [str(major + 1)], (requirement, installed)
    assert requirement.specifier.contains(installed), (requirement, installed)


def _clients() -> list[Any]:
    import anthropic
    import openai

    return [
        openai.AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9", max_retries=0),
        anthropic.AsyncAnthropic(api_key="k", base_url="http://127.0.0.1:9", max_retries=0),
    ]


@pytest.mark.parametrize("client", _clients(), ids=["openai", "anthropic"])
def test_idempotency_key_still_means_what_without_unsent_keys_relies_on(client: Any) -> None:
    """``without_unsent_keys`` (providers/_stream.py) replaces the SDK's private
    ``_idempotency_key`` with ``str`` on clients that name no idempotency header. That is
    sound only while:

    1. ``_idempotency_key`` is a method of no argument that makes the retry key;
    2. the SDK calls it for one thing: the key of a request's options;
    3. a key goes out only under the header the client names, and an empty one never;
    4. neither SDK's client names a header.

    If this fails after an SDK upgrade, read the SDK's ``_base_client.py``: fix or drop
    ``without_unsent_keys`` before the new version is allowed.
    """
    sdk = type(client).__module__.split(".")[0]
    method = inspect.getattr_static(type(client), "_idempotency_key", None)
    assert inspect.isfunction(method), f"{sdk}: _idempotency_key is no longer a method"
    base = inspect.getsource(inspect.getmodule(method))  # type: ignore[arg-type]
    assert list(inspect.signature(method).parameters) == ["self"], (
        f"{sdk}: _idempotency_key takes arguments now: {inspect.signature(method)}"
    )
    made = client._idempotency_key()
    assert isinstance(made, str) and re.fullmatch(r"stainless-python-retry-[0-9a-f-]{36}", made)

    calls = re.findall(r"^.*\b_idempotency_key\(.*$", base, re.M)
    uses = [c.strip() for c in calls if "def _idempotency_key" not in c]
    assert uses and set(uses) == {"input_options.idempotency_key = self._idempotency_key()"}, (
        f"{sdk} calls _idempotency_key for something else now: {uses}"
    )
    assert client._idempotency_header is None, f"{sdk}'s client names an idempotency header now"

    def sent(header: str | None, key: str) -> list[str]:
        """The idempotency headers of a request built with ``key`` under ``header``."""
        client._idempotency_header = header
        try:
            options = import_module(f"{sdk}._models").FinalRequestOptions.construct(
                method="post", url="/v1/x", json_data={}, idempotency_key=key
            )
            request = client._build_request(options)
        finally:
            client._idempotency_header = None
        return [f"{k}: {v}" for k, v in request.headers.items() if "idempotency" in k.lower()]

    assert sent("Idempotency-Key", "k-1") == ["idempotency-key: k-1"], f"{sdk} changed"
    assert sent("Idempotency-Key", "") == [], f"{sdk} sends an empty idempotency key now"
    assert sent(None, "k-1") == [], f"{sdk} sends a key with no header named now"

    without_unsent_keys(client)
    assert client._idempotency_key() == ""
