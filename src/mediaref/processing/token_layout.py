"""A prompt's token layout as a value: text spans and media spans, in prompt order.

The request driver expands each item's placeholder into the tokens its encoder output fills. The
same layout also decides where each item sits (its :class:`PlaceholderRange`) and what position each
token gets, so it is kept as one value, :class:`TokenLayout`, from which all three derive:

- :meth:`TokenLayout.token_ids`: the expanded prompt,
- :meth:`TokenLayout.placeholders`: each modality's ranges, ``is_embed`` set where markers interleave,
- positions: 1-D (:meth:`TokenLayout.positions`) or a model's own rule computed from the spans
  (Qwen2-VL's M-RoPE: :mod:`mediaref.models.qwen2_vl_mrope`).

A media span is either one placeholder id repeated (Qwen2-VL's ``<|image_pad|>`` x N: every
token takes an embedding) or an explicit id sequence for families that interleave structural
markers with the embedding tokens (row breaks, per-frame separators); there ``embed_mask`` says
which tokens take embeddings, as vLLM's ``PromptUpdateDetails.select_token_id`` does.

The layout is model-independent: it knows token ids and modalities, never grids or configs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import torch

from mediaref.inputs import PlaceholderRange


@dataclass(frozen=True)
class TextSpan:
    """Prompt tokens that are plain text (structural markers outside an item included)."""

    token_ids: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True)
class MediaSpan:
    """The ``length`` tokens one multimodal item occupies.

    Exactly one of ``placeholder_id`` (the span is that id repeated ``length`` times, every token
    an embedding) and ``token_ids`` (the explicit sequence) is set. ``embed_mask`` goes with
    ``token_ids`` only: which of them take embeddings (``None``: all of them). Build spans with
    :meth:`repeat` and :meth:`sequence`.
    """

    modality: str
    length: int
    placeholder_id: int | None = None
    token_ids: tuple[int, ...] | None = None
    embed_mask: tuple[bool, ...] | None = None

    def __post_init__(self) -> None:
        if self.length < 1:
            raise ValueError(f"A {self.modality} span needs at least one token, got {self.length}")
        if (self.placeholder_id is None) == (self.token_ids is None):
            raise ValueError("Set exactly one of placeholder_id and token_ids")
        if self.token_ids is not None and len(self.token_ids) != self.length:
            raise ValueError(f"length={self.length} but {len(self.token_ids)} token ids")
        if self.embed_mask is not None:
            if self.token_ids is None:
                raise ValueError("embed_mask goes with explicit token_ids only")
            if len(self.embed_mask) != self.length:
                raise ValueError(f"length={self.length} but {len(self.embed_mask)} mask flags")
            if not any(self.embed_mask):
                raise ValueError(f"A {self.modality} span must hold at least one embedding token")

    @classmethod
    def repeat(cls, modality: str, placeholder_id: int, length: int) -> MediaSpan:
        """``placeholder_id`` repeated ``length`` times (stored as one id, never expanded)."""
        return cls(modality, length, placeholder_id=placeholder_id)

    @classmethod
    def sequence(
        cls,
        modality: str,
        token_ids: Sequence[int],
        *,
        embed_token_id: int | None = None,
        embed_mask: Sequence[bool] | None = None,
    ) -> MediaSpan:
        """An explicit id sequence; the embedding tokens are those equal to ``embed_token_id``,
        or those ``embed_mask`` flags (give at most one; neither: every token)."""
        if embed_token_id is not None and embed_mask is not None:
            raise ValueError("Give embed_token_id or embed_mask, not both")
        ids = tuple(int(token) for token in token_ids)
        if embed_token_id is not None:
            mask: tuple[bool, ...] | None = tuple(token == embed_token_id for token in ids)
        else:
            mask = None if embed_mask is None else tuple(bool(flag) for flag in embed_mask)
        if mask is not None and all(mask):
            mask = None  # every token embeds: the same as no mask, as PlaceholderRange reads it
        return cls(modality, len(ids), token_ids=ids, embed_mask=mask)

    def __len__(self) -> int:
        return self.length

    @property
    def is_repeat(self) -> bool:
        """Whether the span is its placeholder id repeated (no interleaved markers)."""
        return self.placeholder_id is not None

    def ids(self) -> list[int]:
        """The span's token ids, expanded."""
        if self.token_ids is not None:
            return list(self.token_ids)
        assert self.placeholder_id is not None
        return [self.placeholder_id] * self.length

    def is_embed(self) -> torch.Tensor | None:
        """The mask a :class:`PlaceholderRange` carries (``None``: every token embeds)."""
        if self.embed_mask is None:
            return None
        return torch.tensor(self.embed_mask, dtype=torch.bool)

    @property
    def num_embeds(self) -> int:
        """How many of the span's tokens take an embedding."""
        return self.length if self.embed_mask is None else sum(self.embed_mask)


