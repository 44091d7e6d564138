"""Applying a request's resolved prompt updates to its token ids, and where each item landed.

Applying works on token ids first. A text target can be missing from the token ids even though
its text is in the prompt, because the tokenizer merged it with its neighbours ("foo" inside the
single token "food"); then the prompt is decoded, the updates are applied to the text, the result
is re-encoded, and the placeholders are located in the re-encoded ids. A prompt short of a
placeholder is the client's error (a 400 naming each modality); the processor's own count checks
(:func:`check_item_counts`) guard against a model file whose outputs disagree with its items.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mediaref.exceptions import VLLMValidationError
from mediaref.inputs import PlaceholderRange
from mediaref.processing._prompt.codec import PromptCodec, TokenizerLike
from mediaref.processing._prompt.details import PromptIndex
from mediaref.processing._prompt.placeholders import (
    PlaceholderFeaturesInfo,
    apply_result,
    placeholder_infos,
)
from mediaref.processing._prompt.placement import (
    MultiModalPromptUpdates,
    Placement,
    locate_placeholders,
    place_updates,
)
from mediaref.processing._prompt.updates import ResolvedPromptUpdate

_TARGET_PREVIEW_CHARS = 60


def _describe_target(
    mm_prompt_updates: MultiModalPromptUpdates, modality: str, item_idx: int
) -> str:
    items = mm_prompt_updates[modality]
    if item_idx >= len(items) or not items[item_idx]:
        return "no prompt update for that item"
    target = items[item_idx][0].target
    text = repr(target if isinstance(target, (str, PromptIndex)) else list(target))
    if len(text) > _TARGET_PREVIEW_CHARS:
        text = text[:_TARGET_PREVIEW_CHARS] + "..."
    return f"target {text}"


def _missing_targets_error(
    mm_prompt_updates: MultiModalPromptUpdates, found_counts: Mapping[str, int]
) -> VLLMValidationError:
    shortfalls = [
        f"{modality}: expected {len(items)} placeholder(s) for {len(items)} {modality} item(s), "
        f"found {found_counts[modality]} "
        f"({_describe_target(mm_prompt_updates, modality, found_counts[modality])})"
        for modality, items in mm_prompt_updates.items()
        if found_counts[modality] < len(items)
    ]
    return VLLMValidationError(
        "The prompt does not hold a placeholder for every multimodal item; "
        + "; ".join(shortfalls)
        + ". If the model has a chat template, apply it to the prompt first.",
        parameter="prompt",
    )


def _is_complete(placement: Placement, mm_prompt_updates: MultiModalPromptUpdates) -> bool:
    return all(
        len(placement.placed[modality]) == len(items)
        for modality, items in mm_prompt_updates.items()
    )


def apply_prompt_updates(
    token_ids: Sequence[int],
    mm_prompt_updates: MultiModalPromptUpdates,
    tokenizer: TokenizerLike | None,
) -> tuple[list[int], dict[str, list[PlaceholderRange]]]:
    """:func:`apply_prompt_updates_with_placeholders`, each placeholder as a range."""
    new_token_ids, placeholders = apply_prompt_updates_with_placeholders(
        token_ids, mm_prompt_updates, tokenizer
    )
    ranges = {m: [info.to_range() for info in infos] for m, infos in placeholders.items()}
    return new_token_ids, ranges


def apply_prompt_updates_with_placeholders(
    token_ids: Sequence[int],
    mm_prompt_updates: MultiModalPromptUpdates,
    tokenizer: TokenizerLike | None,
) -> tuple[list[int], dict[str, list[PlaceholderFeaturesInfo]]]:
    """Apply one update per item to ``token_ids``; return the new ids and each item's placeholder.

    ``mm_prompt_updates`` maps each modality to its items' resolved updates, in item order (an
    item may list alternatives; the one whose target is found first is used). ``tokenizer`` is
    needed only for text targets or contents and for the text fallback.

    Raises :class:`~mediaref.exceptions.VLLMValidationError` (a ``ValueError``) naming each
    modality with fewer target occurrences than items, and ``RuntimeError`` if, after the text
    fallback, an update's content does not survive re-encoding (a content that is not made of
    special tokens can merge with its neighbours).
    """
    codec = PromptCodec(tokenizer)
    on_tokens = place_updates(list(token_ids), mm_prompt_updates, codec)
    if _is_complete(on_tokens, mm_prompt_updates):
        assert isinstance(on_tokens.prompt, list)
        return on_tokens.prompt, placeholder_infos(on_tokens.placed, codec)
    new_token_ids, result = apply_updates_via_text(
        token_ids, mm_prompt_updates, tokenizer, on_tokens.found_counts()
    )
    applied = matched_updates(mm_prompt_updates, result)
    found = placeholder_infos(locate_placeholders(new_token_ids, applied, codec).placed, codec)
    check_placeholders_survived(found, applied)
    return new_token_ids, found


def apply_updates_via_text(
    token_ids: Sequence[int],
    mm_prompt_updates: MultiModalPromptUpdates,
    tokenizer: TokenizerLike | None,
    found_on_tokens: Mapping[str, int],
) -> tuple[list[int], dict[str, list[int | None]]]:
    """The fallback when targets were not all found on the token ids (``found_on_tokens`` of
    each modality): the updates applied to the decoded text, which is encoded back; the new ids
    and which alternative each item used (as :func:`apply_token_matches` reports it)."""
    if tokenizer is None:
        raise _missing_targets_error(mm_prompt_updates, found_on_tokens)
    codec = PromptCodec(tokenizer)
    on_text = place_updates(codec.decode_prompt(token_ids), mm_prompt_updates, codec)
    if not _is_complete(on_text, mm_prompt_updates):
        text_counts = on_text.found_counts()
        best_counts = {m: max(found_on_tokens[m], text_counts[m]) for m in mm_prompt_updates}
        raise _missing_targets_error(mm_prompt_updates, best_counts)
    assert isinstance(on_text.prompt, str)
    return codec.encode_prompt(on_text.prompt), apply_result(on_text, mm_prompt_updates)


def matched_updates(
    mm_prompt_updates: MultiModalPromptUpdates, result: Mapping[str, Sequence[int | None]]
) -> dict[str, list[Sequence[ResolvedPromptUpdate]]]:
    """Each item's update as ``result`` chose it (every item must have matched)."""
    matched: dict[str, list[Sequence[ResolvedPromptUpdate]]] = {}
    for modality, update_idxs in result.items():
        for item_idx, update_idx in enumerate(update_idxs):
            if update_idx is None:
                raise RuntimeError(
                    f"Failed to apply prompt replacement for mm_items[{modality!r}][{item_idx}]"
                )
            chosen = mm_prompt_updates[modality][item_idx][update_idx]
            matched.setdefault(modality, []).append([chosen])
    return matched


