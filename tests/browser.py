"""The chromium that browser tests drive: Debian's, found on PATH (never a download)."""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

from .helpers.missing import missing


def _chromium() -> str | None:
    for candidate in (shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


CHROMIUM = _chromium()
"""The chromium binary, or None where there is none."""

needs_browser = pytest.mark.skipif(
    CHROMIUM is None or importlib.util.find_spec("playwright") is None,
    reason=missing(
        "a chromium binary on PATH (Debian: apt-get install chromium) and playwright "
        "(pip install -e '.[dev]'); playwright's own browsers are never downloaded"
    ),
)
"""Skips a test that drives a browser where it cannot."""
