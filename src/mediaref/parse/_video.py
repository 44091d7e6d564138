"""Video items: the raw ``(frames, metadata)`` kept whole, with separate views onto it.

A video is stored as it arrived: frames, ``(frames, metadata)``, or a ref that decodes to
``(frames, metadata)``. Keeping the pair intact lets cache-miss selection carry metadata along even
when HF consumes frames alone, and lets audio extraction read metadata before frames are asked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mediaref.media.base import MediaWithBytes
from mediaref.parse._items import ImageSize, ProcessorBatchItems, image_size_of

VIDEO_METADATA_REQUIRED_MESSAGE = (
    "Video metadata is required but not found in mm input. "
    "Please check your video input in `multi_modal_data`"
)


def split_video(value: Any) -> tuple[Any, dict[str, Any] | None]:
    """``(frames, metadata)`` of a decoded video item; metadata is None when it has none.

    Frames wrapped in a ``MediaWithBytes`` come back unwrapped (the hasher reads the wrapper
    through ``get_item_for_hash``; everything else wants the frames).
    """
    if isinstance(value, MediaWithBytes):
        value = value.media
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and (value[1] is None or isinstance(value[1], Mapping))
    ):
        frames, metadata = value
        if isinstance(frames, MediaWithBytes):
            frames = frames.media
        return frames, (dict(metadata) if metadata is not None else None)
    return value, None


class VideoProcessorItems(ProcessorBatchItems[Any]):
    """Videos, with the HF view chosen by ``video_needs_metadata``.

    ``metadata`` supplies metadata for items that carry none themselves (vLLM's signature); an
    entry given there wins over the item's own.
    """

    def __init__(
        self,
        data: Sequence[Any] | None,
        metadata: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        *,
        video_needs_metadata: bool = False,
    ) -> None:
        super().__init__([None] if data is None else data, "video")
        self.video_needs_metadata = video_needs_metadata
        self._given_metadata: list[Mapping[str, Any] | None] = self._normalize_given(metadata)

    def _normalize_given(
        self, metadata: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None
    ) -> list[Mapping[str, Any] | None]:
        count = len(self.data)
        if metadata is None:
            return [None] * count
        if isinstance(metadata, Mapping):
            if count != 1:
                raise ValueError(
                    f"one metadata dict was given for {count} videos; give one per video"
                )
            return [metadata]
        given = list(metadata)
        if len(given) != count:
            raise ValueError(f"{len(given)} metadata entries were given for {count} videos")
        return given

    def _take(self, positions: list[int]) -> None:
        super()._take(positions)
        self._given_metadata = [self._given_metadata[i] for i in positions]

    def get_frames(self, index: int) -> Any:
        """The frames alone, whatever view HF gets; decodes this video only."""
        frames, _ = split_video(self._decoded(index))
        return frames

    def get_metadata(self, index: int) -> dict[str, Any] | None:
        """This video's metadata, decoding this video (and none of its siblings) if it must."""
        given = self._given_metadata[index]
        if given is not None:
            return dict(given)
        _, metadata = split_video(self._decoded(index))
        return metadata

    @property
    def metadata(self) -> list[dict[str, Any] | None]:
        """Every video's metadata, for consumers that need the whole batch (decodes them all)."""
        return [self.get_metadata(index) for index in range(self.get_count())]

    def get(self, index: int) -> Any:
        """The HF view: frames, or ``(frames, metadata)`` when the model needs metadata."""
        if self.data[index] is None:
            return None
        frames = self.get_frames(index)
        if not self.video_needs_metadata:
            return frames
        metadata = self.get_metadata(index)
        if metadata is None:
            raise ValueError(VIDEO_METADATA_REQUIRED_MESSAGE)
        return frames, metadata

    def get_item_for_hash(self, index: int) -> Any:
        """What the hasher reads for video ``index``, as vLLM forms it: a ref as itself (its key;
        never decoded); a ``MediaWithBytes`` paired with the metadata given for it, so the same
        bytes sampled differently hash differently; a decoded ``(frames, metadata)`` pair whole
        when the model takes metadata, else its frames alone."""
        item = self.data[index]
        given = self._given_metadata[index]
        if isinstance(item, tuple) and not self.video_needs_metadata:
            frames, own = item
            metadata = given if given is not None else own
            if isinstance(frames, MediaWithBytes) and metadata is not None:
                return frames, dict(metadata)
            return frames
        if isinstance(item, MediaWithBytes) and given is not None:
            return item, dict(given)
        return item

    def _present_frames(self, item_idx: int) -> Any:
        if self.data[item_idx] is None:
            raise ValueError(f"Cannot get frames of cached video at {item_idx}")
        return self.get_frames(item_idx)

    def get_num_frames(self, item_idx: int) -> int:
        return len(self._present_frames(item_idx))

    def get_frame_size(self, item_idx: int) -> ImageSize:
        frames = self._present_frames(item_idx)
        if len(frames) == 0:
            raise ValueError(f"Cannot get size of empty video at {item_idx}")
        return image_size_of(frames[0])


__all__ = ["VIDEO_METADATA_REQUIRED_MESSAGE", "VideoProcessorItems", "split_video"]
