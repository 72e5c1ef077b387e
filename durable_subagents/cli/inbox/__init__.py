"""``subagents serve``: the approval inbox over HTTP (a JSON API and one page).

The API lists paused task trees, shows a pause's calls in full, and approves or
rejects them bound to the pause and to each call's arguments as read; it also sends
input, cancels, and lists and shows tasks. Bearer tokens with roles (``viewer``,
``approver``) and optional scopes decide who reaches what.
"""

from durable_subagents.cli.inbox._access import Grant, Role, Tokens, load_tokens
from durable_subagents.cli.inbox._api import InboxServer, build_app
from durable_subagents.cli.inbox._inbox import Inbox
from durable_subagents.cli.inbox._routes import ERROR_STATUS, ROUTES, openapi

__all__ = [
    "ERROR_STATUS",
    "ROUTES",
    "Grant",
    "Inbox",
    "InboxServer",
    "Role",
    "Tokens",
    "build_app",
    "load_tokens",
    "openapi",
]
