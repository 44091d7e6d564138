"""``MultiModalDataParser``: a request's ``multi_modal_data`` -> :class:`MultiModalDataItems`.

Fetched media arrives as :class:`MediaRef` s, and the parser prepares them without decoding: audio
resampling and channel normalization are mapped onto the ref, with settings that enter its key;
image refs are left alone (mode conversion happens inside the image decoder); a video ref keeps
its ``(frames, metadata)`` whole and, when the model needs metadata, checks for it at decode time.
Each of those transforms runs in the parallel decode phase, on the media pool.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

import numpy as np
import torch
from PIL.Image import Image

from mediaref.audio import AudioNormalizer, AudioResampleMethod, AudioResampler
from mediaref.image import convert_image_mode, normalize_image
from mediaref.inputs import ModalityData, MultiModalDataDict
from mediaref.media.base import MediaRef, MediaWithBytes
from mediaref.parse._embeddings import (
    AudioEmbeddingItems,
    DictEmbeddingItems,
    EmbeddingFieldRole,
    ImageEmbeddingItems,
    VideoEmbeddingItems,
    audio_embedding_items,
)
from mediaref.parse._items import (
    AudioProcessorItems,
    ImageProcessorItems,
    ModalityDataItems,
    MultiModalDataItems,
    VisionChunkProcessorItems,
)
from mediaref.parse._locations import refuse_location_items
from mediaref.parse._request_caps import check_request_caps
from mediaref.parse._video import VIDEO_METADATA_REQUIRED_MESSAGE, VideoProcessorItems

ModalityDataParser = Callable[[ModalityData[Any]], "ModalityDataItems[Any, Any] | None"]

_Array = (np.ndarray, torch.Tensor)


def _is_list_of(data: object, types: type | tuple[type, ...]) -> bool:
    return isinstance(data, list) and len(data) > 0 and all(isinstance(x, types) for x in data)


def _is_frame_list(data: object) -> bool:
    """A non-empty list of frames — PIL images or 3-D arrays — is one video, not many."""
    if _is_list_of(data, Image):
        return True
    return (
        isinstance(data, list)
        and _is_list_of(data, _Array)
        and all(frame.ndim == 3 for frame in data)
    )


def _prepare_items(
    items: list[Any],
    prepare_ref: Callable[[MediaRef[Any]], MediaRef[Any]],
    prepare_value: Callable[[Any], Any],
) -> list[Any]:
    """Refs get their deferred transforms mapped on, decoded values are prepared now; None stays."""
    return [
        None
        if item is None
        else prepare_ref(item)
        if isinstance(item, MediaRef)
        else prepare_value(item)
        for item in items
    ]


class MultiModalDataParser:
    """Parses ``multi_modal_data`` into items, with vLLM's options.

    Args:
        target_sr: resample audio to this rate (items whose rate is known).
        target_channels: normalize audio to this many channels (1: downmix to mono).
        audio_resample_method: vLLM's methods (``"torchaudio"``, its default, and ``"pyav"``,
            ``"scipy"``, ``"soxr"``) or ``"librosa"`` (soxr at librosa's default quality).
        video_needs_metadata: HF sees ``(frames, metadata)`` per video; a video without metadata
            is rejected (at parse time when supplied decoded, at decode time when fetched).
        expected_hidden_size: reject embeddings whose last dimension differs.
        allow_missing_mm_embeddings: precomputed embedding values may be absent from a request
            (an encoder-cache consumer receives them through its connector); their placeholder
            metadata stays required. See :meth:`embedding_field_sets`.
    """

    embedding_fields: Mapping[str, Mapping[str, EmbeddingFieldRole]] = {}
    """Per modality, the fields of a precomputed-embedding input (a dict) and the role of each.

    Declared on the class, not inside the parse methods, so the side that produces embeddings
    can read which processed keys to publish from the same declaration the consumer parses with.
    A modality absent here can only be sent as media or as a plain embedding tensor.
    """

    def __init__(
        self,
        *,
        target_sr: float | None = None,
        target_channels: int | None = None,
        audio_resample_method: AudioResampleMethod = "torchaudio",
        video_needs_metadata: bool = False,
        expected_hidden_size: int | None = None,
        allow_missing_mm_embeddings: bool = False,
    ) -> None:
        self.allow_missing_mm_embeddings = allow_missing_mm_embeddings
        self.audio_resampler = AudioResampler(target_sr=target_sr, method=audio_resample_method)
        self.audio_normalizer = AudioNormalizer(self.audio_resampler, target_channels)
        self.target_channels = target_channels
        self.video_needs_metadata = video_needs_metadata
        self.expected_hidden_size = expected_hidden_size

    @property
    def target_sr(self) -> float | None:
        return self.audio_resampler.target_sr

    @classmethod
    def placeholder_metadata_fields(cls, modality: str) -> set[str]:
        """The fields of ``modality``'s embedding input that size its placeholder range."""
        roles = cls.embedding_fields.get(modality, {})
        return {field for field, role in roles.items() if role == "metadata"}

    def embedding_field_sets(self, modality: str) -> tuple[set[str], set[str]]:
        """``(required, optional)`` fields of ``modality``'s embedding input here: the values are
        optional only where embeddings may arrive without the request
        (``allow_missing_mm_embeddings``); the metadata is always required."""
        metadata = self.placeholder_metadata_fields(modality)
        values = set(self.embedding_fields.get(modality, {})) - metadata
        if self.allow_missing_mm_embeddings:
            return metadata, values
        return metadata | values, set()

    @classmethod
    def is_embeddings(cls, data: object) -> TypeGuard[torch.Tensor | list[torch.Tensor]]:
        if isinstance(data, torch.Tensor):
            return data.ndim == 3
        if _is_list_of(data, torch.Tensor):
            return bool(data[0].ndim == 2)  # type: ignore[index]
        return False

    def _is_empty(self, data: object) -> bool:
        if isinstance(data, list):
            return len(data) == 0
        if isinstance(data, np.ndarray):
            return data.size == 0
        if isinstance(data, torch.Tensor):
            return data.numel() == 0
        return False

    # --- audio -------------------------------------------------------------------------------

    def _get_audio_with_sr(self, audio: Any) -> tuple[np.ndarray, float | None]:
        if isinstance(audio, tuple):
            samples, rate = audio
            return self._as_samples(samples), float(rate)
        return self._as_samples(audio), None

    @staticmethod
    def _as_samples(audio: Any) -> np.ndarray:
        if isinstance(audio, np.ndarray):
            return audio
        if isinstance(audio, torch.Tensor):
            return audio.detach().cpu().numpy()
        if isinstance(audio, list):
            return np.asarray(audio)
        raise TypeError(f"unsupported audio item of type {type(audio).__name__}")

    def _prepare_audio_ref(self, ref: MediaRef[Any]) -> MediaRef[Any]:
        # The rate is known only after decode, so the transform runs then, in the decode worker;
        # its settings (target rate, method, channels) extend the spec and so the key.
        return ref.map(
            self.audio_normalizer.normalize_decoded, **self.audio_normalizer.ref_settings()
        )

    def _parse_audio_data(self, data: ModalityData[Any]) -> ModalityDataItems[Any, Any] | None:
        if data is None:
            return AudioProcessorItems(None)
        if self._is_empty(data) or (isinstance(data, tuple) and self._is_empty(data[0])):
            return None
        if self.is_embeddings(data):
            return AudioEmbeddingItems(data, self.expected_hidden_size)
        if isinstance(data, dict) and "audio_num_tokens" in self.embedding_fields.get("audio", {}):
            return self._parse_audio_embedding_data(data)

        items: list[Any]
        if (
            isinstance(data, (MediaRef, tuple))
            or _is_list_of(data, float)
            or (isinstance(data, _Array) and data.ndim == 1)
        ):
            items = [data]
        else:  # a list of clips, or a 2-D array of mono clips
            items = list(data)

        return AudioProcessorItems(
            _prepare_items(items, self._prepare_audio_ref, self._normalize_audio)
        )

    def _parse_audio_embedding_data(self, data: Mapping[str, Any]) -> DictEmbeddingItems:
        """Audio given as ``audio_embeds`` with ``audio_num_tokens``, for models that declare those
        fields in :attr:`embedding_fields`."""
        required, optional = self.embedding_field_sets("audio")
        return audio_embedding_items(data, required, optional)

    def _normalize_audio(self, item: Any) -> Any:
        samples, rate = self._get_audio_with_sr(item)
        return self.audio_normalizer.normalize(samples, rate, channels_first=False)

    # --- image -------------------------------------------------------------------------------

    def _parse_image_data(self, data: ModalityData[Any]) -> ModalityDataItems[Any, Any] | None:
        if data is None:
            return ImageProcessorItems(None)
        if self._is_empty(data):
            return None
        if self.is_embeddings(data):
            return ImageEmbeddingItems(data, self.expected_hidden_size)
        items: list[Any]
        if isinstance(data, (Image, MediaRef, MediaWithBytes)) or (
            isinstance(data, _Array) and data.ndim in (2, 3)
        ):
            items = [data]
        else:
            items = list(data)
        # Image refs need no preparation: the decoder already converts to the target mode. A PIL
        # image is turned upright and made RGB here, as vLLM does, so both hash the same pixels.
        return ImageProcessorItems(
            [
                convert_image_mode(normalize_image(item), "RGB")
                if isinstance(item, Image)
                else item
                for item in items
            ]
        )

    # --- video -------------------------------------------------------------------------------

    def _get_video_with_metadata(self, video: Any) -> tuple[Any, dict[str, Any] | None]:
        """Frames and metadata of a decoded video item. Subclasses override to supply defaults.

        ``MediaWithBytes((frames, metadata), data)`` gives ``MediaWithBytes(frames, data)`` and the
        metadata, as vLLM's does: the hasher then reads the frames or the bytes, whichever is
        smaller, never a pickle of the pair."""
        if isinstance(video, MediaWithBytes):
            frames, metadata = self._get_video_with_metadata(video.media)
            return MediaWithBytes(frames, video.original_bytes), metadata
        if isinstance(video, tuple):
            frames, metadata = video
            return frames, metadata
        if isinstance(video, list):
            return np.array(video), None
        # Arrays and tensors pass as they are (a device tensor stays on its device, as in vLLM).
        return video, None

    def _check_video(self, video: Any) -> Any:
        """The raw item to store: ``(frames, metadata)`` when there is metadata, else frames."""
        frames, metadata = self._get_video_with_metadata(video)
        if metadata is None:
            if self.video_needs_metadata:
                raise ValueError(VIDEO_METADATA_REQUIRED_MESSAGE)
            return frames
        return frames, metadata

    def _prepare_video_ref(self, ref: MediaRef[Any]) -> MediaRef[Any]:
        if not self.video_needs_metadata:
            return ref
        # Runs at decode time and keeps (frames, metadata) whole. No settings: a video that passes
        # the check decodes to exactly what the unmapped ref would, so the key is unchanged.
        return ref.map(self._check_video)

    def _parse_video_data(self, data: ModalityData[Any]) -> ModalityDataItems[Any, Any] | None:
        if data is None:
            return VideoProcessorItems(None, video_needs_metadata=self.video_needs_metadata)
        if self._is_empty(data):
            return None
        if self.is_embeddings(data):
            return VideoEmbeddingItems(data, self.expected_hidden_size)

        items: list[Any]
        if (
            isinstance(data, MediaRef)
            or _is_frame_list(data)
            or (isinstance(data, _Array) and data.ndim == 4)
            or (isinstance(data, tuple) and len(data) == 2)
        ):
            items = [data]
        else:
            items = list(data)

        return VideoProcessorItems(
            _prepare_items(items, self._prepare_video_ref, self._check_video),
            video_needs_metadata=self.video_needs_metadata,
        )

    # --- vision chunks ------------------------------------------------------------------------

    def _parse_vision_chunk_data(
        self, data: ModalityData[Any]
    ) -> ModalityDataItems[Any, Any] | None:
        """Images and video chunks of the unified ``vision_chunk`` modality (the request parser
        has decoded them); one chunk may be given bare."""
        if data is None:
            return None
        if self.is_embeddings(data):
            raise ValueError("Do not support embedding data for vision_chunk right now")
        return VisionChunkProcessorItems([data] if isinstance(data, dict) else list(data))

    # --- all modalities ----------------------------------------------------------------------

    def _get_subparsers(self) -> Mapping[str, ModalityDataParser]:
        return {
            "audio": self._parse_audio_data,
            "image": self._parse_image_data,
            "video": self._parse_video_data,
            "vision_chunk": self._parse_vision_chunk_data,
        }

    def parse_mm_data(self, mm_data: MultiModalDataDict) -> MultiModalDataItems:
        subparsers = self._get_subparsers()
        mm_items = MultiModalDataItems()
        for modality, data in mm_data.items():
            if modality not in subparsers:
                raise ValueError(f"Unsupported modality: {modality}")
            refuse_location_items(modality, data)
            parsed = subparsers[modality](data)
            if parsed is not None:  # empty data is dropped, as in vLLM
                mm_items[modality] = parsed
        check_request_caps(
            (modality, index, items.get_raw(index))
            for modality, items in mm_items.items()
            for index in range(items.get_count())
        )
        return mm_items


__all__ = ["ModalityDataParser", "MultiModalDataParser"]
