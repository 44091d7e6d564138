"""vLLM's token-level prompt-update functions, over mediaref's linear-time placement walks.

:func:`apply_token_matches` applies each item's update to token ids and says which alternative
each item used; :func:`find_mm_placeholders` finds contents already in the token ids (where an HF
processor applied them); both describe an item's tokens as a :class:`PlaceholderFeaturesInfo`.
:func:`iter_token_matches` and :func:`replace_token_matches` are the plain sequence helpers.
They take token ids, as vLLM's do; a text target or content (a mediaref extension) needs the
keyword-only ``tokenizer``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import ItemsView, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import torch

from mediaref.inputs import PlaceholderRange
from mediaref.processing._prompt.codec import PromptCodec, TokenizerLike, as_token_ids
from mediaref.processing._prompt.matching import iter_disjoint_occurrences
from mediaref.processing._prompt.placement import (
    MultiModalPromptUpdates,
    PlacedUpdate,
    Placement,
    locate_placeholders,
    place_updates,
)
from mediaref.processing._prompt.updates import PromptTargetMatch

MultiModalIsCached = dict[str, list[bool]]
"""Per modality, whether each item was in the processor cache."""

MultiModalPromptUpdatesApplyResult = Mapping[str, list[int | None]]
"""Per modality and item, the index of the alternative update that was applied (None: none was)."""


class _HasModality(Protocol):
    @property
    def modality(self) -> str: ...


_M = TypeVar("_M", bound=_HasModality)


def full_groupby_modality(values: Iterable[_M]) -> ItemsView[str, list[_M]]:
    """Group ``values`` by their ``modality``, in order of first appearance; a group is not broken
    by values of other modalities in between."""
    groups: defaultdict[str, list[_M]] = defaultdict(list)
    for value in values:
        groups[value.modality].append(value)
    return groups.items()


@dataclass
class PlaceholderFeaturesInfo:
    """Where one item's content sits in the token ids, and which of its tokens embed."""

    modality: str
    item_idx: int
    start_idx: int
    tokens: list[int]
    is_embed: torch.Tensor | None

    @property
    def length(self) -> int:
        return len(self.tokens)

    def to_range(self) -> PlaceholderRange:
        return PlaceholderRange(offset=self.start_idx, length=self.length, is_embed=self.is_embed)


def iter_token_matches(
    token_ids: Sequence[int], match_ids: Sequence[int], *, start_idx: int = 0
) -> Iterator[PromptTargetMatch]:
    """Each occurrence of ``match_ids`` in ``token_ids`` from ``start_idx``, leftmost first and
    without overlaps; an empty ``match_ids`` matches nowhere. Linear in ``token_ids``."""
    if start_idx < 0:
        raise ValueError("start_idx must be non-negative")
    needle = as_token_ids(match_ids)
    for found in iter_disjoint_occurrences(token_ids, needle, start_idx):
        yield PromptTargetMatch(found, found + len(needle))


def replace_token_matches(
    token_ids: Sequence[int], match_ids: Sequence[int], new_ids: Sequence[int]
) -> list[int]:
    """``token_ids`` with each occurrence of ``match_ids`` (as :func:`iter_token_matches` finds
    them) replaced by ``new_ids``."""
    out: list[int] = []
    kept_from = 0
    for match in iter_token_matches(token_ids, match_ids):
        out.extend(token_ids[kept_from : match.start_idx])
        out.extend(new_ids)
        kept_from = match.end_idx
    out.extend(token_ids[kept_from:])
    return out


def apply_result(
    placement: Placement, mm_prompt_updates: MultiModalPromptUpdates
) -> dict[str, list[int | None]]:
    """Per modality and item, which alternative ``placement`` placed (None: not placed)."""
    result: dict[str, list[int | None]] = {
        modality: [None] * len(items) for modality, items in mm_prompt_updates.items()
    }
    for modality, placed in placement.placed.items():
        for item_idx, item in enumerate(placed):
            result[modality][item_idx] = item.update_idx
    return result


def _placed_on_tokens(
    prompt: Sequence[int],
    mm_prompt_updates: MultiModalPromptUpdates,
    tokenizer: TokenizerLike | None,
) -> tuple[PromptCodec, Placement, list[int]]:
    """The updates placed on the token ids ``prompt``: the codec, the placement, the new ids."""
    codec = PromptCodec(tokenizer)
    placement = place_updates(list(prompt), mm_prompt_updates, codec)
    assert isinstance(placement.prompt, list)
    return codec, placement, placement.prompt


