"""Where the project keeps its data on this machine (a leaf module: tools use it too)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

__all__ = ["default_data_dir"]


def default_data_dir() -> Path:
    """The per-user data directory (``SUBAGENTS_DATA_DIR`` overrides it)."""
    env = os.environ.get("SUBAGENTS_DATA_DIR")
    return Path(env) if env else Path(platformdirs.user_data_dir("durable-subagents"))
