"""A task held by a bug is said once in a worker's log, not at every retry.

When workflow code raises (a bug), Temporal's SDK logs the workflow task's failure
with its traceback, and Temporal retries the task: on a busy worker that would be the
same traceback again and again. The filter lets the first failure of a run with a
given error through (the traceback to fix it by) and drops its repeats; a different
error of the run, or another run, is said again.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

__all__ = ["HeldOnce", "say_held_once"]

_SDK_LOGGER = "temporalio.worker._workflow_instance"
_FAILURE = "WorkflowTaskFailure"
_KEPT = 10_000
"""Runs remembered (the oldest are forgotten: one of them may be said once more)."""


class HeldOnce(logging.Filter):
    """Drops repeated workflow task failures of one run with one error."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._said: OrderedDict[tuple[str, str], None] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "__temporal_error_identifier", None) != _FAILURE:
            return True
        details = getattr(record, "temporal_workflow", None) or {}
        run = str(details.get("run_id", "")) if isinstance(details, dict) else ""
        error = repr(record.exc_info[1]) if record.exc_info else record.getMessage()
        key = (run, error)
        with self._lock:
            if key in self._said:
                self._said.move_to_end(key)
                return False
            self._said[key] = None
            if len(self._said) > _KEPT:
                self._said.popitem(last=False)
        return True


_installed: HeldOnce | None = None


def say_held_once() -> None:
    """Install the filter on the SDK's workflow logger, once per process."""
    global _installed
    if _installed is None:
        _installed = HeldOnce()
        logging.getLogger(_SDK_LOGGER).addFilter(_installed)
