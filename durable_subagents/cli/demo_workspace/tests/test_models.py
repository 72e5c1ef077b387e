import pytest

from inventory.models import Item, OutOfStock


def test_remove_more_than_stock_fails():
    item = Item("widget", 1)
    with pytest.raises(OutOfStock):
        item.remove(2)
