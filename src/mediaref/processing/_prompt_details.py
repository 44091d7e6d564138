"""What an update looks for (:class:`PromptIndex`) and puts in (:class:`PromptUpdateDetails`).

Both are plain values: no tokenizer, no closures. A resolved update is cached next to its item and
may cross a process boundary, so it must pickle and hash; the ``is_embed`` selectors built here
are therefore small frozen callables rather than lambdas. A hand-written ``is_embed`` function
still works, but an update holding one pickles only if that function does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

import torch

from mediaref.processing._prompt_codec import PromptCodec, PromptSeq, TokenizerLike, as_token_ids

_S = TypeVar("_S", str, Sequence[int])

IsEmbedFn = Callable[[TokenizerLike | None, PromptSeq], torch.Tensor]
"""``(tokenizer, full content) -> bool mask`` of the content's tokens that receive embeddings."""


def _normalized(seq: PromptSeq) -> str | tuple[int, ...]:
    return seq if isinstance(seq, str) else as_token_ids(seq)


@dataclass(frozen=True)
class PromptIndex:
    """A position in the prompt, not a sequence to find there; see :class:`PromptIndexTargets`."""

    kind: Literal["start", "prefix", "end"]
    prefix: str | Sequence[int] | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("start", "prefix", "end"):
            raise ValueError(f"unknown prompt index kind {self.kind!r}")
        if (self.kind == "prefix") != (self.prefix is not None):
            raise ValueError("a prefix index needs a prefix, and only a prefix index takes one")
        if self.prefix is not None:
            object.__setattr__(self, "prefix", _normalized(self.prefix))

    def get_match_index(
        self, tokenizer: TokenizerLike | None, prompt: PromptSeq, start_idx: int = 0
    ) -> int | None:
        """The index this target resolves to in ``prompt``, or ``None`` if it does not resolve
        there or resolves before ``start_idx``."""
        return self.resolve_in(PromptCodec(tokenizer), prompt, start_idx)

    def resolve_in(self, codec: PromptCodec, prompt: PromptSeq, start_idx: int = 0) -> int | None:
        """As :meth:`get_match_index`, with a codec (whose piece cache the prefix shares)."""
        if self.kind == "start":
            index = 0
        elif self.kind == "end":
            index = len(prompt)
        else:
            assert self.prefix is not None
            if isinstance(prompt, str):
                prefix_text = codec.text(self.prefix)
                if not prompt.startswith(prefix_text):
                    return None
                index = len(prefix_text)
            else:
                prefix_ids = codec.token_ids(self.prefix)
                if as_token_ids(prompt[: len(prefix_ids)]) != prefix_ids:
                    return None
                index = len(prefix_ids)
        return index if index >= start_idx else None


class PromptIndexTargets:
    """Targets that are positions: the start, the end, or just after a prefix of the prompt."""

    @staticmethod
    def start() -> PromptIndex:
        """Before the first token; resolves even in an empty prompt."""
        return PromptIndex("start")

    @staticmethod
    def prefix(seq: PromptSeq) -> PromptIndex:
        """Right after ``seq``, if the prompt starts with it; otherwise nowhere."""
        return PromptIndex("prefix", seq)

    @staticmethod
    def end() -> PromptIndex:
        """After the last token; resolves even in an empty prompt."""
        return PromptIndex("end")


@dataclass(frozen=True)
class _EmbedTokenIds:
    """``is_embed`` selecting the positions that hold one of ``token_ids``."""

    token_ids: tuple[int, ...]

    def __call__(self, tokenizer: TokenizerLike | None, full: PromptSeq) -> torch.Tensor:
        full_ids = PromptCodec(tokenizer).token_ids(full)
        return torch.isin(
            torch.tensor(full_ids, dtype=torch.long), torch.tensor(self.token_ids, dtype=torch.long)
        )


@dataclass(frozen=True)
class _EmbedText:
    """``is_embed`` selecting the positions that hold one of the tokens ``text`` encodes to."""

    text: str

    def __call__(self, tokenizer: TokenizerLike | None, full: PromptSeq) -> torch.Tensor:
        embed_ids = PromptCodec(tokenizer).token_ids(self.text)
        return _EmbedTokenIds(embed_ids)(tokenizer, full)


@dataclass(frozen=True)
class PromptUpdateDetails(Generic[_S]):
    """The content an update puts into the prompt, and which of its tokens receive embeddings.

    ``full`` is text or token ids (kept as a tuple, so the value hashes); ``is_embed``, given the
    tokenizer and the content's token ids, returns a bool mask of shape ``(len(full_ids),)``;
    ``None`` means every token receives an embedding.
    """

    full: _S
    is_embed: IsEmbedFn | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "full", _normalized(self.full))

    @staticmethod
    def from_seq(seq: _S) -> PromptUpdateDetails[_S]:
        """All of ``seq`` receives embeddings."""
        return PromptUpdateDetails(full=seq)

    @staticmethod
    def select_token_id(seq: _S, embed_token_id: int) -> PromptUpdateDetails[_S]:
        """Only the positions of ``seq`` holding ``embed_token_id`` receive embeddings."""
        return PromptUpdateDetails(full=seq, is_embed=_EmbedTokenIds((embed_token_id,)))

    @staticmethod
    def select_token_ids(seq: _S, embed_token_ids: Sequence[int]) -> PromptUpdateDetails[_S]:
        """Only the positions of ``seq`` holding one of ``embed_token_ids`` receive embeddings."""
        return PromptUpdateDetails(full=seq, is_embed=_EmbedTokenIds(as_token_ids(embed_token_ids)))

    @staticmethod
    def select_text(seq: _S, embed_text: str) -> PromptUpdateDetails[_S]:
        """Only the positions of ``seq`` holding a token of ``embed_text`` receive embeddings."""
        return PromptUpdateDetails(full=seq, is_embed=_EmbedText(embed_text))

    def embed_mask(self, codec: PromptCodec, full_ids: Sequence[int]) -> torch.Tensor | None:
        """The checked ``is_embed`` mask over ``full_ids``; ``None`` when every token embeds."""
        if self.is_embed is None:
            return None
        mask = self.is_embed(codec.tokenizer, list(full_ids))
        if not isinstance(mask, torch.Tensor) or mask.shape != (len(full_ids),):
            shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise ValueError(
                f"is_embed must return a mask of shape ({len(full_ids)},) over the content's "
                f"tokens, got {shape}"
            )
        mask = mask.to(torch.bool)
        return None if bool(mask.all()) else mask
