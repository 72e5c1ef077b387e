"""The default task queue's name, in a module of its own.

``subagents --help`` shows it; the settings module that defines the rest of the
defaults imports pydantic-settings and Temporal, which the help has no use for.
"""

DEFAULT_TASK_QUEUE = "subagents"
"""The task queue clients spawn on and workers poll when none is configured."""
