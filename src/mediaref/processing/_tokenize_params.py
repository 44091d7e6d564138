"""How a prompt is tokenized and bounded: vLLM's ``TokenizeParams``.

The processing info supplies the model's defaults (:meth:`BaseProcessingInfo.get_default_tok_params`)
and the renderer applies them: before tokenization the text is lower-cased if asked and refused
when it could not fit the context at all; after it, the token ids are truncated to
``truncate_prompt_tokens`` (from ``truncation_side``) and refused when they exceed the context.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from mediaref.exceptions import VLLMValidationError

# For a tokenizer with no vocabulary to measure: a token never spans more characters than this in
# practice; the pre-check only refuses text that cannot possibly fit.
_DEFAULT_MAX_CHARS_PER_TOKEN = 32

# A prefix cut inside a word may encode that word's start as more tokens than the whole text
# does; a prefix is only taken to exceed the context by more than this.
_PREFIX_CUT_SLACK_TOKENS = 8
# The first piece holds this many characters per allowed token: few texts encode to more than
# a token a character, so it rarely overshoots; the next pieces follow the rate it shows.
_FIRST_PIECE_CHARS_PER_TOKEN = 1
# The smallest later piece: a text denser than its start estimated still ends in a few pieces.
_MIN_PIECE_CHARS = 4096

_measured_chars_per_token: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def _max_chars_per_token(tokenizer: Any) -> int:
    """The longest token's length in characters: the tokenizer's own figure (vLLM's cached
    tokenizers carry one), else measured once over its vocabulary, as vLLM measures it."""
    value = getattr(tokenizer, "max_chars_per_token", None)
    if isinstance(value, int) and value > 0:
        return value
    try:
        return _measured_chars_per_token[tokenizer]
    except (KeyError, TypeError):
        pass
    get_vocab = getattr(tokenizer, "get_vocab", None)
    vocab = get_vocab() if callable(get_vocab) else None
    measured = max(map(len, vocab), default=0) if vocab else 0
    measured = measured if measured > 0 else _DEFAULT_MAX_CHARS_PER_TOKEN
    try:
        _measured_chars_per_token[tokenizer] = measured
    except TypeError:  # not weakly referenceable: measured again next time
        pass
    return measured


def _count_tokens(tokenizer: Any, text: str) -> int:
    """How many tokens ``text`` encodes to (no special tokens).

    A fast tokenizer's Rust backend counts them through ``encode_batch``, which lets go of the
    GIL while it works and builds no Python list of ids (its single-text ``encode`` holds the GIL
    throughout: 64 ms for 131 KB of text, every other thread stalled).
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "encode_batch"):
        return len(backend.encode_batch([text], add_special_tokens=False)[0])
    return len(tokenizer.encode(text, add_special_tokens=False))


