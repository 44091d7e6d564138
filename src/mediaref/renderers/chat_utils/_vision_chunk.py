"""The unified ``vision_chunk`` modality: images and videos as one ordered list of chunks.

A model whose HF config sets ``use_unified_vision_chunk`` takes its images and videos as one
modality. Its items must be concrete before they reach the renderer — a video is cut into chunks
of frames, each with the prompt text that introduces it — so the request parser decodes them: all
of a request's refs at once, on the media pool, off the event loop in the async path. A decode
failure is the client's (422/413, naming ``vision_chunk`` and the item's index) and every decode
is drained before it is raised.
"""

from __future__ import annotations

import logging
import uuid as uuid_module
from collections.abc import Callable, Sequence
from typing import Any

from mediaref.inputs import VisionChunkImage, VisionChunkVideo
from mediaref.media.base import MediaRef
from mediaref.media.decode import (
    MediaDecodeJob,
    collect_media_decodes,
    collect_media_decodes_async,
    submit_media_decodes,
)

logger = logging.getLogger(__name__)

_Item = tuple[object, "str | None"]


def _submit(items: Sequence[_Item], jobs: list[MediaDecodeJob]) -> None:
    refs = [
        ("vision_chunk", index, data)
        for index, (data, _) in enumerate(items)
        if isinstance(data, MediaRef)
    ]
    submit_media_decodes(refs, jobs)


def predecode(items: Sequence[_Item]) -> None:
    """Decode every ref among ``items`` on the media pool; raise the first failure, in order."""
    jobs: list[MediaDecodeJob] = []
    try:
        _submit(items, jobs)
    finally:
        collect_media_decodes(jobs)


async def predecode_async(items: Sequence[_Item]) -> None:
    """:func:`predecode`, awaited: the event loop stays free while the pool decodes."""
    jobs: list[MediaDecodeJob] = []
    try:
        _submit(items, jobs)
    finally:
        await collect_media_decodes_async(jobs)


def _concrete(data: object) -> object:
    """A ref's decoded value (already decoded: a cache read), or the data as it came."""
    return data.decode() if isinstance(data, MediaRef) else data


def _split_video(
    data: object, uuid: str | None, video_idx: int, split: Callable[[Any], Any]
) -> list[object]:
    frames = data[0] if isinstance(data, tuple) and data else data  # (frames, metadata)
    video_uuid = uuid or f"{uuid_module.uuid4().int & 0xFFFF_FFFF_FFFF_FFFF:016x}"
    chunks: list[object] = []
    for index, chunk in enumerate(split(frames)):
        chunks.append(
            VisionChunkVideo(
                type="video_chunk",
                video_chunk=chunk["video_chunk"],
                uuid=f"{video_uuid}-{index}",
                video_idx=video_idx,
                prompt=chunk["prompt"],
            )
        )
    return chunks


def build_vision_chunks(
    items: Sequence[_Item], origins: Sequence[str], processor: Any
) -> tuple[list[object], list[str | None]]:
    """The chunks of a request's (decoded) vision items, and each item's UUID.

    ``origins`` says which items were images and which videos. Images become
    :class:`VisionChunkImage` s; a video is cut by the processor's ``split_video_chunks`` when it
    has one (a video it fails to cut stays whole, with a warning), else passed whole.
    """
    if len(items) != len(origins):
        raise ValueError(f"{len(items)} vision_chunk items but {len(origins)} origins")
    split = getattr(processor, "split_video_chunks", None)
    chunks: list[object] = []
    video_idx = 0
    for origin, (raw, uuid) in zip(origins, items, strict=True):
        data = _concrete(raw)
        if origin == "image":
            if isinstance(raw, MediaRef):
                image: Any = getattr(data, "media", data)  # a MediaWithBytes wraps the image
                chunks.append(VisionChunkImage(type="image", image=image, uuid=uuid))
            else:
                chunks.append(data)
        elif callable(split) and data is not None:
            try:
                chunks.extend(_split_video(data, uuid, video_idx, split))
                video_idx += 1
            except Exception as exc:  # the model's splitter: keep the video whole
                logger.warning("Failed to split video chunks: %s", exc)
                chunks.append(data)
        else:
            chunks.append(data)
    return chunks, [uuid for _, uuid in items]


__all__ = ["build_vision_chunks", "predecode", "predecode_async"]
