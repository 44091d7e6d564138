"""One multimodal item of a request as the engine tracks it through scheduling and caching."""

from __future__ import annotations

from dataclasses import dataclass

from mediaref.inputs._kwargs import MultiModalKwargsItem
from mediaref.inputs._nested import NestedTensors
from mediaref.inputs._placeholders import PlaceholderRange


@dataclass
class MultiModalFeatureSpec:
    """A request's item: its processed data, modality, cache identities and prompt position.

    ``data`` is ``None`` when the frontend found the item cached and sent nothing (the engine-core
    cache fills it in). ``identifier`` keys the encoder-output cache (it may carry a LoRA prefix);
    ``mm_hash``, when set, keys the processor cache, shared across LoRAs.
    """

    data: MultiModalKwargsItem | None
    modality: str
    identifier: str
    mm_position: PlaceholderRange
    mm_hash: str | None = None

    @staticmethod
    def gather_kwargs(
        features: list[MultiModalFeatureSpec], keys: set[str]
    ) -> dict[str, list[NestedTensors]]:
        """For each of ``keys``, the values the features' items hold, in feature order (features
        without data, and items without the key, are skipped)."""
        gathered: dict[str, list[NestedTensors]] = {}
        for feature in features:
            if feature.data is None:
                continue
            for key in keys:
                if key in feature.data:
                    gathered.setdefault(key, []).append(feature.data[key].data)
        return gathered


__all__ = ["MultiModalFeatureSpec"]
