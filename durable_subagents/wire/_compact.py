"""How activity inputs and results are written to histories: without their defaults.

Recorded in histories: the compatibility rule of ``_payloads`` holds for what uses it.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from durable_subagents.types import Message, ToolCall, ToolImage
from durable_subagents.wire._task import ContextInput

__all__ = ["Compact"]


@functools.cache
def _defaults(model: type[BaseModel]) -> dict[str, Any]:
    """The serialized default of each optional field of ``model``."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if not field.is_required():
            value = field.get_default(call_default_factory=True)
            out[name] = value.model_dump() if isinstance(value, BaseModel) else value
    return out


def _strip(data: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """``data`` (a serialized ``model``) without the fields that hold their default."""
    defaults = _defaults(model)
    return {k: v for k, v in data.items() if k not in defaults or v != defaults[k]}


def _strip_calls(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its ``tool_calls`` and ``images`` stripped of defaults, if it has any."""
    if data.get("tool_calls"):
        data = {**data, "tool_calls": [_strip(c, ToolCall) for c in data["tool_calls"]]}
    if data.get("images"):
        data = {**data, "images": [_strip(i, ToolImage) for i in data["images"]]}
    return data


_CACHE_FIELDS = ("cache_read_tokens", "cache_write_tokens", "estimated")


def _strip_usage(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` without its usage's zero cache counts and false ``estimated``."""
    usage = data.get("usage")
    if isinstance(usage, dict) and any(k in usage and not usage[k] for k in _CACHE_FIELDS):
        data = {**data, "usage": {k: v for k, v in usage.items() if v or k not in _CACHE_FIELDS}}
    return data


class Compact(BaseModel):
    """An activity's input or result, serialized without defaults.

    Fields that hold their default (its own, and those of the messages and calls it
    holds) are left out: they would otherwise be repeated in every history event.
    Built when first used (``defer_build``): a client never uses them, and building them
    at import was a fifth of what ``import durable_subagents`` costs beyond Temporal's.
    """

    model_config = ConfigDict(defer_build=True)

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = _strip_usage(_strip_calls(handler(self)))
        if "new_messages" in data:
            data["new_messages"] = [_strip(_strip_calls(m), Message) for m in data["new_messages"]]
        if "call" in data:
            data["call"] = _strip(data["call"], ToolCall)
        if isinstance(data.get("context"), dict):
            data["context"] = _strip(data["context"], ContextInput)
        return _strip(data, type(self))
