"""Placing each item's update in the prompt, and finding placeholders already placed.

Both walks share one rule. A cursor moves left to right; the candidates are, for each modality,
the next item not yet placed (items of a modality are placed in order) with each of its
alternative updates; the candidate found earliest wins, ties going to the modality listed first
and then to the update listed first. Targets are looked up through :class:`OccurrenceScanner`s
shared by every item with the same needle, so a pass reads each prompt element a bounded number
of times per distinct needle instead of once per item and position.

Where an update lands (see :func:`place_updates`): a replacement consumes one occurrence at or
after the cursor and puts its content there; an insertion puts its content right after an
occurrence whose end is at or after the cursor and that no replacement has consumed, so the items
of a modality that insert after ``<s>`` all land after the same ``<s>``, in item order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mediaref.processing._prompt.codec import PromptCodec
from mediaref.processing._prompt.details import PromptIndex
from mediaref.processing._prompt.matching import OccurrenceScanner
from mediaref.processing._prompt.updates import ResolvedPromptUpdate, UpdateMode

MultiModalPromptUpdates = Mapping[str, Sequence[Sequence[ResolvedPromptUpdate]]]
"""``modality -> per item -> its resolved updates`` (usually one), items in request order."""

Prompt = list[int] | str
Needle = tuple[int, ...] | str


@dataclass(frozen=True)
class PlacedUpdate:
    """One item's content as it sits in a prompt: ``[offset, offset + length)``."""

    update: ResolvedPromptUpdate
    offset: int
    length: int
    update_idx: int = 0
    """Which of the item's alternative updates was placed."""


@dataclass
class Placement:
    """The outcome of a walk: the prompt (updated or as given) and what was placed, per modality."""

    prompt: Prompt
    placed: dict[str, list[PlacedUpdate]]

    def found_counts(self) -> dict[str, int]:
        return {modality: len(placed) for modality, placed in self.placed.items()}


@dataclass
class _Option:
    """One way to place the pending item: one of its updates and how to look its target up."""

    update_idx: int
    update: ResolvedPromptUpdate
    needle: Needle | None  # None for a PromptIndex target
    scanner: OccurrenceScanner | None


class _Walk(ABC):
    """The state shared by both walks: cursor, pending item per modality, scanners per needle."""

    def __init__(self, prompt: Prompt, mm_prompt_updates: MultiModalPromptUpdates) -> None:
        self.prompt = prompt
        self.mm_prompt_updates = mm_prompt_updates
        self.modalities = list(mm_prompt_updates)
        self.placed: dict[str, list[PlacedUpdate]] = {m: [] for m in self.modalities}
        self._scanners: dict[tuple[Needle, object], OccurrenceScanner] = {}
        self._options: dict[str, list[_Option] | None] = {}

    def scanner(self, needle: Needle, kind: object, start: int) -> OccurrenceScanner:
        # One scanner per needle *and* kind of bound: replacements and insertions ask with
        # different bounds, and a scanner only serves a bound that never decreases.
        key = (needle, kind)
        scanner = self._scanners.get(key)
        if scanner is None:
            scanner = self._scanners[key] = OccurrenceScanner(self.prompt, needle, start)
        return scanner

    def pending_options(self, modality: str) -> list[_Option] | None:
        """The options of the modality's next unplaced item, or ``None`` when all are placed."""
        if modality not in self._options:
            item_idx = len(self.placed[modality])
            items = self.mm_prompt_updates[modality]
            self._options[modality] = (
                [self.make_option(i, u) for i, u in enumerate(items[item_idx])]
                if item_idx < len(items)
                else None
            )
        return self._options[modality]

    @abstractmethod
    def make_option(self, update_idx: int, update: ResolvedPromptUpdate) -> _Option:
        """How to look up ``update`` of the item that just became pending."""

    @abstractmethod
    def match(self, option: _Option) -> tuple[int, int] | None:
        """Where the option's target is found now, as ``(start, end)``, or ``None``."""

    def candidate_key(self, found: tuple[int, int], order: int, update_idx: int) -> tuple[int, ...]:
        # The end breaks ties between a position target and a sequence starting there: the
        # empty match must go first, or the sequence's replacement would move the cursor past it.
        return (found[0], found[1], order, update_idx)

    def best_candidate(self) -> tuple[tuple[int, int], str, _Option] | None:
        """The earliest placeable (match, modality, option), or ``None`` when nothing more fits."""
        best: tuple[tuple[int, ...], tuple[int, int], str, _Option] | None = None
        for order, modality in enumerate(self.modalities):
            for option in self.pending_options(modality) or ():
                found = self.match(option)
                if found is None:
                    continue
                key = self.candidate_key(found, order, option.update_idx)
                if best is None or key < best[0]:
                    best = (key, found, modality, option)
        return None if best is None else best[1:]

    def record(self, modality: str, placed: PlacedUpdate) -> None:
        self.placed[modality].append(placed)
        del self._options[modality]  # the next item becomes pending


