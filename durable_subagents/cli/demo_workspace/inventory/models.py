from dataclasses import dataclass


class OutOfStock(Exception):
    """Raised when removing more items than are in stock."""


@dataclass
class Item:
    name: str
    quantity: int = 0

    def remove(self, count: int) -> None:
        if count > self.quantity:
            raise OutOfStock(f"only {self.quantity} {self.name} left")
        self.quantity -= count
