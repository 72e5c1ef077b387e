"""Tests of pure functions: no Temporal server, worker, sandbox or network server."""