Span: TypeAlias = TextSpan | MediaSpan


@dataclass(frozen=True)
class TokenLayout:
    """A prompt as text and media spans in order; ids, placeholders and positions derive from it.

    Empty text spans are dropped and adjacent ones merged, so two layouts of the same prompt and
    items compare equal however they were built. Build one from spans, from an expanded prompt
    (:meth:`from_token_ids`) or from a processor's output (:meth:`from_placeholders`).
    """

    spans: tuple[Span, ...]
    offsets: tuple[int, ...] = field(init=False, repr=False, compare=False)
    num_tokens: int = field(init=False, repr=False, compare=False)

    def __init__(self, spans: Iterable[Span]) -> None:
        normalized: list[Span] = []
        for span in spans:
            if not isinstance(span, (TextSpan, MediaSpan)):
                raise TypeError(f"A layout holds TextSpan and MediaSpan, not {type(span).__name__}")
            if isinstance(span, TextSpan):
                if len(span) == 0:
                    continue
                previous = normalized[-1] if normalized else None
                if isinstance(previous, TextSpan):
                    normalized.pop()
                    span = TextSpan(previous.token_ids + span.token_ids)
            normalized.append(span)
        offsets: list[int] = []
        total = 0
        for span in normalized:
            offsets.append(total)
            total += len(span)
        object.__setattr__(self, "spans", tuple(normalized))
        object.__setattr__(self, "offsets", tuple(offsets))
        object.__setattr__(self, "num_tokens", total)

    # -- construction ------------------------------------------------------------------------------

    @classmethod
    def from_token_ids(
        cls,
        token_ids: Sequence[int],
        placeholder_ids: Mapping[str, int],
        *,
        item_lengths: Mapping[str, Sequence[int]] | None = None,
    ) -> TokenLayout:
        """Split an expanded prompt at its placeholder runs (``modality -> placeholder id``).

        Without ``item_lengths`` each maximal run of a placeholder is one item. With it (the token
        count of each item of a modality, in order, e.g. from the grids) a run is cut into whole
        items, so items with nothing between them stay apart; ``ValueError`` when the runs and the
        counts disagree.
        """
        modality_of = {int(token): modality for modality, token in placeholder_ids.items()}
        if len(modality_of) != len(placeholder_ids):
            raise ValueError(f"Two modalities share a placeholder id: {dict(placeholder_ids)}")
        pending = {m: list(lengths) for m, lengths in (item_lengths or {}).items()}
        ids = [int(token) for token in token_ids]
        spans: list[Span] = []
        text_start = position = 0
        while position < len(ids):
            modality = modality_of.get(ids[position])
            if modality is None:
                position += 1
                continue
            run_end = position
            while run_end < len(ids) and ids[run_end] == ids[position]:
                run_end += 1
            spans.append(TextSpan(tuple(ids[text_start:position])))
            for length in _cut_run(modality, run_end - position, pending, item_lengths):
                spans.append(MediaSpan.repeat(modality, ids[position], length))
            text_start = position = run_end
        spans.append(TextSpan(tuple(ids[text_start:])))
        left = {m: lengths for m, lengths in pending.items() if lengths}
        if left:
            raise ValueError(f"Items without placeholder tokens in the prompt: {left}")
        return cls(spans)

    @classmethod
    def from_placeholders(
        cls,
        token_ids: Sequence[int],
        placeholders: Mapping[str, Sequence[PlaceholderRange]],
    ) -> TokenLayout:
        """The layout a processor's output describes: its prompt ids and ``mm_placeholders``.

        A range whose tokens are one id repeated, all embeddings, becomes a repeated span; any
        other becomes an explicit sequence carrying the range's ``is_embed``. ``ValueError`` when
        ranges overlap or leave the prompt.
        """
        ids = [int(token) for token in token_ids]
        ranges = sorted(
            (
                (placeholder.offset, modality, placeholder)
                for modality, modality_ranges in placeholders.items()
                for placeholder in modality_ranges
            ),
            key=lambda entry: entry[0],
        )
        spans: list[Span] = []
        cursor = 0
        for offset, modality, placeholder in ranges:
            end = offset + placeholder.length
            if offset < cursor or end > len(ids) or placeholder.length < 1:
                raise ValueError(
                    f"{modality} placeholder (offset={offset}, length={placeholder.length}) "
                    f"overlaps another or leaves the {len(ids)}-token prompt"
                )
            spans.append(TextSpan(tuple(ids[cursor:offset])))
            spans.append(_span_of(modality, ids[offset:end], placeholder.is_embed))
            cursor = end
        spans.append(TextSpan(tuple(ids[cursor:])))
        return cls(spans)

    # -- what derives from the layout ---------------------------------------------------------------

    def __len__(self) -> int:
        return self.num_tokens

    def iter_spans(self) -> Iterator[tuple[int, Span]]:
        """``(offset, span)`` for every span, in prompt order."""
        return zip(self.offsets, self.spans, strict=True)

    def media_spans(self, modality: str | None = None) -> list[tuple[int, MediaSpan]]:
        """``(offset, span)`` of every item (of ``modality`` only, when given), in prompt order."""
        return [
            (offset, span)
            for offset, span in self.iter_spans()
            if isinstance(span, MediaSpan) and modality in (None, span.modality)
        ]

    def token_ids(self) -> list[int]:
        """The expanded prompt."""
        out: list[int] = []
        for span in self.spans:
            out.extend(span.token_ids if isinstance(span, TextSpan) else span.ids())
        return out

    def placeholders(self) -> dict[str, list[PlaceholderRange]]:
        """Each modality's items as vLLM's ``mm_placeholders`` holds them, in prompt order."""
        out: dict[str, list[PlaceholderRange]] = {}
        for offset, span in self.media_spans():
            out.setdefault(span.modality, []).append(
                PlaceholderRange(offset=offset, length=span.length, is_embed=span.is_embed())
            )
        return out

    def mm_token_type_ids(self, type_ids: Mapping[str, int]) -> list[int]:
        """Per token: 0 for text, ``type_ids[modality]`` inside an item (HF's
        ``mm_token_type_ids``, e.g. ``{"image": 1, "video": 2}`` for the Qwen2-VL family)."""
        out: list[int] = []
        for span in self.spans:
            kind = 0 if isinstance(span, TextSpan) else type_ids[span.modality]
            out.extend([kind] * len(span))
        return out

    def positions(self) -> torch.Tensor:
        """1-D positions, one per token (``int64``): what models without M-RoPE take."""
        return torch.arange(self.num_tokens, dtype=torch.int64)


def _cut_run(
    modality: str,
    run_length: int,
    pending: dict[str, list[int]],
    item_lengths: Mapping[str, Sequence[int]] | None,
) -> list[int]:
    """The item lengths one placeholder run holds: the whole run, or whole items from
    ``pending`` (consumed) when the caller gave per-item lengths."""
    if item_lengths is None:
        return [run_length]
    queue = pending.get(modality, [])
    cut: list[int] = []
    covered = 0
    while covered < run_length and queue:
        cut.append(queue.pop(0))
        covered += cut[-1]
    if covered != run_length:
        raise ValueError(
            f"A run of {run_length} {modality} placeholder tokens is not a whole number of the "
            f"items' lengths (items so far: {cut}, lengths left: {queue})"
        )
    return cut


def _span_of(modality: str, ids: list[int], is_embed: torch.Tensor | None) -> MediaSpan:
    if is_embed is None and all(token == ids[0] for token in ids):
        return MediaSpan.repeat(modality, ids[0], len(ids))
    mask = None if is_embed is None else [bool(flag) for flag in is_embed.tolist()]
    return MediaSpan.sequence(modality, ids, embed_mask=mask)


__all__ = ["MediaSpan", "Span", "TextSpan", "TokenLayout"]
