"""Where a request's multimodal items sit in its prompt: ordering them, finding those in a token
window, and dropping the payload of items a prefix-cache hit already covers."""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Mapping, Sequence

from mediaref.inputs import MultiModalFeatureSpec, MultiModalKwargsItem, PlaceholderRange


def argsort_mm_positions(
    mm_positions: Mapping[str, Sequence[PlaceholderRange]],
) -> list[tuple[str, int]]:
    """``(modality, index)`` of every item, ordered by where its placeholder starts in the prompt.

    ``mm_positions[modality][index]`` is then the item; items starting at the same offset keep
    their modality's and index's order.
    """
    flat = [
        (position.offset, order, modality, index)
        for order, (modality, positions) in enumerate(mm_positions.items())
        for index, position in enumerate(positions)
    ]
    flat.sort(key=lambda entry: (entry[0], entry[1], entry[3]))
    return [(modality, index) for _, _, modality, index in flat]


def get_mm_features_in_window(
    mm_features: Sequence[MultiModalFeatureSpec], start: int, end: int
) -> tuple[int, int]:
    """``(lo, hi)``: ``mm_features[lo:hi]`` are the features whose placeholders overlap the token
    window ``[start, end)``.

    The features must be sorted by offset and must not overlap (as a request's are), so their
    ends are sorted too and both bounds are binary searches.
    """
    lo = bisect.bisect_left(
        mm_features, start + 1, key=lambda f: f.mm_position.offset + f.mm_position.length
    )
    hi = bisect.bisect_left(mm_features, end, key=lambda f: f.mm_position.offset)
    return lo, hi


def strip_covered_mm_data(
    mm_features: list[MultiModalFeatureSpec], num_computed_tokens: int, uses_mrope: bool = False
) -> list[MultiModalFeatureSpec]:
    """The features, with the payload dropped from those whose placeholders lie wholly within
    the first ``num_computed_tokens`` tokens (a prefix-cache hit: no encoder run needs them).

    For M-RoPE models the fields kept on the CPU (what position ids are computed from) stay. An
    item addressing shared memory (an ``"address"`` key) keeps its payload, so the worker can
    release the sender's reference to it. The list given is not changed.
    """
    if not mm_features or num_computed_tokens == 0:
        return mm_features

    def strip(feature: MultiModalFeatureSpec) -> MultiModalFeatureSpec:
        data = feature.data
        position = feature.mm_position
        if (
            data is None
            or "address" in data
            or position.offset + position.length > num_computed_tokens
        ):
            return feature
        kept = None
        if uses_mrope:
            kept = MultiModalKwargsItem(
                {key: elem for key, elem in data.items() if elem.field.keep_on_cpu}
            )
        return dataclasses.replace(feature, data=kept)

    return [strip(feature) for feature in mm_features]


__all__ = ["argsort_mm_positions", "get_mm_features_in_window", "strip_covered_mm_data"]
