import sys

from inventory import store
from inventory.models import Item, OutOfStock


def main(argv: list[str]) -> int:
    items = store.load()
    command, *args = argv or ["report"]
    if command == "add":
        name, count = args[0], int(args[1])
        items.setdefault(name, Item(name)).quantity += count
    elif command == "remove":
        name, count = args[0], int(args[1])
        try:
            items[name].remove(count)
        except (KeyError, OutOfStock) as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    elif command == "report":
        for item in sorted(items.values(), key=lambda i: i.name):
            print(f"{item.name:20} {item.quantity:5}")
        return 0
    else:
        print(f"unknown command {command!r}", file=sys.stderr)
        return 2
    store.save(items)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