class _UpdateWalk(_Walk):
    def __init__(
        self, prompt: Prompt, mm_prompt_updates: MultiModalPromptUpdates, codec: PromptCodec
    ) -> None:
        super().__init__(prompt, mm_prompt_updates)
        self.codec = codec
        self.cursor = 0  # prompt[:cursor] has been emitted
        self.replaced_end = 0  # prompt[:replaced_end] may hold consumed targets
        self._indices: dict[PromptIndex, int | None] = {}

    def as_prompt_kind(self, seq: str | Sequence[int]) -> Needle:
        return self.codec.text(seq) if isinstance(self.prompt, str) else self.codec.token_ids(seq)

    def make_option(self, update_idx: int, update: ResolvedPromptUpdate) -> _Option:
        if isinstance(update.target, PromptIndex):
            return _Option(update_idx, update, None, None)
        needle = self.as_prompt_kind(update.target)
        scanner = self.scanner(needle, update.mode, self.bound(update.mode, needle))
        return _Option(update_idx, update, needle, scanner)

    def bound(self, mode: UpdateMode, needle: Needle) -> int:
        """The least start an occurrence may have to serve an update of ``mode`` now."""
        if mode is UpdateMode.REPLACE:
            return self.cursor
        return max(self.replaced_end, self.cursor - len(needle))

    def match(self, option: _Option) -> tuple[int, int] | None:
        target = option.update.target
        if isinstance(target, PromptIndex):
            if target not in self._indices:
                self._indices[target] = target.resolve_in(self.codec, self.prompt)
            index = self._indices[target]
            return (index, index) if index is not None and index >= self.cursor else None
        assert option.needle is not None and option.scanner is not None
        start = option.scanner.first_at_or_after(self.bound(option.update.mode, option.needle))
        return None if start is None else (start, start + len(option.needle))


def place_updates(
    prompt: Prompt, mm_prompt_updates: MultiModalPromptUpdates, codec: PromptCodec
) -> Placement:
    """Apply each item's update to ``prompt`` (token ids or text), as many items as will fit.

    Items whose target is not found stay unplaced; the caller compares
    :meth:`Placement.found_counts` with the item counts.
    """
    walk = _UpdateWalk(prompt, mm_prompt_updates, codec)
    pieces: list[Sequence[int] | str] = []
    out_len = 0
    while (candidate := walk.best_candidate()) is not None:
        (start, end), modality, option = candidate
        update = option.update
        content = walk.as_prompt_kind(update.content.full)
        keep_until = start if update.mode is UpdateMode.REPLACE else end
        pieces.append(prompt[walk.cursor : keep_until])
        out_len += keep_until - walk.cursor
        walk.record(modality, PlacedUpdate(update, out_len, len(content), option.update_idx))
        pieces.append(content)
        out_len += len(content)
        walk.cursor = end
        if update.mode is UpdateMode.REPLACE:
            walk.replaced_end = end
    pieces.append(prompt[walk.cursor :])
    if isinstance(prompt, str):
        updated: Prompt = "".join(pieces)  # type: ignore[arg-type]
    else:
        # extend() copies each piece in C; chaining iterators cost ~6x more for a long
        # placeholder run (thousands of ids), and this runs on every request, hits included.
        updated = []
        for piece in pieces:
            updated.extend(piece)  # type: ignore[arg-type]
    return Placement(updated, walk.placed)


class _LocateWalk(_Walk):
    def __init__(
        self, token_ids: list[int], mm_prompt_updates: MultiModalPromptUpdates, codec: PromptCodec
    ) -> None:
        super().__init__(token_ids, mm_prompt_updates)
        self.codec = codec
        self.cursor = 0

    def make_option(self, update_idx: int, update: ResolvedPromptUpdate) -> _Option:
        content_ids = self.codec.token_ids(update.content.full)
        scanner = self.scanner(content_ids, "locate", self.cursor)
        return _Option(update_idx, update, content_ids, scanner)

    def candidate_key(self, found: tuple[int, int], order: int, update_idx: int) -> tuple[int, ...]:
        # At one position the modality listed first wins, whatever the lengths of the contents.
        return (found[0], order, update_idx)

    def match(self, option: _Option) -> tuple[int, int] | None:
        assert option.needle is not None and option.scanner is not None
        start = option.scanner.first_at_or_after(self.cursor)
        return None if start is None else (start, start + len(option.needle))


def locate_placeholders(
    token_ids: list[int], mm_prompt_updates: MultiModalPromptUpdates, codec: PromptCodec
) -> Placement:
    """Find each item's content, already in ``token_ids``, in item order and without overlaps.

    An empty content cannot be located and leaves its item, and the modality's later items, unfound.
    """
    walk = _LocateWalk(token_ids, mm_prompt_updates, codec)
    while (candidate := walk.best_candidate()) is not None:
        (start, end), modality, option = candidate
        walk.record(modality, PlacedUpdate(option.update, start, end - start, option.update_idx))
        walk.cursor = end
    return Placement(token_ids, walk.placed)
