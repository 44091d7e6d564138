"""Per-modality limits and dummy-input sizes (vLLM's ``--limit-mm-per-prompt`` options).

``{"image": 4}`` is a count; ``{"video": {"count": 1, "num_frames": 32, "width": 512}}`` also caps
the dummy inputs warmup and profiling build (they are never made larger than the model's own).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_DEFAULT_COUNT = 999


def _check(name: str, value: int | None, *, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class BaseDummyOptions:
    """How many items of a modality one prompt may carry."""

    count: int = _DEFAULT_COUNT

    def __post_init__(self) -> None:
        _check("count", self.count, minimum=0)


@dataclass(frozen=True)
class ImageDummyOptions(BaseDummyOptions):
    width: int | None = None
    height: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check("width", self.width, minimum=1)
        _check("height", self.height, minimum=1)


@dataclass(frozen=True)
class VideoDummyOptions(BaseDummyOptions):
    num_frames: int | None = None
    width: int | None = None
    height: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check("num_frames", self.num_frames, minimum=1)
        _check("width", self.width, minimum=1)
        _check("height", self.height, minimum=1)


@dataclass(frozen=True)
class AudioDummyOptions(BaseDummyOptions):
    length: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check("length", self.length, minimum=1)


class MultiModalDummyOptions(dict[str, BaseDummyOptions]):
    """Modality -> its options (vLLM's ``MultiModalDummyOptions``)."""


_OPTIONS_BY_MODALITY: dict[str, type[BaseDummyOptions]] = {
    "image": ImageDummyOptions,
    "video": VideoDummyOptions,
    "audio": AudioDummyOptions,
}


def dummy_options_from(
    limits: Mapping[str, int | Mapping[str, Any] | BaseDummyOptions],
) -> MultiModalDummyOptions:
    """Options from ``--limit-mm-per-prompt``'s forms: a count, a mapping, or options already."""
    out = MultiModalDummyOptions()
    for modality, value in limits.items():
        if isinstance(value, BaseDummyOptions):
            out[modality] = value
            continue
        fields = {"count": value} if isinstance(value, int) else dict(value)
        out[modality] = _OPTIONS_BY_MODALITY.get(modality, BaseDummyOptions)(**fields)
    return out


__all__ = [
    "AudioDummyOptions",
    "BaseDummyOptions",
    "ImageDummyOptions",
    "MultiModalDummyOptions",
    "VideoDummyOptions",
    "dummy_options_from",
]