def check_placeholders_survived(
    found: Mapping[str, Sequence[PlaceholderFeaturesInfo]],
    applied: Mapping[str, Sequence[object]],
) -> None:
    """After the text fallback, every applied content must be found in the re-encoded ids."""
    lost = [
        f"{m} item {len(found.get(m, []))}"
        for m, items in applied.items()
        if len(found.get(m, [])) < len(items)
    ]
    if lost:
        raise RuntimeError(
            "After applying the prompt updates to the decoded text and re-encoding it, the "
            f"placeholder tokens of {', '.join(lost)} could not be found: the content merged "
            "with neighbouring text. Use special tokens (or token ids) for placeholder content."
        )


def check_item_counts(
    found: Mapping[str, Sequence[object]], mm_item_counts: Mapping[str, int], message: str
) -> None:
    """Raise ``RuntimeError(message)`` unless ``found`` holds one entry per item of each modality
    (``message`` is formatted with ``count``, ``modality`` and ``found``).

    These are the processor's consistency checks, not the client's: a mismatch means a model
    file's hooks disagree with each other.
    """
    for modality, count in mm_item_counts.items():
        got = len(found.get(modality, []))
        if got != count:
            raise RuntimeError(message.format(count=count, modality=modality, found=got))


__all__ = [
    "apply_prompt_updates",
    "apply_prompt_updates_with_placeholders",
    "apply_updates_via_text",
    "check_item_counts",
    "check_placeholders_survived",
    "matched_updates",
]
