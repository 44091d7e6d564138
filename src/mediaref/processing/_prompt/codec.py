"""Converting prompt pieces between text and token ids with whatever tokenizer the model uses.

Prompt updates name their targets and contents as text or as token ids; matching needs both sides
in one representation. The same short strings (``"<image>"``, a model's placeholder run) are
converted again for every item of every request, so their encodings are cached per tokenizer. The
cache is keyed weakly on the tokenizer, so it never keeps a tokenizer alive, and bounded by the
total length of what it holds, so a long placeholder run cannot make it grow without limit.
Whole prompts are converted uncached: they are seldom repeated and would only evict the pieces.
"""

from __future__ import annotations

import operator
import threading
import weakref
from collections.abc import Hashable, Sequence
from typing import Any, Protocol

from cachetools import LRUCache

from mediaref.processing._fast_encode import encode_text

PromptSeq = str | Sequence[int]
"""Text, or a sequence of token ids."""

_CACHE_BUDGET_ELEMENTS = 1 << 20
"""Characters plus token ids held per tokenizer: a few MiB, far more than any model's pieces."""


class TokenizerLike(Protocol):
    """What prompt updates need from a tokenizer; Hugging Face tokenizers satisfy it."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, token_ids: list[int]) -> str: ...


class TokenIds(tuple):  # type: ignore[type-arg]
    """A tuple of token ids already checked by :func:`as_token_ids`, so it is never checked again.

    A cached item's placeholder run (thousands of ids for a large image) passes through several
    stages on every request; re-checking it at each one was most of a cache hit's cost.

    It also compares equal to a list of the same ids: vLLM holds these sequences as lists
    (``PromptUpdateDetails.full == [1, 2]`` holds there), while a cached update must stay
    hashable here, so the tuple answers the comparisons a caller written for lists makes.
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return len(self) == len(other) and tuple.__eq__(self, tuple(other))
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__


def as_token_ids(seq: Sequence[int]) -> tuple[int, ...]:
    """Token ids as a tuple of plain ints, so they hash and compare the same whatever their source.

    ``operator.index`` rejects floats and strings instead of silently truncating them.
    """
    if type(seq) is TokenIds:
        return seq
    # map() runs the check in C.
    return TokenIds(map(operator.index, seq))


def _element_count(value: str | tuple[int, ...]) -> int:
    return len(value) + 1  # +1: an empty piece still occupies a cache slot


class _PieceCache:
    """One tokenizer's encodings and decodings of short pieces."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.encoded: LRUCache[str, tuple[int, ...]] = LRUCache(
            _CACHE_BUDGET_ELEMENTS, getsizeof=_element_count
        )
        self.decoded: LRUCache[tuple[int, ...], str] = LRUCache(
            _CACHE_BUDGET_ELEMENTS, getsizeof=_element_count
        )


_caches: weakref.WeakKeyDictionary[object, _PieceCache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def _cache_for(tokenizer: object) -> _PieceCache:
    with _caches_lock:
        try:
            cache = _caches.get(tokenizer)
            if cache is None:
                cache = _caches[tokenizer] = _PieceCache()
            return cache
        except TypeError:
            # Unhashable or not weak-referenceable: cache for this codec's lifetime only.
            return _PieceCache()


class PromptCodec:
    """Encodes and decodes prompt pieces with one tokenizer (``None`` when all are token ids)."""

    def __init__(self, tokenizer: TokenizerLike | None) -> None:
        self.tokenizer = tokenizer
        self._cache = _cache_for(tokenizer) if tokenizer is not None else None

    def _require_tokenizer(self, action: str) -> TokenizerLike:
        if self.tokenizer is None:
            raise ValueError(f"cannot {action} without a tokenizer; pass one, or use token ids")
        return self.tokenizer

    def token_ids(self, seq: PromptSeq) -> tuple[int, ...]:
        """``seq`` as token ids: text is encoded without special tokens, cached."""
        if not isinstance(seq, str):
            return as_token_ids(seq)
        tokenizer = self._require_tokenizer(f"encode {seq[:32]!r}")
        assert self._cache is not None
        with self._cache.lock:
            cached = self._cache.encoded.get(seq)
        if cached is not None:
            return cached
        encoded = as_token_ids(encode_text(tokenizer, seq, add_special_tokens=False))
        self._store(self._cache.encoded, seq, encoded)
        return encoded

    def text(self, seq: PromptSeq) -> str:
        """``seq`` as text: token ids are decoded (special tokens kept), cached."""
        if isinstance(seq, str):
            return seq
        token_ids = as_token_ids(seq)
        tokenizer = self._require_tokenizer("decode token ids")
        assert self._cache is not None
        with self._cache.lock:
            cached = self._cache.decoded.get(token_ids)
        if cached is not None:
            return cached
        decoded = tokenizer.decode(list(token_ids))
        self._store(self._cache.decoded, token_ids, decoded)
        return decoded

    def _store(
        self, cache: LRUCache[Any, Any], key: Hashable, value: str | tuple[int, ...]
    ) -> None:
        assert self._cache is not None
        if _element_count(value) > cache.maxsize:
            return  # larger than the whole budget: cachetools would refuse it
        with self._cache.lock:
            cache[key] = value

    def encode_prompt(self, text: str) -> list[int]:
        """A whole prompt's token ids (uncached: prompts rarely repeat)."""
        tokenizer = self._require_tokenizer("re-encode the prompt")
        return list(as_token_ids(encode_text(tokenizer, text, add_special_tokens=False)))

    def decode_prompt(self, token_ids: Sequence[int]) -> str:
        """A whole prompt's text (uncached)."""
        tokenizer = self._require_tokenizer("decode the prompt for the text fallback")
        return tokenizer.decode(list(token_ids))
