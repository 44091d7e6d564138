"""How a prompt is tokenized and bounded: vLLM's ``TokenizeParams``.

The processing info supplies the model's defaults (:meth:`BaseProcessingInfo.get_default_tok_params`)
and the renderer applies them: before tokenization the text is lower-cased if asked and refused
when it could not fit the context at all; after it, the token ids are truncated to
``truncate_prompt_tokens`` (from ``truncation_side``), padded to ``pad_prompt_tokens`` and refused
when they exceed the context.

With mediaref in place of ``vllm.multimodal`` (``mediaref-vllm``), vLLM's own renderers, its
offline ``LLM`` entrypoints, its input processor and some of its model files take these defaults
from the processing info and call vLLM's API on them (:meth:`TokenizeParams.with_kwargs`,
``pad_prompt_tokens``, the ``*_param`` names its errors use): this class answers all of it as
vLLM's ``vllm.renderers.params.TokenizeParams`` does.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass
from typing import Any, Literal

from mediaref.exceptions import VLLMValidationError

logger = logging.getLogger(__name__)

_PARALLEL_TO_PROMPT_TOKENS = ("prompt_token_offsets", "prompt_is_token_ids")
"""Prompt keys holding one entry per prompt token: truncated with the tokens, as vLLM does."""

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
    pad_prompt_tokens: int | None = None
    """Pad the prompt's token ids to this many (-1: the context); None: no padding."""

    truncate_prompt_tokens: int | None = None
    """Keep this many prompt tokens (-1: as many as fit); None: no truncation."""

    truncation_side: Literal["left", "right"] | None = None
    do_lower_case: bool = False
    add_special_tokens: bool = True
    return_token_offsets: bool = False
    needs_detokenization: bool = False
    max_total_tokens_param: str = "max_total_tokens"
    """The request field errors about ``max_total_tokens`` name (vLLM's servers set theirs)."""
    max_output_tokens_param: str = "max_output_tokens"
    truncate_prompt_tokens_param: str = "truncate_prompt_tokens"

    def __post_init__(self) -> None:
        if self.truncation_side not in (None, "left", "right"):
            raise VLLMValidationError(
                "`truncation_side` must be either 'left' or 'right'.",
                parameter="truncation_side",
                value=self.truncation_side,
            )
        total, output = self.max_total_tokens, self.max_output_tokens
        total_name = self.max_total_tokens_param
        if total is not None and output is not None and output > total:
            raise VLLMValidationError(
                f"{self.max_output_tokens_param}={output} cannot be greater than "
                f"{total_name}={total}. Please request fewer output tokens.",
                parameter=self.max_output_tokens_param,
                value=output,
            )
        keep = self.truncate_prompt_tokens
        if total is not None and keep is not None and keep > total:
            raise VLLMValidationError(
                f"{self.truncate_prompt_tokens_param}={keep} cannot be greater than "
                f"{total_name} = {total}. Please request a smaller truncation size.",
                parameter=self.truncate_prompt_tokens_param,
                value=keep,
            )

    def with_kwargs(self, **tokenization_kwargs: Any) -> TokenizeParams:
        """These parameters with a tokenizer's keyword arguments applied, as vLLM's renderers and
        model files pass them (vLLM's semantics, field for field):

        - ``max_length`` bounds the prompt, and the rest of the context becomes the output
          budget; without it the output budget is kept;
        - ``padding="max_length"`` pads to ``max_length``, ``"do_not_pad"`` drops the padding;
          ``truncation=True`` (or ``"longest_first"``) truncates to ``max_length``,
          ``"do_not_truncate"`` drops the truncation; a false value changes nothing;
        - the fields' own names (``pad_prompt_tokens``, ``truncate_prompt_tokens``,
          ``truncation_side``, ``do_lower_case``, ``add_special_tokens``,
          ``needs_detokenization``) replace them;
        - anything else is logged and ignored. The result keeps no ``return_token_offsets`` and
          the default ``*_param`` names, as vLLM's does.
        """
        kwargs = dict(tokenization_kwargs)
        explicit_max_length = "max_length" in kwargs
        max_length = kwargs.pop("max_length", self.max_input_tokens)
        fields: dict[str, Any] = {
            name: kwargs.pop(name, getattr(self, name))
            for name in (
                "pad_prompt_tokens",
                "truncate_prompt_tokens",
                "truncation_side",
                "do_lower_case",
                "add_special_tokens",
                "needs_detokenization",
            )
        }
        padding = kwargs.pop("padding", None)
        if padding == "max_length":
            fields["pad_prompt_tokens"] = max_length
        elif padding == "do_not_pad":
            fields["pad_prompt_tokens"] = None
        elif padding:
            kwargs["padding"] = padding  # a strategy vLLM has no field for: reported below
        truncation = kwargs.pop("truncation", None)
        if truncation is True or truncation == "longest_first":
            fields["truncate_prompt_tokens"] = max_length
        elif truncation == "do_not_truncate":
            fields["truncate_prompt_tokens"] = None
        elif truncation:
            kwargs["truncation"] = truncation
        if kwargs:
            logger.warning(
                "The following tokenization arguments are not supported by vLLM Renderer and "
                "will be ignored: %s",
                kwargs,
            )
        total = self.max_total_tokens
        output = self.max_output_tokens
        if explicit_max_length and total is not None and max_length is not None:
            output = total - max_length
        return TokenizeParams(max_total_tokens=total, max_output_tokens=output, **fields)

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

    # vLLM's renderer calls these two private methods of its own class by name.

    def _truncation_slice(self, tokenizer: Any, length: int) -> slice | None:
        return self.truncation_slice(length, tokenizer)

    def _get_text_truncation_offset(self, tokenizer: Any, text: str) -> int:
        """Characters :meth:`apply_pre_tokenization` cut from the start of ``text`` (a left
        truncation of a text longer than the context could hold), so that token offsets into
        the cut text map back to the original."""
        if self.truncate_prompt_tokens is None or self.truncation_side != "left":
            return 0
        max_chars = self.max_input_chars(tokenizer)
        if max_chars is None or max_chars <= 0:
            return 0
        return max(len(text) - max_chars, 0)

    def _padded(self, tokenizer: Any, tokens: Any) -> Any:
        length = self.pad_prompt_tokens
        if length is not None and length < 0:
            length = self.max_input_tokens
        if length is None or length <= len(tokens):
            return tokens
        if tokenizer is None:
            raise VLLMValidationError(
                "Cannot pad tokens when `skip_tokenizer_init=True`", parameter="pad_prompt_tokens"
            )
        if not isinstance(tokens, list):
            raise VLLMValidationError(
                "Cannot pad tokens for embedding inputs", parameter="pad_prompt_tokens"
            )
        return tokens + [tokenizer.pad_token_id] * (length - len(tokens))

    def _bounded(self, tokenizer: Any, tokens: Any) -> Any:
        """Truncated, then padded (padding first would let a left truncation keep only the
        padding), then refused if the context cannot hold it."""
        cut = self.truncation_slice(len(tokens), tokenizer)
        if cut is not None:
            tokens = tokens[cut] if hasattr(tokens, "shape") else list(tokens)[cut]  # ids or embeds
        tokens = self._padded(tokenizer, tokens)
        limit = self.max_input_tokens
        if limit is not None and len(tokens) > limit:
            raise VLLMValidationError(
                f"This model's maximum context length is {self.max_total_tokens} tokens. "
                f"However, your request has {len(tokens)} input tokens. "
                "Please reduce the length of the input prompt.",
                parameter="input_tokens",
                value=len(tokens),
            )
        return tokens

    def apply_post_tokenization(self, tokenizer: Any, prompt: dict[str, Any]) -> dict[str, Any]:
        """Truncate the token ids (or embeddings) as asked, pad them, then refuse a prompt the
        context cannot hold; entries parallel to the tokens are cut with them."""
        for key in ("prompt_token_ids", "prompt_embeds"):
            if prompt.get(key) is not None:
                prompt[key] = self._bounded(tokenizer, prompt[key])
        for key in _PARALLEL_TO_PROMPT_TOKENS:
            parallel = prompt.get(key)
            if parallel is None:
                continue
            cut = self.truncation_slice(len(parallel), tokenizer)
            if cut is not None:
                prompt[key] = parallel[cut]
        return prompt


__all__ = ["TokenizeParams"]
