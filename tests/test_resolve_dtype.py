"""``resolve_dtype``: vLLM's ``--dtype`` resolution, which ``mediaref serve`` sends tensors in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mediaref.models.builtin import builtin_model_path
from mediaref.processing.context import resolve_dtype


def _model(tmp_path: Path, config: dict[str, object]) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_auto_downcasts_a_float32_or_undeclared_model_to_bfloat16(tmp_path: Path) -> None:
    # The built-in directories declare none: vLLM's render server sends their audio features
    # and pixels as bfloat16 (the render parity corpus pins that).
    assert resolve_dtype(builtin_model_path("qwen2_audio")) == torch.bfloat16
    assert resolve_dtype(_model(tmp_path, {"torch_dtype": "float32"})) == torch.bfloat16


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"torch_dtype": "float16"}, torch.float16),
        ({"dtype": "bfloat16"}, torch.bfloat16),
        ({"text_config": {"torch_dtype": "float16"}}, torch.float16),
    ],
)
def test_auto_keeps_a_declared_half_precision(
    tmp_path: Path, config: dict[str, object], expected: torch.dtype
) -> None:
    assert resolve_dtype(_model(tmp_path, config)) == expected


def test_a_named_dtype_wins_and_an_unknown_one_is_refused(tmp_path: Path) -> None:
    model = _model(tmp_path, {"torch_dtype": "bfloat16"})
    assert resolve_dtype(model, "float32") == torch.float32
    assert resolve_dtype(model, "half") == torch.float16
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        resolve_dtype(model, "int8")
