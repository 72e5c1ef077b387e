"""The unit tests start no server: one that asks for the dev server belongs in integration."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse a unit test whose fixtures start the session's dev server.

    ``pytest tests/unit`` runs in seconds because nothing here starts Temporal; a test
    that needs it (through ``settings``, ``client``, ``worker`` or ``dev_server``) is an
    integration test.
    """
    for item in items:
        if item.path.is_relative_to(HERE) and "dev_server" in getattr(item, "fixturenames", ()):
            raise pytest.UsageError(
                f"{item.nodeid} asks for the dev server: move it to tests/integration"
            )
