"""How a Python value becomes the jsonb the engine stores: job results and step values.

The worker (a handler's return value) and durable steps (a step function's value) send
values through the same rule, so a value that one accepts the other accepts too.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel


class ResultNotJSON(TypeError):
    """A handler or a step returned a value PostgreSQL's jsonb cannot hold."""


def json_result(value: Any) -> Any:
    """The value as jsonb will store it; raises ResultNotJSON with the reason."""
    kind = type(value)
    if value is None or kind is bool or kind is int or (kind is str and "\x00" not in value):
        return value  # what most handlers return: nothing to check
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ResultNotJSON(
            f"the handler returned a value JSON cannot hold ({type(value).__name__}): {error}; "
            f"return JSON types (dict, list, str, int, float, bool, None) or a pydantic model"
        ) from error
    if "\\u0000" in text:
        raise ResultNotJSON("the handler returned a string holding NUL (\\u0000), "
                            "which PostgreSQL jsonb cannot store")
    return value


__all__ = ["ResultNotJSON", "json_result"]
