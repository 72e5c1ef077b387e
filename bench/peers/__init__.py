"""The workflows ``bench_peers.py`` runs beside durable-subagents, one module per side.

Each module is what a user of that framework would write: Temporal's workflow sandbox
re-imports a workflow's module for every run, so each side's module holds only its own
workflow, tool and agent, as an application's workflow module would.
"""
