"""What one ``apply()`` call processes, and the per-item hashes that key the processor cache.

An item's hash covers everything its processed output depends on — the model, the item, and the
kwargs that shape its processing — with the factors vLLM 0.33 hashes, so a mediaref frontend and
a vLLM frontend agree on the hash of any item that is not a :class:`~mediaref.MediaRef`:

* ``mm_processor_kwargs`` without the other modalities' scopes (``images_kwargs`` reaches only
  images...), and ``media_io_kwargs`` as ``{modality: its kwargs}``; a modality that cannot be
  scoped (``vision_chunk``) hashes every factor;
* a :class:`~mediaref.MediaRef` without a client UUID hashes as its key, which already holds its
  decode spec, so the modality's ``media_io_kwargs`` are left out (they would count twice);
* with a client UUID the key is never consulted, so every factor, ``media_io_kwargs`` included,
  is hashed in with the UUID — unless there is no factor at all, when the UUID is the hash.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from mediaref.cache import BaseMultiModalProcessorCache
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

MultiModalUUIDItems = Mapping[str, Sequence[str | None]]
"""Per modality, one client UUID (or None) per item."""


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


def uuid_items_from(mm_uuids: MultiModalUUIDDict | None) -> dict[str, list[str | None]]:
    """A request's ``multi_modal_uuids`` as per-item lists (a bare string is one item's UUID)."""
    items: dict[str, list[str | None]] = {}
    for modality, given in (mm_uuids or {}).items():
        if given is None:
            continue
        items[modality] = [given] if isinstance(given, str) else list(given)
    return items


def validate_mm_uuids(mm_items: MultiModalDataItems, mm_uuid_items: MultiModalUUIDItems) -> None:
    """Client UUIDs, where given, come one per item of a modality the request has."""
    counts = mm_items.get_all_counts()
    for modality, uuids in mm_uuid_items.items():
        if modality not in counts:
            raise VLLMValidationError(
                f"multi_modal_uuids[{modality!r}] is given but the request has no {modality} items",
                parameter="multi_modal_uuids",
            )
        if len(uuids) != counts[modality]:
            raise VLLMValidationError(
                f"multi_modal_uuids[{modality!r}] has {len(uuids)} entries for "
                f"{counts[modality]} {modality} item(s)",
                parameter="multi_modal_uuids",
            )


def _hash_factors(
    modality: str,
    hf_processor_mm_kwargs: Mapping[str, object],
    media_io_kwargs: Mapping[str, Mapping[str, object]],
    *,
    include_media_io: bool,
) -> dict[str, object]:
    own = _MODALITY_PROCESSOR_KWARGS.get(modality)
    if own is None:  # a modality we cannot scope (e.g. a unified one): keep every factor
        media_io: dict[str, object] = dict(media_io_kwargs)
        processor_kwargs = dict(hf_processor_mm_kwargs)
    else:
        modality_io = media_io_kwargs.get(modality) or {}
        media_io = {modality: modality_io} if modality_io else {}
        others = set(_MODALITY_PROCESSOR_KWARGS.values()) - {own}
        processor_kwargs = {k: v for k, v in hf_processor_mm_kwargs.items() if k not in others}
    factors: dict[str, object] = {"mm_processor_kwargs": processor_kwargs}
    if include_media_io:
        factors["media_io_kwargs"] = media_io
    return {name: value for name, value in factors.items() if value}


@dataclass
class ProcessorInputs:
    """The arguments of ``BaseMultiModalProcessor.apply``.

    ``cache`` is the processor output cache this request may use (None: none). Processing
    releases only ``owned_refs``: the forks :meth:`BaseMultiModalProcessor.build_inputs` made. A
    ``ProcessorInputs`` built by hand owns none, so its caller's refs are never released under it.
    """

    prompt: str | list[int]
    mm_data_items: MultiModalDataItems
    mm_uuid_items: MultiModalUUIDItems | None = None
    hf_processor_mm_kwargs: Mapping[str, object] = field(default_factory=dict)
    media_io_kwargs: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    cache: BaseMultiModalProcessorCache | None = None
    _: KW_ONLY
    tokenization_kwargs: Mapping[str, object] = field(default_factory=dict)
    """How a text ``prompt`` is encoded (mediaref: vLLM's prompts arrive as token ids)."""
    owned_refs: list[MediaRef[Any]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.mm_uuid_items is not None:
            self.mm_uuid_items = uuid_items_from(self.mm_uuid_items)

    def get_mm_item_hash(
        self,
        modality: str,
        item: object,
        item_uuid: str | None,
        model_id: str,
        hash_algorithm: MMHasherAlgorithm | str = "blake3",
    ) -> str:
        """The hash of one item (``item`` as the hasher reads it: ``get_item_for_hash``)."""
        if item_uuid is None:
            if item is None:
                raise VLLMValidationError(
                    f"{modality} item given as None has no UUID in multi_modal_uuids",
                    parameter="multi_modal_uuids",
                )
            if isinstance(item, MediaRef):
                # Hashed as vLLM hashes it when the decoder knows what vLLM reads (an image's
                # bytes), with vLLM's factors; else by its key, which holds the decode
                # settings already (so media_io_kwargs would count twice).
                view = item.hash_view()
                item = item if view is None else view
            factors = _hash_factors(
                modality,
                self.hf_processor_mm_kwargs,
                self.media_io_kwargs,
                include_media_io=not isinstance(item, MediaRef),
            )
            return MultiModalHasher.hash_kwargs(
                hash_algorithm, model_id=model_id, **{modality: item}, **factors
            )
        factors = _hash_factors(
            modality, self.hf_processor_mm_kwargs, self.media_io_kwargs, include_media_io=True
        )
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
            uuids = mm_uuids_for(modality, self.mm_uuid_items, count)
            hashes[modality] = [
                self.get_mm_item_hash(
                    modality, items.get_item_for_hash(i), uuids[i], model_id, hash_algorithm
                )
                for i in range(count)
            ]
        return hashes

    def can_use_cache(self) -> bool:
        """Whether the processor cache may serve this request.

        A cache must be present, and no item may be passthrough data (embeddings the HF processor
        never sees): those bypass processing, so there is no processed output to cache.
        """
        if self.cache is None:
            return False
        return not any(items.get_passthrough_data() for items in self.mm_data_items.values())


__all__ = [
    "BaseMultiModalProcessorCache",
    "MultiModalUUIDItems",
    "ProcessorInputs",
    "mm_uuids_for",
    "uuid_items_from",
    "validate_mm_uuids",
]
