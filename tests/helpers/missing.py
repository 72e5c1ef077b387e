"""What a test needs from the machine: a skip here, a failure in CI.

A test that cannot run for want of something the machine lacks (a browser, root)
skips with a reason made by ``missing``. Where ``CI=true``, this module's
hook (a pytest plugin the suite's conftest loads) turns such a skip into a failure that
names what is missing: CI runs every test.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

MARK = "missing here: "
"""How a skip reason for something the machine lacks begins."""


def missing(what: str) -> str:
    """A skip reason saying the machine lacks ``what`` (and how to get it)."""
    return MARK + what


def in_ci() -> bool:
    """Whether the suite runs in CI (``CI=true``), where every test must run."""
    return os.environ.get("CI", "").lower() in ("true", "1")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """In CI, a test skipped for something the machine lacks fails, naming it.

    Such skips say so by their reason (``tests/helpers/missing.py``); others (a variant
    for another kind of machine) stay skips.
    """
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and in_ci()):
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    if MARK in reason:
        report.outcome = "failed"
        report.longrepr = (
            f"CI runs every test, and this one cannot run here: {reason.split(MARK, 1)[1]}"
        )
