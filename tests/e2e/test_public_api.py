"""The worker side of the package is loaded only when asked for, in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys


def test_the_worker_side_is_loaded_only_when_asked_for() -> None:
    """``import durable_subagents`` stays a client's import: the worker's names load
    when first used."""
    code = (
        "import sys, durable_subagents\n"
        "assert 'durable_subagents.worker' not in sys.modules\n"
        "assert 'durable_subagents.tools' not in sys.modules\n"
        "durable_subagents.tool\n"
        "assert 'durable_subagents.tools' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
