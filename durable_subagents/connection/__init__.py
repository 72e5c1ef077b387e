"""Connecting to Temporal, and where things live.

Temporal's own client configuration, the settings' values, the data directory and the
task queues' names.
"""
