"""Recorded workflow histories (``record.py`` records them; ``test_replay`` replays them)."""

from pathlib import Path

HISTORIES = sorted(Path(__file__).parent.glob("*.json"))
"""Every recorded history file, by name."""
