"""What one ``apply()`` call processes, and the per-item hashes that key the processor cache.

An item's hash covers everything its processed output depends on: the model, the item, and the
kwargs that shape its processing. Two exceptions keep that exact rather than redundant:

* a :class:`~mediaref.MediaRef` without a client UUID hashes as its key, which already holds its
  decode spec, so the modality's ``media_io_kwargs`` are left out (they would count twice);
* with a client UUID the key is never consulted, so every factor, ``media_io_kwargs`` included,
  is hashed in with the UUID — unless there is no factor at all, when the UUID is the hash.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mediaref.exceptions import VLLMValidationError
from mediaref.hasher import MMHasherAlgorithm, MultiModalHasher
from mediaref.inputs import MultiModalHashes, MultiModalUUIDDict
from mediaref.media.base import MediaRef
from mediaref.parse import MultiModalDataItems

# HF processors route these kwargs to one modality's sub-processor only, so they are kept out of
# the other modalities' hashes; every other processor kwarg may affect any item.
_MODALITY_PROCESSOR_KWARGS = {
    "image": "images_kwargs",
    "video": "videos_kwargs",
    "audio": "audio_kwargs",
}


def _scoped_processor_kwargs(modality: str, kwargs: Mapping[str, object]) -> dict[str, object]:
    own = _MODALITY_PROCESSOR_KWARGS.get(modality)
    if own is None:  # a modality we cannot scope (e.g. a unified one): keep every factor
        return dict(kwargs)
    others = set(_MODALITY_PROCESSOR_KWARGS.values()) - {own}
    return {key: value for key, value in kwargs.items() if key not in others}


def mm_uuids_for(
    modality: str, mm_uuids: MultiModalUUIDDict | None, count: int
) -> Sequence[str | None]:
    """The client UUIDs of a modality's ``count`` items (None where the client gave none).

    The one check that a client gave one UUID per item: a mismatch is a 400 naming
    ``multi_modal_uuids``.
    """
    given = (mm_uuids or {}).get(modality)
    if given is None:
        return [None] * count
    if isinstance(given, str):
        given = [given]
    if len(given) != count:
        raise VLLMValidationError(
            f"multi_modal_uuids[{modality!r}] has {len(given)} entries for {count} "
            f"{modality} item(s)",
            parameter="multi_modal_uuids",
        )
    return given


@dataclass
class ProcessorInputs:
    """The arguments of ``BaseMultiModalProcessor.apply``."""

    prompt: str | list[int]
    mm_data_items: MultiModalDataItems
    hf_processor_mm_kwargs: Mapping[str, object] = field(default_factory=dict)
    tokenization_kwargs: Mapping[str, object] = field(default_factory=dict)
    mm_uuids: MultiModalUUIDDict | None = None
    media_io_kwargs: Mapping[str, Mapping[str, object]] = field(default_factory=dict)

    def _hash_factors(self, modality: str, *, include_media_io: bool) -> dict[str, object]:
        factors: dict[str, object] = {
            "mm_processor_kwargs": _scoped_processor_kwargs(modality, self.hf_processor_mm_kwargs),
            "tokenization_kwargs": dict(self.tokenization_kwargs),
        }
        if include_media_io:
            factors["media_io_kwargs"] = dict(self.media_io_kwargs.get(modality) or {})
        return {name: value for name, value in factors.items() if value}

    def get_mm_item_hash(
        self,
        modality: str,
        item: object,
        item_uuid: str | None,
        model_id: str,
        hash_algorithm: MMHasherAlgorithm | str = "blake3",
    ) -> str:
        """The hash of one item (``item`` as stored, i.e. from ``get_raw``)."""
        if item_uuid is None:
            if item is None:
                raise VLLMValidationError(
                    f"{modality} item given as None has no UUID in multi_modal_uuids",
                    parameter="multi_modal_uuids",
                )
            factors = self._hash_factors(modality, include_media_io=not isinstance(item, MediaRef))
            return MultiModalHasher.hash_kwargs(
                hash_algorithm, model_id=model_id, **{modality: item}, **factors
            )
        factors = self._hash_factors(modality, include_media_io=True)
        if not factors:
            return item_uuid
        return MultiModalHasher.hash_kwargs(
            hash_algorithm, model_id=model_id, **{modality: item_uuid}, **factors
        )

    def get_mm_hashes(
        self, model_id: str, hash_algorithm: MMHasherAlgorithm | str = "blake3"
    ) -> MultiModalHashes:
        """Per modality, one hash per item; reads raw items, so fetched media is never decoded."""
        hashes: MultiModalHashes = {}
        for modality, items in self.mm_data_items.items():
            count = items.get_count()
            uuids = mm_uuids_for(modality, self.mm_uuids, count)
            hashes[modality] = [
                self.get_mm_item_hash(
                    modality, items.get_raw(i), uuids[i], model_id, hash_algorithm
                )
                for i in range(count)
            ]
        return hashes

    def can_use_cache(self, cache: Any | None) -> bool:
        """Whether the processor cache may serve this request.

        A cache must be present, and no item may be passthrough data (embeddings the HF processor
        never sees): those bypass processing, so there is no processed output to cache.
        """
        if cache is None:
            return False
        return not any(items.get_passthrough_data() for items in self.mm_data_items.values())


__all__ = ["ProcessorInputs", "mm_uuids_for"]
