"""Loading client tensors that may be sparse: one guard for every loader, and a bounded densify.

``torch.sparse.check_sparse_tensor_invariants()`` turns on a *process-wide* flag on entry and
restores it on exit: two loads overlapping on different threads let the first to leave switch
the check off under the other, which then accepts a tensor whose indices lie outside its shape.
Every load of a client tensor (image, audio and video embeddings, prompt embeddings) therefore
enters :func:`check_sparse_tensor_invariants_threadsafe`, which holds one lock for the whole
process. With mediaref in place of vLLM's layer this module is ``vllm.utils.sparse_utils``
(:mod:`mediaref.vllm_hook`), so vLLM's own prompt-embeds loader takes the same lock as
mediaref's loaders; two locks would guard nothing against each other.

A sparse tensor declares the dense shape ``to_dense()`` allocates, and the invariant check
accepts any valid one: a few kilobytes can declare gigabytes. :func:`safe_to_dense` refuses a
tensor whose dense size is over ``VLLM_MAX_EMBED_DECODE_BYTES`` (0 or less: no cap) before
allocating anything.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

from mediaref import envs
from mediaref.exceptions import VLLMValidationError

_SPARSE_LOAD_LOCK = threading.Lock()
_MiB = 1 << 20


@contextlib.contextmanager
def check_sparse_tensor_invariants_threadsafe() -> Iterator[None]:
    """torch's sparse invariant check, on for the block, with no other load inside one."""
    with _SPARSE_LOAD_LOCK, torch.sparse.check_sparse_tensor_invariants():  # type: ignore[no-untyped-call]
        yield


def max_embed_bytes() -> int | None:
    """``VLLM_MAX_EMBED_DECODE_BYTES``, or None when it is 0 or less (no cap)."""
    limit = int(envs.VLLM_MAX_EMBED_DECODE_BYTES)
    return limit if limit > 0 else None


def check_dense_bytes(dense_bytes: int, shape: tuple[int, ...], *, parameter: str) -> None:
    """Refuse (a 400 naming ``parameter``) a tensor whose dense size is over
    ``VLLM_MAX_EMBED_DECODE_BYTES``, before anything that size is allocated."""
    limit = max_embed_bytes()
    if limit is not None and dense_bytes > limit:
        raise VLLMValidationError(
            f"`{parameter}` declares shape {shape}, which would allocate {dense_bytes} bytes "
            f"({dense_bytes / _MiB:.0f} MiB) once densified, exceeding the {limit} byte limit. "
            "Set VLLM_MAX_EMBED_DECODE_BYTES to increase this limit.",
            parameter=parameter,
            value=dense_bytes,
        )


def safe_to_dense(tensor: object, *, parameter: str) -> torch.Tensor:
    """``tensor`` dense, refused (a 400 naming ``parameter``) when it is not a tensor or its
    dense size is over ``VLLM_MAX_EMBED_DECODE_BYTES``; vLLM's call and messages."""
    if not isinstance(tensor, torch.Tensor):
        raise VLLMValidationError(
            f"`{parameter}` payload did not deserialize to a torch.Tensor "
            f"(got {type(tensor).__name__}).",
            parameter=parameter,
        )
    check_dense_bytes(
        tensor.numel() * tensor.element_size(), tuple(tensor.shape), parameter=parameter
    )
    return tensor.to_dense() if tensor.layout != torch.strided else tensor


__all__ = [
    "check_dense_bytes",
    "check_sparse_tensor_invariants_threadsafe",
    "max_embed_bytes",
    "safe_to_dense",
]