def apply_token_matches(
    prompt: Sequence[int],
    mm_prompt_updates: MultiModalPromptUpdates,
    *,
    tokenizer: TokenizerLike | None = None,
) -> tuple[list[int], MultiModalPromptUpdatesApplyResult]:
    """Apply each item's update to the token ids ``prompt``; the new ids and which alternative
    each item used (None where its target was not found).

    Matches never overlap, also when modalities share a placeholder token: at one position the
    modality listed first in ``mm_prompt_updates`` wins.
    """
    _, placement, new_ids = _placed_on_tokens(prompt, mm_prompt_updates, tokenizer)
    return new_ids, apply_result(placement, mm_prompt_updates)


def apply_matches_as_segments(
    prompt: Sequence[int],
    mm_prompt_updates: MultiModalPromptUpdates,
    *,
    tokenizer: TokenizerLike | None = None,
) -> tuple[list[list[int]], MultiModalPromptUpdatesApplyResult]:
    """:func:`apply_token_matches` with the new ids cut into segments, as vLLM's private
    ``_apply_matches`` returns them: the prompt's ids before each placed content, the content,
    and so on, ending with the ids after the last content (flattened: the new ids)."""
    _, placement, new_ids = _placed_on_tokens(prompt, mm_prompt_updates, tokenizer)
    placed = sorted(
        (item for items in placement.placed.values() for item in items), key=lambda i: i.offset
    )
    segments: list[list[int]] = []
    kept_from = 0
    for item in placed:
        segments.append(new_ids[kept_from : item.offset])
        segments.append(new_ids[item.offset : item.offset + item.length])
        kept_from = item.offset + item.length
    segments.append(new_ids[kept_from:])
    return segments, apply_result(placement, mm_prompt_updates)


def apply_token_matches_with_placeholders(
    prompt: Sequence[int],
    mm_prompt_updates: MultiModalPromptUpdates,
    *,
    tokenizer: TokenizerLike | None = None,
) -> tuple[list[int], MultiModalPromptUpdatesApplyResult, dict[str, list[PlaceholderFeaturesInfo]]]:
    """:func:`apply_token_matches`, and each placed item's placeholder (every modality listed)."""
    codec, placement, new_ids = _placed_on_tokens(prompt, mm_prompt_updates, tokenizer)
    placeholders: dict[str, list[PlaceholderFeaturesInfo]] = {m: [] for m in mm_prompt_updates}
    for modality, infos in placeholder_infos(placement.placed, codec).items():
        # An update whose content is empty placed nothing to point at: no placeholder, as vLLM.
        placeholders[modality] = [info for info in infos if info.tokens]
    return new_ids, apply_result(placement, mm_prompt_updates), placeholders


def placeholder_infos(
    placed: Mapping[str, Sequence[PlacedUpdate]], codec: PromptCodec
) -> dict[str, list[PlaceholderFeaturesInfo]]:
    """The placed items as :class:`PlaceholderFeaturesInfo` s, per modality."""
    infos: dict[str, list[PlaceholderFeaturesInfo]] = {}
    for modality, items in placed.items():
        infos[modality] = []
        for item_idx, item in enumerate(items):
            tokens = list(codec.token_ids(item.update.content.full))
            infos[modality].append(
                PlaceholderFeaturesInfo(
                    modality=modality,
                    item_idx=item_idx,
                    start_idx=item.offset,
                    tokens=tokens,
                    is_embed=item.update.content.embed_mask(codec, tokens),
                )
            )
    return infos


def find_mm_placeholders(
    prompt: Sequence[int],
    mm_prompt_updates: MultiModalPromptUpdates,
    *,
    tokenizer: TokenizerLike | None = None,
) -> Mapping[str, list[PlaceholderFeaturesInfo]]:
    """Find each item's content where it already is in the token ids ``prompt`` (applied by the
    HF processor), items of a modality in order, without overlaps.

    At one position the modality listed first wins. An item whose content is not found ends its
    modality's list (the caller compares the lengths with the item counts); a modality with no
    item found is absent, so nothing found gives ``{}``.
    """
    codec = PromptCodec(tokenizer)
    located = locate_placeholders(list(prompt), mm_prompt_updates, codec)
    infos = {m: found for m, found in placeholder_infos(located.placed, codec).items() if found}
    # vLLM groups what it finds in prompt order: a modality is keyed where its first item is.
    order = sorted(infos, key=lambda modality: infos[modality][0].start_idx)
    return {modality: infos[modality] for modality in order}


__all__ = [
    "MultiModalIsCached",
    "MultiModalPromptUpdatesApplyResult",
    "PlaceholderFeaturesInfo",
    "apply_matches_as_segments",
    "apply_result",
    "apply_token_matches",
    "apply_token_matches_with_placeholders",
    "find_mm_placeholders",
    "full_groupby_modality",
    "iter_token_matches",
    "placeholder_infos",
    "replace_token_matches",
]
