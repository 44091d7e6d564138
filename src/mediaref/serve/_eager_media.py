"""The eager baseline (``ServeOptions.eager_media``, ``--eager-media``): media decoded at fetch.

Every item is decoded as soon as it is fetched and handed to the processor decoded, which then
hashes its pixels: vLLM 0.33's own way, kept for ``benchmarks/bench_render.py``'s comparison. The
lazy path (:class:`~mediaref.media.base.MediaRef` s keyed without decoding) is the default;
:meth:`~mediaref.serve.service.RenderService.render_chat` calls :func:`decode_all` only when the
option is on.
"""

from __future__ import annotations

from typing import Any

from mediaref.exceptions import MediaTooLargeError, VLLMUnprocessableEntityError
from mediaref.media.base import MediaRef


def _decode_eagerly(modality: str, index: int, item: Any) -> Any:
    if not isinstance(item, MediaRef):
        return item
    try:
        return item.decode()
    except MediaTooLargeError:
        raise
    except ValueError as exc:  # a verdict on the payload: what the processor reports as 422
        raise VLLMUnprocessableEntityError(
            f"Failed to decode {modality} item at index {index}: {exc}",
            modality=modality,
            index=index,
        ) from exc


def decode_all(mm_data: Any) -> dict[str, Any]:
    """The eager baseline: every fetched item decoded now, handed on decoded."""
    decoded: dict[str, Any] = {}
    for modality, value in mm_data.items():
        items = value if isinstance(value, list) else [value]
        done = [_decode_eagerly(modality, i, item) for i, item in enumerate(items)]
        decoded[modality] = done if isinstance(value, list) else done[0]
    return decoded


__all__ = ["decode_all"]
