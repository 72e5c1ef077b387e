"""Money as people read it: ``$1.24``, ``$0.0042``."""

from __future__ import annotations

__all__ = ["usd"]


def usd(value: float) -> str:
    """A cost in USD: cents from a dollar up, else up to six decimals.

    Example:
        >>> usd(12.345), usd(0.00421), usd(0.0), usd(0.0000001)
        ('$12.35', '$0.00421', '$0', '<$0.000001')
    """
    if value >= 1:
        return f"${value:,.2f}"
    if 0 < value < 0.000001:
        return "<$0.000001"
    return "$" + f"{value:.6f}".rstrip("0").rstrip(".")
