"""Client-supplied embeddings (``image_embeds``/``audio_embeds``/``video_embeds``) cannot make the
server allocate what their size does not bound (``VLLM_MAX_EMBED_DECODE_BYTES``).

Each payload here is a few kilobytes declaring gigabytes; each is refused as a 400 naming the
field, before the loader that would allocate runs.
"""

from __future__ import annotations

import io
import zipfile
from typing import Any

import numpy as np
import pytest
import torch

from mediaref.exceptions import VLLMValidationError
from mediaref.media.audio import AudioEmbeddingMediaIO
from mediaref.media.image import ImageEmbeddingMediaIO


def _forbid(monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    def refuse(*args: object, **kwargs: object) -> Any:
        raise AssertionError(f"{target} ran on a payload that should have been refused")

    monkeypatch.setattr(target, refuse)


def _npy_header(shape: tuple[int, ...], dtype: str = "<f4") -> bytes:
    buffer = io.BytesIO()
    header = {"descr": dtype, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue()  # magic, version and header


def test_a_npy_header_declaring_terabytes_is_refused_before_numpy_allocates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _forbid(monkeypatch, "numpy.load")
    with pytest.raises(VLLMValidationError, match="VLLM_MAX_EMBED_DECODE_BYTES") as info:
        ImageEmbeddingMediaIO().load_bytes(_npy_header((1 << 20, 1 << 20)))  # 4 TiB
    assert info.value.parameter == "image_embeds" and info.value.value == 4 << 40


def test_a_npy_file_shorter_than_its_header_says_is_refused_before_numpy_allocates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _forbid(monkeypatch, "numpy.load")
    with pytest.raises(VLLMValidationError, match="shorter"):
        ImageEmbeddingMediaIO().load_bytes(_npy_header((1000, 1000)) + b"\0" * 16)


def test_a_sparse_tensor_declaring_a_huge_dense_shape_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sparse = torch.sparse_coo_tensor([[0], [0]], [1.0], size=(1 << 20, 1 << 20))
    buffer = io.BytesIO()
    torch.save(sparse, buffer)
    assert len(buffer.getvalue()) < 4096

    def no_densify(self: torch.Tensor) -> torch.Tensor:
        raise AssertionError("densified")

    monkeypatch.setattr(torch.Tensor, "to_dense", no_densify)
    with pytest.raises(VLLMValidationError, match="declares shape") as info:
        AudioEmbeddingMediaIO().load_bytes(buffer.getvalue())
    assert info.value.parameter == "audio_embeds"


def test_a_deflated_torch_record_is_bounded_by_its_declared_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # torch.load reads deflated zip records, allocating what each declares: a 5 KB payload
    # became 4 MB here (and 2 MB would become 2 GB).
    saved = io.BytesIO()
    torch.save(torch.zeros(1 << 20), saved)
    deflated = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(saved.getvalue())) as source,
        zipfile.ZipFile(deflated, "w", compression=zipfile.ZIP_DEFLATED) as target,
    ):
        for info in source.infolist():
            target.writestr(info.filename, source.read(info.filename))
    assert len(deflated.getvalue()) < 16_384
    monkeypatch.setenv("VLLM_MAX_EMBED_DECODE_BYTES", str(1 << 20))
    _forbid(monkeypatch, "torch.load")
    with pytest.raises(VLLMValidationError, match="records"):
        ImageEmbeddingMediaIO().load_bytes(deflated.getvalue())


def test_the_legacy_torch_format_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # Its pickle declares each storage's size and the loader allocates it before reading.
    legacy = io.BytesIO()
    torch.save(torch.zeros(4), legacy, _use_new_zipfile_serialization=False)
    _forbid(monkeypatch, "torch.load")
    with pytest.raises(VLLMValidationError, match="legacy"):
        ImageEmbeddingMediaIO().load_bytes(legacy.getvalue())


def test_within_the_cap_everything_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_MAX_EMBED_DECODE_BYTES", "0")  # no cap
    sparse = torch.sparse_coo_tensor([[1], [2]], [5.0], size=(3, 4))
    buffer = io.BytesIO()
    torch.save(sparse, buffer)
    dense = ImageEmbeddingMediaIO().load_bytes(buffer.getvalue())
    assert dense.layout == torch.strided and dense[1, 2] == 5.0
