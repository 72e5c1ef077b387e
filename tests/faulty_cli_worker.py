"""``subagents worker`` with the bug of ``faulty_worker`` planted in its workflow code.

Run as ``python -m tests.faulty_cli_worker WORKER_ARGS...``: the command's own
arguments after ``subagents worker`` (its settings from the environment as usual).
"""

from __future__ import annotations

import sys

import durable_subagents.policy as policy
from durable_subagents.cli import main
from tests.faulty_worker import broken_verdict

if __name__ == "__main__":
    policy.verdict = broken_verdict  # type: ignore[assignment]
    sys.argv = ["subagents", "worker", *sys.argv[1:]]
    main()
