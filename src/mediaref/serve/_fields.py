"""Typed reads of a JSON request's fields: each refuses a wrong type with a 400 naming the field.

vLLM validates its request models with pydantic; mediaref has no pydantic dependency, so the
render routes read the fields they use through these, and ignore the rest as vLLM's
``OpenAIBaseModel`` does (extra fields allowed). A field's JSON type must be the one vLLM's model
declares: an integer field takes a JSON integer (or a number with no fraction, ``2.0``, as
pydantic does), never ``true`` or ``"2"``; a boolean takes ``true``/``false`` only. Integers are
bounded to int64 unless the caller narrows them: JSON allows any size, the engine's MessagePack
transport does not. Floats pass NaN and ±inf through, as pydantic's ``float`` does; each sampling
field's range check (:mod:`mediaref.serve.sampling`) refuses them with vLLM's message.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from mediaref.exceptions import VLLMValidationError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def refuse(name: str, must: str, value: object = None) -> VLLMValidationError:
    return VLLMValidationError(f"{name} must be {must}, got {shown(value)}", parameter=name)


def shown(value: object) -> str:
    """``value`` short enough for an error message."""
    # A giant int has no repr past 4300 digits (and would flood the message anyway).
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of {value.bit_length()} bits"
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def as_int(value: object) -> int | None:
    """``value`` as an int when it is a JSON integer or a number with no fraction; else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def refuse_nulls(body: Mapping[str, Any], names: Iterable[str]) -> None:
    """Refuse an explicit ``null`` for fields whose vLLM type is not optional."""
    for name in names:
        if name in body and body[name] is None:
            raise VLLMValidationError(f"{name} may be omitted but must not be null", parameter=name)


def get_bool(body: Mapping[str, Any], name: str, default: bool | None) -> bool | None:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise refuse(name, "a boolean", value)
    return value


def check_int(name: str, value: object, *, ge: int = INT64_MIN, le: int = INT64_MAX) -> int:
    number = as_int(value)
    if number is None or not ge <= number <= le:
        raise refuse(name, f"an integer in [{ge}, {le}]", value)
    return number


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
    return check_int(name, value, ge=ge, le=le)


def get_float(body: Mapping[str, Any], name: str, default: float | None) -> float | None:
    """A JSON number as a float; NaN and ±inf pass (the caller's range check refuses them)."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, float):
        return value
    if not is_int(value):
        raise refuse(name, "a number", value)
    try:
        return float(value)
    except OverflowError:  # an integer past 1.8e308: pydantic refuses it too
        raise refuse(name, "a number", value) from None


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


def get_int_list(
    body: Mapping[str, Any], name: str, *, ge: int = INT64_MIN, le: int = INT64_MAX
) -> list[int] | None:
    values = get_list(body, name)
    if values is None:
        return None
    numbers = [as_int(v) for v in values]
    if not all(n is not None and ge <= n <= le for n in numbers):
        raise refuse(name, f"an array of integers in [{ge}, {le}]", values)
    return [n for n in numbers if n is not None]


def get_str_list(body: Mapping[str, Any], name: str, *, single: bool) -> list[str] | None:
    """An array of strings; with ``single``, one string is an array of one (OpenAI's ``stop``)."""
    value = body.get(name)
    if value is None:
        return None
    if single and isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        must = "a string or an array of strings" if single else "an array of strings"
        raise refuse(name, must, value)
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
    "as_int",
    "check_int",
    "get_bool",
    "get_choice",
    "get_dict",
    "get_float",
    "get_int",
    "get_int_list",
    "get_list",
    "get_str",
    "get_str_list",
    "is_int",
    "refuse",
    "refuse_nulls",
    "shown",
]
