import json
from pathlib import Path

from inventory.models import Item

DEFAULT_PATH = Path("inventory.json")


def load(path: Path = DEFAULT_PATH) -> dict[str, Item]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {name: Item(name, qty) for name, qty in data.items()}


def save(items: dict[str, Item], path: Path = DEFAULT_PATH) -> None:
    # TODO: write to a temporary file and rename, so a crash cannot corrupt the store
    path.write_text(json.dumps({i.name: i.quantity for i in items.values()}, indent=2))
