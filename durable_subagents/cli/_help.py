"""Usage lines and help in the conventional form: ``spawn [OPTIONS] AGENT PROMPT``.

Typer writes a required argument as ``{agent}``, an optional one as ``[call_ids]``,
and an option's value as its Python type (``--tool <list[str]>``, ``--timeout
<float>``), while its errors name the argument another way again (``CALL_IDS``).
Every command here is built with ``Command``, which gives each parameter one
metavar, used alike by the usage line, the help and the errors: arguments in capitals
(``ID``, ``CALL_ID...``) and option values by what they hold (``--tool TOOL``,
``--timeout SECONDS``).
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand

ARGUMENTS = {"task_id": "ID", "call_ids": "CALL_ID"}
"""Argument metavars other than the parameter's name in capitals."""

VALUES = {
    "address": "HOST:PORT",
    "after_pause": "PAUSE",
    "agents_dir": "DIR",
    "ask": "TOOL[:GLOB]",
    "budget_usd": "USD",
    "budget_warn_at": "SHARE",
    "build_id": "ID",
    "codec_port": "PORT",
    "db": "FILE",
    "deny": "TOOL[:GLOB]",
    "deployment_name": "NAME",
    "description": "TEXT",
    "disallow": "TOOL",
    "limit": "N",
    "namespace": "NAME",
    "origin": "URL",
    "parent": "ID",
    "parent_id": "ID",
    "pause": "PAUSE",
    "permission_mode": "MODE",
    "port": "PORT",
    "reason": "TEXT",
    "usd": "USD",
    "retention": "DURATION",
    "task_id": "ID",
    "task_queue": "QUEUE",
    "tool": "TOOL",
    "ui_port": "PORT",
    "workspace": "DIR",
}
"""Option value metavars by parameter name; others follow the value's type."""


def _value_metavar(param: Any) -> str:
    """What an option's value is called in help and errors."""
    if param.name in VALUES:
        return VALUES[param.name]
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    choices = getattr(getattr(param, "type_descriptor", None), "choices", None)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "|".join(str(member.value) for member in annotation)
    if choices:
        return "|".join(str(getattr(c, "value", c)) for c in choices)
    if annotation is int:
        return "N"
    if annotation is float:
        return "SECONDS"
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return "PATH"
    return str(param.name).upper()


class Command(TyperCommand):
    """A Typer command whose usage, help and errors name its parameters one way."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.metavar is not None or param.param_type_name not in ("argument", "option"):
                continue
            if param.param_type_name == "argument":
                param.metavar = ARGUMENTS.get(str(param.name), str(param.name).upper())
            elif not getattr(param, "is_flag", False) and not getattr(param, "count", False):
                param.metavar = _value_metavar(param)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        """``[OPTIONS] AGENT PROMPT``: required arguments bare, optional ones in brackets."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name != "argument":
                continue
            name = str(param.metavar)
            if not param.required:
                name = f"[{name}]"
            if param.nargs != 1:
                name += "..."
            pieces.append(name)
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """The arguments by their metavars (no Python types), then the options."""
        arguments = []
        options = []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = str(param.metavar) + ("..." if param.nargs != 1 else "")
                help_text = getattr(param, "help", None) or ""
                if param.required:
                    help_text = f"{help_text}  [required]" if help_text else "[required]"
                arguments.append((name, help_text))
                continue
            record = param.get_help_record(ctx)
            if record is not None:
                options.append(record)
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        if options:
            with formatter.section("Options"):
                formatter.write_dl(options)


def register(app: typer.Typer, name: str, function: Any) -> None:
    """Add ``function`` to ``app`` as the command ``name``, built with ``Command``."""
    app.command(name, cls=Command)(function)
