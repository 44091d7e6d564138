"""Typed reads of a JSON request's fields: each refuses a wrong type with a 400 naming the field.

vLLM validates its request models with pydantic; mediaref has no pydantic dependency, so the
render routes read the few fields they use through these, and ignore the rest as vLLM's
``OpenAIBaseModel`` does (extra fields allowed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mediaref.exceptions import VLLMValidationError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def refuse(name: str, must: str, value: object = None) -> VLLMValidationError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return VLLMValidationError(f"{name} must be {must}, got {shown}", parameter=name)


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def get_bool(body: Mapping[str, Any], name: str, default: bool | None) -> bool | None:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise refuse(name, "a boolean", value)
    return value


def get_int(
    body: Mapping[str, Any],
    name: str,
    default: int | None,
    *,
    ge: int = INT64_MIN,
    le: int = INT64_MAX,
) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if not is_int(value) or not ge <= value <= le:
        raise refuse(name, f"an integer in [{ge}, {le}]", value)
    return int(value)


def get_number(body: Mapping[str, Any], name: str, default: float | None) -> float | None:
    value = body.get(name)
    if value is None:
        return default
    if not (is_int(value) or isinstance(value, float)) or value != value:  # NaN
        raise refuse(name, "a number", value)
    return float(value)


def get_str(body: Mapping[str, Any], name: str, default: str | None) -> str | None:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise refuse(name, "a string", value)
    return value


def get_dict(body: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise refuse(name, "an object", value)
    return value


def get_list(body: Mapping[str, Any], name: str) -> list[Any] | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, list):
        raise refuse(name, "an array", value)
    return value


def get_int_list(body: Mapping[str, Any], name: str) -> list[int] | None:
    values = get_list(body, name)
    if values is not None and not all(is_int(v) for v in values):
        raise refuse(name, "an array of integers", values)
    return values


def get_str_list(body: Mapping[str, Any], name: str) -> list[str] | None:
    """A list of strings; a single string is a list of one (OpenAI's ``stop``)."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise refuse(name, "a string or an array of strings", value)
    return value


def get_choice(body: Mapping[str, Any], name: str, choices: tuple[str, ...], default: str) -> str:
    value = body.get(name)
    if value is None:
        return default
    if value not in choices:
        raise refuse(name, f"one of {', '.join(map(repr, choices))}", value)
    return str(value)


__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "get_bool",
    "get_choice",
    "get_dict",
    "get_int",
    "get_int_list",
    "get_list",
    "get_number",
    "get_str",
    "get_str_list",
    "is_int",
    "refuse",
]
