"""Client-supplied embeddings: a ``.npy`` array or a ``torch.save``'d tensor, loaded safely.

The decoders behind vLLM's ``ImageEmbeddingMediaIO``, ``AudioEmbeddingMediaIO`` and
``VideoEmbeddingMediaIO``: the payload starts with :data:`MAGIC_NUMPY_PREFIX` (a ``.npy`` file,
loaded without pickle) or is a ``torch.save`` file (loaded with ``weights_only=True``, sparse
tensors checked for valid indices under the process's one guard, then densified:
:mod:`mediaref.media.sparse_utils`).

Neither format's loader bounds what it allocates by the payload's size, so the declared size is
checked first, against ``VLLM_MAX_EMBED_DECODE_BYTES`` (0 or less: no cap):

- a ``.npy`` header declares its shape and dtype, and numpy allocates that before reading;
- a sparse tensor declares the dense shape ``to_dense()`` allocates (a 3 KB payload can declare
  gigabytes, and the index check accepts it);
- a ``torch.save`` zip declares each record's uncompressed size, which the reader allocates (a
  deflated record of zeros is a few kilobytes); the legacy pre-zip format declares its storages'
  sizes inside the pickle and is refused.

Every refusal, and every payload that does not load, is
:class:`~mediaref.exceptions.VLLMValidationError` (HTTP 400) naming the request field
(``image_embeds``...), as vLLM's refusals are.
"""

from __future__ import annotations

import io
import math
import pickle
import zipfile
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pybase64
import torch

from mediaref.exceptions import VLLMValidationError
from mediaref.media.base import DecodeSpec, MediaIO
from mediaref.media.sparse_utils import (
    check_dense_bytes,
    check_sparse_tensor_invariants_threadsafe,
    max_embed_bytes,
    safe_to_dense,
)

MAGIC_NUMPY_PREFIX = b"\x93NUMPY"
"""What every ``.npy`` file starts with (numpy's format version 1.0 and later)."""

# torch.save's zip holds a pickle and small bookkeeping records besides the tensor data.
_ZIP_METADATA_SLACK_BYTES = 1 << 20
# What torch.load and numpy raise for a payload that is not what it claims to be.
_LOAD_ERRORS: tuple[type[Exception], ...] = (
    pickle.UnpicklingError,
    RuntimeError,
    ValueError,
    TypeError,
    EOFError,
    OSError,
    KeyError,
    IndexError,
    AttributeError,
    zipfile.BadZipFile,
)
# numpy's format versions 1.0 and 2.0 (3.0 only adds UTF-8 field names: structured dtypes, which
# are no tensor anyway).
_NPY_HEADER_READERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


class EmbeddingMediaIO(MediaIO[torch.Tensor]):
    """Loads one modality's pre-computed embeddings; ``parameter`` names the request field."""

    modality: ClassVar[str]
    parameter: ClassVar[str]

    def get_decode_spec(self) -> DecodeSpec:
        return DecodeSpec(modality=self.modality, decoder="embedding")

    def load_bytes(self, data: bytes) -> torch.Tensor:
        if data[: len(MAGIC_NUMPY_PREFIX)] == MAGIC_NUMPY_PREFIX:
            return self._load_numpy(data)
        return self._load_torch(data)

    def load_base64(self, media_type: str, data: str) -> torch.Tensor:
        return self.load_bytes(self._b64decode(data))

    def load_file(self, filepath: Path | str) -> torch.Tensor:
        return self.load_bytes(Path(filepath).read_bytes())

    def encode_base64(self, media: torch.Tensor) -> str:
        """``media`` as ``torch.save`` bytes in base64: what :meth:`load_base64` reads back."""
        with io.BytesIO() as buffer:
            torch.save(media, buffer)
            return pybase64.b64encode(buffer.getvalue()).decode("ascii")

    # --- .npy --------------------------------------------------------------------------------

    def _load_numpy(self, data: bytes) -> torch.Tensor:
        with io.BytesIO(data) as source:
            try:
                version = np.lib.format.read_magic(source)
                read_header = _NPY_HEADER_READERS.get(version)
                if read_header is None:
                    raise ValueError(f".npy format version {version} is not accepted")
                shape, _, dtype = read_header(source)
            except _LOAD_ERRORS as exc:
                raise self._unloadable(exc) from exc
            declared = math.prod(shape) * dtype.itemsize
            check_dense_bytes(declared, shape, parameter=self.parameter)
            if len(data) - source.tell() < declared:
                raise self._unloadable(
                    ValueError(f"the array declares {declared} bytes of data, the file is shorter")
                )
            source.seek(0)
            try:
                array = np.load(source, allow_pickle=False)
                return torch.from_numpy(array)
            except _LOAD_ERRORS as exc:
                raise self._unloadable(exc) from exc

    # --- torch.save --------------------------------------------------------------------------

    def _load_torch(self, data: bytes) -> torch.Tensor:
        self._check_torch_archive(data)
        try:
            with check_sparse_tensor_invariants_threadsafe():  # one lock for every loader
                loaded: Any = torch.load(io.BytesIO(data), weights_only=True)
        except _LOAD_ERRORS as exc:
            raise self._unloadable(exc) from exc
        return safe_to_dense(loaded, parameter=self.parameter)

    def _check_torch_archive(self, data: bytes) -> None:
        """Refuse the legacy format and a zip whose records declare more than the cap allows."""
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                declared = sum(info.file_size for info in archive.infolist())
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
            raise VLLMValidationError(
                f"`{self.parameter}` payload is neither a .npy file nor a torch.save zip file "
                "(the legacy torch.save format is not accepted)",
                parameter=self.parameter,
            ) from exc
        limit = max_embed_bytes()
        if limit is not None and declared > limit + _ZIP_METADATA_SLACK_BYTES:
            raise VLLMValidationError(
                f"`{self.parameter}` payload declares {declared} bytes of records, over the "
                f"{limit}-byte limit (VLLM_MAX_EMBED_DECODE_BYTES)",
                parameter=self.parameter,
                value=declared,
            )

    # --- shared ------------------------------------------------------------------------------

    def _unloadable(self, exc: Exception) -> VLLMValidationError:
        reason = str(exc) or type(exc).__name__
        return VLLMValidationError(
            f"`{self.parameter}` payload could not be loaded: {reason}", parameter=self.parameter
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


__all__ = ["MAGIC_NUMPY_PREFIX", "EmbeddingMediaIO"]
