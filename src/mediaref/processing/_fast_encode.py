"""Encoding text with a Hugging Face fast tokenizer without its Python wrapper, when that is exact.

``tokenizer.encode(text)`` on a ``transformers`` fast tokenizer is a Rust ``encode`` wrapped in
Python that normalizes padding and truncation arguments, validates the input, re-applies the
truncation, padding and special-token settings to the Rust tokenizer, and builds a
``BatchEncoding`` to read one field back. On a processor cache hit the prompt is the only thing
tokenized, and that wrapper was about as costly as the Rust encode it wraps.

:func:`encode_text` calls the Rust tokenizer directly only when the result is the one the wrapper
would give: the tokenizer's class encodes through ``transformers``' own methods (no subclass
override), no argument other than ``add_special_tokens`` is passed, and the Rust tokenizer carries
no truncation or padding and the same special-token splitting the wrapper would set. Anything
else goes through ``tokenizer.encode`` unchanged.
"""

from __future__ import annotations

import functools
from typing import Any

# The methods ``encode`` runs through in transformers v5; a class overriding any of them may
# encode differently, so it keeps the wrapper.
_ENCODE_PATH = ("encode", "_encode_plus", "_get_padding_truncation_strategies", "tokenize")


@functools.cache
def _encodes_like_backend(tokenizer_type: type) -> bool:
    try:
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:  # another transformers layout: always use the wrapper
        return False
    if not issubclass(tokenizer_type, TokenizersBackend):
        return False
    return all(
        getattr(tokenizer_type, name, None) is getattr(TokenizersBackend, name, None)
        for name in _ENCODE_PATH
    )


def _direct_backend(tokenizer: Any) -> Any | None:
    """The Rust tokenizer when calling it directly gives exactly ``tokenizer.encode``'s ids."""
    if not _encodes_like_backend(tokenizer.__class__):
        return None
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is None or backend.truncation is not None or backend.padding is not None:
        # The wrapper would switch these off for an untruncated, unpadded encode.
        return None
    if backend.encode_special_tokens != bool(tokenizer.split_special_tokens):
        return None
    return backend


def encode_text(tokenizer: Any, text: str, **kwargs: Any) -> list[int]:
    """``tokenizer.encode(text, **kwargs)``, taking the direct route when it is the same."""
    if kwargs.keys() <= {"add_special_tokens"} and isinstance(text, str):
        backend = _direct_backend(tokenizer)
        if backend is not None:
            token_ids: list[int] = backend.encode(
                text, add_special_tokens=bool(kwargs.get("add_special_tokens", True))
            ).ids
            if len(token_ids) > tokenizer.model_max_length:
                # The wrapper's one side effect: the "sequence longer than the model" warning.
                warn = getattr(tokenizer, "_eventual_warn_about_too_long_sequence", None)
                if warn is not None:
                    warn(token_ids, None, True)
            return token_ids
    return list(tokenizer.encode(text, **kwargs))


@functools.lru_cache(maxsize=2048)
def _cached_encode(
    tokenizer: Any, text: str, truncation: bool | None, add_special_tokens: bool
) -> tuple[int, ...]:
    kwargs: dict[str, Any] = {"add_special_tokens": add_special_tokens}
    if truncation is not None:  # None is the tokenizer's own default: leave it out
        kwargs["truncation"] = truncation
    return tuple(encode_text(tokenizer, text, **kwargs))


def cached_encode(
    tokenizer: Any,
    text: str,
    *,
    truncation: bool | None = None,
    add_special_tokens: bool = True,
) -> list[int]:
    """``tokenizer.encode(text, ...)``, remembered for the last 2,048 distinct calls (vLLM's
    ``cached_encode``: dummy texts and other short repeated strings). Each call gets its own list,
    so a caller extending the result cannot corrupt the cache."""
    return list(_cached_encode(tokenizer, text, truncation, add_special_tokens))


__all__ = ["cached_encode", "encode_text"]
