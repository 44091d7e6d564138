"""Tool-call IDs in the form the model was trained on.

Kimi K2 models (``kimi_k2``, ``kimi_k25``, ``kimi_k3``) expect ``functions.<name>:<index>``;
every other model gets a random ``chatcmpl-tool-<16 hex digits>``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_KIMI_MODEL_TYPES = frozenset({"kimi_k2", "kimi_k25", "kimi_k3"})


def _random_hex16() -> str:
    return f"{uuid.uuid4().int & 0xFFFF_FFFF_FFFF_FFFF:016x}"


def _directory_model_type(model_config: Any) -> str | None:
    """``model_type`` from the config.json of a mediaref config's local model directory."""
    model = getattr(model_config, "model", None)
    if not isinstance(model, str):
        return None
    try:
        value = json.loads((Path(model) / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _loaded(model_config: Any, name: str) -> Any:
    """``model_config.<name>``, None when it is absent or fails to load (a config that cannot be
    read has no model type to tell)."""
    try:
        return getattr(model_config, name, None)
    except Exception:
        return None


def _model_types(model_config: Any) -> set[str | None]:
    types = {
        getattr(_loaded(model_config, "hf_config"), "model_type", None),
        getattr(_loaded(model_config, "hf_text_config"), "model_type", None),
    }
    overrides = getattr(model_config, "hf_overrides", None)
    if isinstance(overrides, Mapping):
        types.add(overrides.get("model_type"))
    # A mediaref ModelConfig names its family, or leaves it to the directory's config.json.
    family = getattr(model_config, "family", None)
    types.add(family if isinstance(family, str) else _directory_model_type(model_config))
    return types


def get_tool_call_id_type(model_config: Any) -> str:
    """``"kimi_k2"`` for a Kimi K2 family model, else ``"random"``.

    Reads vLLM's ``hf_config`` / ``hf_text_config`` / ``hf_overrides`` model types when the config
    has them, and a mediaref :class:`~mediaref.processing.context.ModelConfig`'s family (its
    ``family`` field, else its directory's ``config.json``).
    """
    return "kimi_k2" if _model_types(model_config) & _KIMI_MODEL_TYPES else "random"


def make_tool_call_id(
    id_type: str = "random", func_name: str | None = None, idx: int | None = None
) -> str:
    """A tool-call ID: ``functions.<func_name>:<idx>`` for ``"kimi_k2"``, else a random one."""
    if id_type == "kimi_k2":
        return f"functions.{func_name}:{idx}"
    return f"chatcmpl-tool-{_random_hex16()}"


__all__ = ["get_tool_call_id_type", "make_tool_call_id"]
