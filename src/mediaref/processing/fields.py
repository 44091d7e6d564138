"""How an HF processor's batched output splits into per-item model inputs.

The field classes live in :mod:`mediaref.inputs`, where vLLM has them
(``vllm.multimodal.inputs``); this module re-exports them for code that imports them from here.
"""

from __future__ import annotations

from mediaref.inputs import (
    BaseMultiModalField,
    MultiModalBatchedField,
    MultiModalFieldConfig,
    MultiModalFieldElem,
    MultiModalFlatField,
    MultiModalSharedField,
    build_kwargs_items,
)

__all__ = [
    "BaseMultiModalField",
    "MultiModalBatchedField",
    "MultiModalFieldConfig",
    "MultiModalFieldElem",
    "MultiModalFlatField",
    "MultiModalSharedField",
    "build_kwargs_items",
]
