"""Tests on the session's dev server, in-process workers, the sandbox and the fake model APIs."""
