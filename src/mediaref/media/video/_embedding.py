"""``VideoEmbeddingMediaIO``: pre-computed video embeddings sent in place of a video."""

from __future__ import annotations

from typing import ClassVar

from mediaref.media._embedding_io import EmbeddingMediaIO


class VideoEmbeddingMediaIO(EmbeddingMediaIO):
    """Loads ``video_embeds``: a ``.npy`` array (no pickle) or a ``torch.save``'d tensor (zip
    format, ``weights_only``; a sparse one is checked and densified), its declared size checked
    against ``VLLM_MAX_EMBED_DECODE_BYTES`` before anything is allocated. Every refusal is
    :class:`~mediaref.exceptions.VLLMValidationError` naming ``video_embeds``
    (:mod:`mediaref.media._embedding_io`)."""

    modality: ClassVar[str] = "video"
    parameter: ClassVar[str] = "video_embeds"

    def __init__(self) -> None:
        super().__init__()


__all__ = ["VideoEmbeddingMediaIO"]
