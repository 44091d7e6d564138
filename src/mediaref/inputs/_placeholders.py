"""Where an item's placeholder tokens sit in the prompt, and which of them take embeddings."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from mediaref.inputs._nested import nested_tensors_equal


@dataclass(frozen=True)
class PlaceholderRange:
    """The ``length`` prompt tokens from ``offset`` that stand for one item.

    ``is_embed`` is a boolean mask over those tokens: ``True`` where the item's embeddings go,
    ``False`` for structural tokens (``<|vision_start|>``...); ``None`` means every token takes an
    embedding. For example ``PlaceholderRange(offset=0, length=4)`` and
    ``PlaceholderRange(offset=5, length=4)`` place two images in ``AAAA BBBB describe them``.
    """

    offset: int
    length: int
    is_embed: torch.Tensor | None = None

    @cached_property
    def embeds_cumsum(self) -> list[int] | None:
        """Running count of embedding positions (``None`` without a mask).

        A Python list, computed once: the scheduler indexes it per step, and indexing a list
        avoids a tensor round trip each time.
        """
        if self.is_embed is None:
            return None
        return [int(count) for count in self.is_embed.cumsum(dim=0).tolist()]

    def get_num_embeds(self) -> int:
        """How many of the tokens take an embedding."""
        counts = self.embeds_cumsum
        if counts is None:
            return self.length
        return counts[-1] if counts else 0

    def get_embeds_indices_in_range(self, start_idx: int, end_idx: int) -> tuple[int, int]:
        """The half-open range of the item's embeddings that the tokens
        ``[start_idx, end_idx)`` of this placeholder receive.

        With ``is_embed = [F, T, F, T, T]``, tokens ``[3, 5)`` receive embeddings ``(1, 3)``.
        """
        counts = self.embeds_cumsum
        if counts is None:
            return start_idx, end_idx

        def embeds_before(token: int) -> int:
            return counts[token - 1] if token > 0 else 0

        return embeds_before(start_idx), embeds_before(end_idx)

    def extract_embeds_range(self) -> list[tuple[int, int]]:
        """The runs of embedding tokens, as inclusive ``(first, last)`` prompt positions.

        ``PlaceholderRange(offset=2, length=5, is_embed=[F, T, F, T, T])`` gives
        ``[(3, 3), (5, 6)]``; without a mask, the whole range ``[(offset, offset + length - 1)]``.
        """
        if self.is_embed is None:
            return [(self.offset, self.offset + self.length - 1)]
        runs: list[tuple[int, int]] = []
        run_start: int | None = None
        for position, flag in enumerate(self.is_embed.tolist()):
            if flag and run_start is None:
                run_start = position
            elif not flag and run_start is not None:
                runs.append((self.offset + run_start, self.offset + position - 1))
                run_start = None
        if run_start is not None:
            runs.append((self.offset + run_start, self.offset + len(self.is_embed) - 1))
        return runs

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return False
        if (self.offset, self.length) != (other.offset, other.length):
            return False
        if self.is_embed is None or other.is_embed is None:
            return self.is_embed is None and other.is_embed is None
        return nested_tensors_equal(self.is_embed, other.is_embed)

    # Frozen with a custom __eq__: hash by position only, consistent with equality (equal ranges
    # have equal offsets and lengths), and never by the mask tensor's identity.
    def __hash__(self) -> int:
        return hash((self.offset, self.length))


__all__ = ["PlaceholderRange"]
