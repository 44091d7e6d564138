"""The fused path's large new outputs: ordinary tensors whose whole 2 MiB-aligned interior is
advised for transparent huge pages where the kernel offers them on request, and nothing advised
where it does not (THP off, no such interior)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from PIL import Image

from mediaref.models import _output_buffers as output_buffers

HUGE = output_buffers.HUGE_PAGE


@pytest.fixture
def advised(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, int, int]]]:
    calls: list[tuple[int, int, int]] = []

    def madvise(address: int, length: int, advice: int) -> int:
        calls.append((address, length, advice))
        return 0

    monkeypatch.setattr(output_buffers, "_madvise", lambda: madvise)
    yield calls


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 7, 10764, 86112])
def test_the_whole_aligned_interior_is_advised(
    advised: list[tuple[int, int, int]], dtype: torch.dtype, rows: int
) -> None:
    tensor = output_buffers.empty((rows, 1176), dtype)
    assert tensor.shape == (rows, 1176) and tensor.dtype == dtype
    start, end = tensor.data_ptr(), tensor.data_ptr() + tensor.nbytes
    first, stop = -(-start // HUGE) * HUGE, end // HUGE * HUGE
    if stop <= first:  # no whole huge page inside: nothing to ask for
        assert advised == []
        return
    assert advised == [(first, stop - first, 14)]
    tensor.fill_(1)  # the memory is the tensor's own, whole
    assert bool((tensor == 1).all())


def test_nothing_is_advised_where_huge_pages_are_never_granted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    setting = tmp_path / "enabled"
    monkeypatch.setattr(output_buffers, "_THP_SETTING", setting)
    output_buffers._madvise.cache_clear()
    try:
        setting.write_text("always madvise [never]\n")
        assert output_buffers._madvise() is None
        output_buffers._madvise.cache_clear()
        setting.unlink()  # no THP in this kernel
        assert output_buffers._madvise() is None
        output_buffers._madvise.cache_clear()
        setting.write_text("always [madvise] never\n")
        assert (output_buffers._madvise() is not None) == sys.platform.startswith("linux")
    finally:
        output_buffers._madvise.cache_clear()
    monkeypatch.setattr(output_buffers, "_madvise", lambda: None)
    assert output_buffers.empty((5000, 1176), torch.uint8).shape == (5000, 1176)


def test_the_fused_path_writes_its_rows_into_advised_buffers(
    advised: list[tuple[int, int, int]],
) -> None:
    from transformers import AutoImageProcessor

    from mediaref.models import _qwen2_vl_fused as fused
    from mediaref.models.builtin import builtin_model_path

    processor = AutoImageProcessor.from_pretrained(str(builtin_model_path("qwen2_vl")))
    settings = fused.image_settings(processor, {"do_rescale": False, "do_normalize": False})
    assert settings is not None
    image = Image.new("RGB", (1920, 1080), (40, 90, 200))
    target = fused.image_target(image, settings)
    assert target is not None
    [(rows, _)] = fused.fused_rows([image], [target], settings, video=False, executor=None)
    start = rows.data_ptr()
    assert any(start <= address < start + rows.nbytes for address, _, _ in advised)
