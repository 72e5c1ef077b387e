"""Tests that drive the product from outside: the CLI, killed workers, the browser, the docs."""
