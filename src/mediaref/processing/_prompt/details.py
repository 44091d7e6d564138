"""What an update looks for (:class:`PromptIndex`) and puts in (:class:`PromptUpdateDetails`).

Both are plain values. A resolved update is cached next to its item and may cross a process
boundary, so it must pickle and hash: the position resolvers and ``is_embed`` selectors built
here are small frozen callables rather than lambdas. A hand-written callable still works (vLLM's
``is_embed=lambda full: ...``), but an update holding one pickles only if that callable does.

``is_embed`` follows vLLM: it receives the content's token ids and returns a bool mask over them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import torch

from mediaref.processing._prompt.codec import PromptCodec, PromptSeq, TokenizerLike, as_token_ids

_S = TypeVar("_S", str, Sequence[int])

IsEmbedFn = Callable[[list[int]], torch.Tensor]
"""``full content token ids -> bool mask`` of the tokens that receive embeddings (vLLM's form)."""


class GetMatchIndex(Protocol):
    """``(prompt token ids, start_idx) -> index`` (None: the position is not in this prompt)."""

    def __call__(self, prompt: Sequence[int], start_idx: int = 0) -> int | None: ...


class GetTextMatchIndex(Protocol):
    """``(tokenizer, prompt text, start_idx) -> character index`` (the text fallback's form)."""

    def __call__(
        self, tokenizer: TokenizerLike | None, prompt: str, start_idx: int = 0
    ) -> int | None: ...


def _normalized(seq: PromptSeq) -> str | tuple[int, ...]:
    return seq if isinstance(seq, str) else as_token_ids(seq)


@dataclass(frozen=True)
class PromptIndex:
    """A position in the prompt, not a sequence to find there; see :class:`PromptIndexTargets`.

    ``get_match_index`` resolves it in token ids, ``get_text_match_index`` in the decoded text
    (used only when the updates fall back to text).
    """

    get_match_index: GetMatchIndex
    get_text_match_index: GetTextMatchIndex

    def resolve_in(self, codec: PromptCodec, prompt: PromptSeq, start_idx: int = 0) -> int | None:
        """The index in ``prompt`` (ids or text), with a codec whose piece cache a prefix shares."""
        if isinstance(prompt, str):
            return self.get_text_match_index(codec.tokenizer, prompt, start_idx)
        matcher = self.get_match_index
        if isinstance(matcher, _PrefixMatch):
            return matcher.in_codec(codec, prompt, start_idx)
        return matcher(prompt, start_idx)


@dataclass(frozen=True)
class _StartMatch:
    """Before the first token or character, whatever the prompt (an empty one included)."""

    def __call__(self, prompt: Sequence[int], start_idx: int = 0) -> int | None:
        return 0


@dataclass(frozen=True)
class _StartTextMatch:
    def __call__(self, tokenizer: TokenizerLike | None, prompt: str, start_idx: int = 0) -> int:
        return 0


@dataclass(frozen=True)
class _EndMatch:
    """After the last token: the prompt's length."""

    def __call__(self, prompt: Sequence[int], start_idx: int = 0) -> int | None:
        return len(prompt)


@dataclass(frozen=True)
class _EndTextMatch:
    def __call__(self, tokenizer: TokenizerLike | None, prompt: str, start_idx: int = 0) -> int:
        return len(prompt)


@dataclass(frozen=True)
class _PrefixMatch:
    """Right after ``prefix`` when the prompt starts with it; only a search from the start finds
    it (a later search would find the same position again)."""

    prefix: str | tuple[int, ...]

    def __call__(self, prompt: Sequence[int], start_idx: int = 0) -> int | None:
        return self.in_codec(PromptCodec(None), prompt, start_idx)

    def in_codec(self, codec: PromptCodec, prompt: Sequence[int], start_idx: int) -> int | None:
        if start_idx != 0:
            return None
        prefix_ids = codec.token_ids(self.prefix)
        if as_token_ids(prompt[: len(prefix_ids)]) != prefix_ids:
            return None
        return len(prefix_ids)


@dataclass(frozen=True)
class _PrefixTextMatch:
    prefix: str | tuple[int, ...]

    def __call__(
        self, tokenizer: TokenizerLike | None, prompt: str, start_idx: int = 0
    ) -> int | None:
        if start_idx != 0:
            return None
        prefix_text = PromptCodec(tokenizer).text(self.prefix)
        return len(prefix_text) if prompt.startswith(prefix_text) else None


class PromptIndexTargets:
    """Targets that are positions: the start, the end, or just after a prefix of the prompt."""

    @staticmethod
    def start() -> PromptIndex:
        """Before the first token; resolves even in an empty prompt."""
        return PromptIndex(_StartMatch(), _StartTextMatch())

    @staticmethod
    def prefix(seq: PromptSeq) -> PromptIndex:
        """Right after ``seq`` (token ids; text is a mediaref extension), if the prompt starts
        with it; otherwise nowhere."""
        normalized = _normalized(seq)
        return PromptIndex(_PrefixMatch(normalized), _PrefixTextMatch(normalized))

    @staticmethod
    def end() -> PromptIndex:
        """After the last token; resolves even in an empty prompt."""
        return PromptIndex(_EndMatch(), _EndTextMatch())


@dataclass(frozen=True)
class _EmbedTokenIds:
    """``is_embed`` selecting the positions that hold one of ``token_ids``."""

    token_ids: tuple[int, ...]

    def __call__(self, full: Sequence[int]) -> torch.Tensor:
        return torch.isin(
            torch.tensor(list(full), dtype=torch.long),
            torch.tensor(self.token_ids, dtype=torch.long),
        )


@dataclass(frozen=True)
class _EmbedText:
    """``is_embed`` selecting the tokens ``text`` encodes to: it needs the model's tokenizer, so
    the processor binds one (:meth:`bind`) before calling it."""

    text: str

    def bind(self, tokenizer: TokenizerLike | None) -> _EmbedTokenIds:
        return _EmbedTokenIds(PromptCodec(tokenizer).token_ids(self.text))

    def __call__(self, full: Sequence[int]) -> torch.Tensor:
        raise ValueError(
            "PromptUpdateDetails.select_text needs the tokenizer: its mask is computed by the "
            "processor (or bind a tokenizer first with is_embed.bind(tokenizer))"
        )


@dataclass(frozen=True)
class PromptUpdateDetails(Generic[_S]):
    """The content an update puts into the prompt, and which of its tokens receive embeddings.

    ``full`` is token ids (or text, a mediaref extension), held as a tuple so the value hashes;
    it still compares equal to the list it was made from. ``is_embed``, given the content's
    token ids, returns a bool mask of shape ``(len(full),)``; ``None`` means every token receives
    an embedding.
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
        """Only the positions of ``seq`` holding a token of ``embed_text`` receive embeddings
        (a mediaref extension: the processor encodes ``embed_text`` with the model's tokenizer)."""
        return PromptUpdateDetails(full=seq, is_embed=_EmbedText(embed_text))

    def embed_mask(self, codec: PromptCodec, full_ids: Sequence[int]) -> torch.Tensor | None:
        """The checked ``is_embed`` mask over ``full_ids``; ``None`` when every token embeds."""
        is_embed = self.is_embed
        if is_embed is None:
            return None
        if isinstance(is_embed, _EmbedText):
            is_embed = is_embed.bind(codec.tokenizer)
        mask = is_embed(list(full_ids))
        if not isinstance(mask, torch.Tensor) or mask.shape != (len(full_ids),):
            shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise ValueError(
                f"is_embed must return a mask of shape ({len(full_ids)},) over the content's "
                f"tokens, got {shape}"
            )
        mask = mask.to(torch.bool)
        return None if bool(mask.all()) else mask