@dataclass(frozen=True)
class TokenizeParams:
    """How to tokenize a prompt and which lengths it may have."""

    max_total_tokens: int | None
    """Input plus output tokens allowed: usually the model's context length."""

    max_output_tokens: int | None = 0
    truncate_prompt_tokens: int | None = None
    """Keep this many prompt tokens (-1: as many as fit); None: no truncation."""

    truncation_side: Literal["left", "right"] | None = None
    do_lower_case: bool = False
    add_special_tokens: bool = True
    return_token_offsets: bool = False
    needs_detokenization: bool = False

    def __post_init__(self) -> None:
        if self.truncation_side not in (None, "left", "right"):
            raise VLLMValidationError(
                "`truncation_side` must be either 'left' or 'right'.",
                parameter="truncation_side",
                value=self.truncation_side,
            )
        total, output = self.max_total_tokens, self.max_output_tokens
        if total is not None and output is not None and output > total:
            raise VLLMValidationError(
                f"max_output_tokens={output} cannot be greater than max_total_tokens={total}.",
                parameter="max_output_tokens",
                value=output,
            )
        keep = self.truncate_prompt_tokens
        if total is not None and keep is not None and keep > total:
            raise VLLMValidationError(
                f"truncate_prompt_tokens={keep} cannot be greater than max_total_tokens={total}.",
                parameter="truncate_prompt_tokens",
                value=keep,
            )

    @property
    def max_input_tokens(self) -> int | None:
        return self.max_total_tokens

    @property
    def max_truncation_tokens(self) -> int | None:
        """What ``truncate_prompt_tokens=-1`` keeps: the context, less one token for output
        unless the request generates nothing."""
        if self.max_input_tokens is None:
            return None
        if self.max_output_tokens == 0:
            return self.max_input_tokens
        return max(0, self.max_input_tokens - 1)

    def _keep(self) -> int | None:
        keep = self.truncate_prompt_tokens
        if keep is not None and keep < 0:
            return self.max_truncation_tokens
        return keep

    def get_encode_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``tokenizer.encode``: special tokens, and a bound that keeps an
        over-long prompt from being tokenized in full (it is refused afterwards anyway)."""
        if self.truncation_side is not None and self.truncate_prompt_tokens is not None:
            # The side is applied after encoding; the tokenizer's own side may differ.
            return {"truncation": False, "add_special_tokens": self.add_special_tokens}
        max_length = self._keep()
        if max_length is None and self.max_input_tokens is not None:
            max_length = self.max_input_tokens + 1
        return {
            "truncation": max_length is not None,
            "max_length": max_length,
            "add_special_tokens": self.add_special_tokens,
        }

    def max_input_chars(self, tokenizer: Any) -> int | None:
        """The most characters a prompt may have: the context times the longest token."""
        limit = self.max_input_tokens
        if limit is None or tokenizer is None:
            return None
        return limit * _max_chars_per_token(tokenizer)

    def check_text_chars(self, tokenizer: Any, num_chars: int) -> None:
        """Refuse ``num_chars`` characters of text that no tokenization could fit in the
        context (unless a truncation is asked for: the text is cut instead)."""
        max_chars = self.max_input_chars(tokenizer)
        if max_chars is None or num_chars <= max_chars or self.truncate_prompt_tokens is not None:
            return
        raise VLLMValidationError(
            f"This model's maximum context length is {self.max_total_tokens} tokens; "
            f"the prompt has {num_chars} characters, more than {max_chars} "
            f"could encode to. Please reduce the length of the input prompt.",
            parameter="input_text",
            value=num_chars,
        )

    def apply_pre_tokenization(self, tokenizer: Any, prompt: dict[str, Any]) -> dict[str, Any]:
        """Lower-case the text if asked; refuse (or, with a truncation side, cut) text longer
        than the context could hold at any tokenization."""
        text = str(prompt["prompt"])
        max_chars = self.max_input_chars(tokenizer)
        if max_chars is not None and len(text) > max_chars:
            self.check_text_chars(tokenizer, len(text))
            if self.truncation_side == "left":
                text = text[-max_chars:]
            elif self.truncation_side == "right":
                text = text[:max_chars]
        if self.do_lower_case:
            text = text.lower()
        prompt["prompt"] = text
        return prompt

    def check_text_tokens(self, tokenizer: Any, text: str) -> None:
        """Refuse ``text`` as soon as its first characters encode to more tokens than the
        context holds, encoding little more of it than that takes (mediaref's; vLLM encodes it
        whole).

        The text is encoded piece by piece: first one character per allowed token, then,
        while the count stays within the context, a piece sized by the characters per token seen
        so far for the tokens still missing (a tenth more). Each cut between pieces may split a
        token, so every cut is allowed a slack of tokens before a count refuses. An over-long text
        is thus refused after encoding about a context's worth of characters once (the character
        bound of :meth:`apply_pre_tokenization` allows up to the longest token's length per
        token). A text that fits is encoded whole once more later; short ones are not looked at.
        Does nothing when a truncation is asked for (the text is cut, not refused).
        """
        limit = self.max_input_tokens
        if limit is None or tokenizer is None or self.truncate_prompt_tokens is not None:
            return
        if len(text) <= limit:
            return  # encoding it costs no more than the check would
        start, end = 0, min(len(text), (limit + 1) * _FIRST_PIECE_CHARS_PER_TOKEN)
        counted = cuts = 0
        while True:
            counted += _count_tokens(tokenizer, text[start:end])
            if end < len(text):
                cuts += 1  # the cut after this piece
            excess = counted - cuts * _PREFIX_CUT_SLACK_TOKENS
            if excess > limit:
                raise VLLMValidationError(
                    f"This model's maximum context length is {self.max_total_tokens} tokens. "
                    f"However, your prompt contains at least {excess} input tokens, which "
                    "exceeds this limit even without any output tokens. Please reduce the "
                    "length of the input prompt.",
                    parameter="input_tokens",
                    value=excess,
                )
            if end >= len(text):
                return  # fits as far as pieces tell: the encode that follows decides exactly
            missing = limit - excess + 1 + _PREFIX_CUT_SLACK_TOKENS  # the next cut's slack too
            chars_per_token = end / max(counted, 1)
            piece = max(int(missing * chars_per_token * 1.1) + 1, _MIN_PIECE_CHARS)
            start, end = end, min(len(text), end + piece)

    def truncation_slice(self, num_tokens: int, tokenizer: Any = None) -> slice | None:
        """The slice of ``num_tokens`` tokens to keep (None: all of them)."""
        keep = self._keep()
        if keep is None or keep >= num_tokens:
            return None
        side = self.truncation_side or getattr(tokenizer, "truncation_side", "right")
        if side == "left":
            return slice(num_tokens - keep, num_tokens)
        return slice(0, keep)

    def apply_post_tokenization(self, tokenizer: Any, prompt: dict[str, Any]) -> dict[str, Any]:
        """Truncate the token ids as asked, then refuse a prompt the context cannot hold."""
        token_ids: Sequence[int] | None = prompt.get("prompt_token_ids")
        if token_ids is None:
            return prompt
        cut = self.truncation_slice(len(token_ids), tokenizer)
        if cut is not None:
            token_ids = list(token_ids)[cut]
            prompt["prompt_token_ids"] = token_ids
        limit = self.max_input_tokens
        if limit is not None and len(token_ids) > limit:
            raise VLLMValidationError(
                f"This model's maximum context length is {self.max_total_tokens} tokens. "
                f"However, your request has {len(token_ids)} input tokens. "
                "Please reduce the length of the input prompt.",
                parameter="input_tokens",
                value=len(token_ids),
            )
        return prompt


__all__ = ["TokenizeParams"]
