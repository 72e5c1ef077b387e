"""A tiny stock-keeping tool."""
