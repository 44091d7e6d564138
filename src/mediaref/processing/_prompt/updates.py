"""Prompt updates as a model declares them, and as they are resolved for one item.

A model declares :class:`PromptReplacement` / :class:`PromptInsertion` once per modality, with
per-item callables where the content depends on the item (its feature size, say). The processor
resolves them for each item into :class:`ResolvedPromptUpdate` values: no callables left apart
from ``is_embed``, no tokenizer, text kept as text. Because the processor cache stores those next
to the item's processed tensors, a cached item brings its own updates without re-running the
model's callables.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, NamedTuple

from mediaref.processing._prompt.codec import PromptCodec, PromptSeq, TokenizerLike, as_token_ids
from mediaref.processing._prompt.details import PromptIndex, PromptUpdateDetails
from mediaref.processing._prompt.matching import iter_disjoint_occurrences

UpdateTarget = PromptSeq | PromptIndex
"""Text or token ids to find in the prompt, or a position in it."""

PromptUpdateTarget = Callable[[int], UpdateTarget] | UpdateTarget
"""A target, or ``item_idx -> target`` when it differs between items."""

PromptUpdateInfo = PromptSeq | PromptUpdateDetails[Any]
"""Content: text or token ids (all of them embed), or details saying which of them embed."""

PromptUpdateContent = Callable[[int], PromptUpdateInfo] | PromptUpdateInfo
"""Content, or ``item_idx -> content`` when it differs between items."""


class UpdateMode(str, Enum):
    INSERT = "insert"
    REPLACE = "replace"


class PromptTargetMatch(NamedTuple):
    """Where a target was found: ``[start_idx, end_idx)``; empty for a :class:`PromptIndex`."""

    start_idx: int
    end_idx: int


@dataclass
class PromptUpdate(ABC):
    """How to update the prompt with one modality's placeholder tokens."""

    modality: str
    target: PromptUpdateTarget

    @property
    @abstractmethod
    def content(self) -> PromptUpdateContent:
        """The tokens the update puts into the prompt."""

    @property
    @abstractmethod
    def mode(self) -> UpdateMode:
        """Whether the content replaces the target or goes right after it."""

    def resolve(self, item_idx: int) -> ResolvedPromptUpdate:
        """This update for the ``item_idx``-th item of its modality, with every callable applied."""
        target = self.target(item_idx) if callable(self.target) else self.target
        content = self.content(item_idx) if callable(self.content) else self.content
        return ResolvedPromptUpdate(
            modality=self.modality,
            item_idx=item_idx,
            mode=self.mode,
            target=target,
            content=content,  # type: ignore[arg-type]  # normalized in __post_init__
        )


@dataclass
class PromptInsertion(PromptUpdate):
    """Insert content right after the target, per item, e.g. ``<image>`` features at the start::

        PromptInsertion("image", PromptIndexTargets.start(), [image_token_id] * feature_size)

    Items of the modality that resolve to the same position are inserted there in item order.
    """

    insertion: PromptUpdateContent = field(repr=False)

    @property
    def content(self) -> PromptUpdateContent:
        return self.insertion

    @property
    def mode(self) -> UpdateMode:
        return UpdateMode.INSERT


@dataclass
class PromptReplacement(PromptUpdate):
    """Replace one occurrence of the target per item, items in order of occurrence::

        PromptReplacement("image", [image_token_id], lambda i: [image_token_id] * sizes[i])

    Pass :class:`PromptUpdateDetails` as the replacement when only part of it receives embeddings
    (``<vision_start>`` and ``<vision_end>`` around the features, say).
    """

    replacement: PromptUpdateContent = field(repr=False)

    @property
    def content(self) -> PromptUpdateContent:
        return self.replacement

    @property
    def mode(self) -> UpdateMode:
        return UpdateMode.REPLACE


@dataclass(frozen=True)
class ResolvedPromptUpdate:
    """A :class:`PromptUpdate` resolved for one item: hashable, picklable, tokenizer-free.

    Token-id targets and contents are held as tuples; text stays text until a tokenizer is at
    hand, so resolving never tokenizes.
    """

    modality: str
    item_idx: int
    mode: UpdateMode
    target: UpdateTarget
    content: PromptUpdateDetails[Any] = field(repr=False)

    def __post_init__(self) -> None:
        target = self.target
        if not isinstance(target, (str, PromptIndex)):
            target = as_token_ids(target)
        # An empty target is allowed, as vLLM allows it, and matches nowhere: its item is then
        # missing from the prompt (a position is what PromptIndexTargets are for).
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "mode", UpdateMode(self.mode))
        if not isinstance(self.content, PromptUpdateDetails):
            object.__setattr__(self, "content", PromptUpdateDetails.from_seq(self.content))

    def iter_token_matches(
        self, prompt: Sequence[int], *, start_idx: int = 0
    ) -> Iterator[PromptTargetMatch]:
        """Each occurrence of the target in the token ids ``prompt`` from ``start_idx``, leftmost
        first and without overlaps; a position target yields its one empty match."""
        return self.iter_matches(prompt, None, start_idx=start_idx)

    def iter_matches(
        self, prompt: PromptSeq, tokenizer: TokenizerLike | None, *, start_idx: int = 0
    ) -> Iterator[PromptTargetMatch]:
        """As :meth:`iter_token_matches`, in token ids or text (a text target or prompt needs
        the tokenizer to convert the other side)."""
        if start_idx < 0:
            raise ValueError("start_idx must be non-negative")
        codec = PromptCodec(tokenizer)
        if isinstance(self.target, PromptIndex):
            index = self.target.resolve_in(codec, prompt, start_idx)
            if index is not None:
                yield PromptTargetMatch(index, index)
            return
        needle: PromptSeq
        if isinstance(prompt, str):
            needle = codec.text(self.target)
        else:
            needle = codec.token_ids(self.target)
        for found in iter_disjoint_occurrences(prompt, needle, start_idx):
            yield PromptTargetMatch(found, found + len(needle))

    def with_target(self, target: UpdateTarget) -> ResolvedPromptUpdate:
        return replace(self, target=target)

    def with_content(self, content: PromptUpdateInfo) -> ResolvedPromptUpdate:
        return replace(self, content=content)  # type: ignore[arg-type]  # normalized in __post_init__


def resolve_prompt_updates(
    prompt_updates: Sequence[PromptUpdate], mm_item_counts: Mapping[str, int]
) -> dict[str, list[tuple[ResolvedPromptUpdate, ...]]]:
    """Resolve each update for every item of its modality: ``modality -> [item's updates]``.

    Modalities keep the order of their first update, which is also their priority when two
    modalities' targets are found at the same place.
    """
    by_modality: dict[str, list[PromptUpdate]] = {}
    for update in prompt_updates:
        by_modality.setdefault(update.modality, []).append(update)
    return {
        modality: [
            tuple(update.resolve(item_idx) for update in updates)
            for item_idx in range(mm_item_counts.get(modality, 0))
        ]
        for modality, updates in by_modality.items()
    }
