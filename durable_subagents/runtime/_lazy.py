"""Modules imported when first used, from any code, workflow code included.

A module that only some paths need (the bash parser, JSON Schema, PyYAML) is imported
by its first use, so that a client or ``subagents --help`` never pays for it. Such a
use can run inside Temporal's workflow sandbox, which would import the module afresh
for the workflow and refuse what it does at import time; it is imported passed
through instead, as the package itself is.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from temporalio import workflow

__all__ = ["imported"]


def imported(name: str) -> ModuleType:
    """The module ``name``, imported (passed through any workflow sandbox) if need be."""
    module = sys.modules.get(name)
    if module is None:
        with workflow.unsafe.imports_passed_through():
            module = importlib.import_module(name)
    return module
