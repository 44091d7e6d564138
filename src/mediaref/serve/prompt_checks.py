"""What the server checks of a prompt before the model's worker sees it, and of what it returns.

**Length, cheapest bound first.** A prompt longer than the context is refused (400, vLLM's
"maximum context length" message) before the work that length would cost:

1. the conversation's text, counted in characters as it is parsed (:func:`refuse_long_text`),
   against the context times the longest token's length (vLLM's ``max_chars_per_token`` bound):
   a text that long cannot fit, whatever it encodes to; nothing is templated or tokenized;
2. after the chat template (:func:`bounded_chat_prompt`, on the server's pool, never on the event
   loop), the prompt's characters again, then its tokens: it is encoded piece by piece until
   the count is over the context (:meth:`~mediaref.processing.context.TokenizeParams.check_text_tokens`),
   so a long text costs about a context's worth of tokenization, not its own length's.

Only then does the processor (on the model's single worker) see the prompt, so an over-long text
never delays the other requests' processing. The final check, of the prompt with its media
expanded, stays where vLLM has it (the response's ``max_tokens``).

**Placeholder tokens** (:class:`PlaceholderTokens`). A model's media placeholder tokens (Qwen2-VL's
``<|image_pad|>``, Qwen2-Audio's ``<|AUDIO|>``...) stand for a media item's embeddings: an engine
places the item's embeddings at the item's placeholder range. A placeholder token anywhere else
(text that spells one, token-id prompts that carry one) would reach the engine as a run that
belongs to no item, so the server refuses it (400) rather than return token ids whose
placeholder runs disagree with the items (``docs/security.md``, *Placeholder tokens*): first in
the client's own text, before anything is templated or processed (a cheap substring scan), then
in the token ids the processor returns, against the items' placeholder ranges.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from mediaref.exceptions import VLLMValidationError
from mediaref.processing.context import TokenizeParams
from mediaref.renderers.base import BaseRenderer
from mediaref.renderers.chat_utils import apply_chat_template

_MEDIA_TOKEN_ATTRIBUTES = ("image_token", "video_token", "audio_token")


def conversation_texts(conversation: Iterable[Any]) -> list[str]:
    """The text the client wrote in a parsed conversation: string contents and text parts."""
    texts: list[str] = []
    for message in conversation:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(
                part["text"]
                for part in content
                if isinstance(part, dict) and isinstance(part.get("text"), str)
            )
    return texts


def refuse_long_text(params: TokenizeParams, tokenizer: Any, texts: Iterable[str]) -> None:
    """Refuse a conversation whose text alone is longer than the context could hold.

    Counts characters only (no template, no tokenizer): cheap enough for the event loop.
    """
    params.check_text_chars(tokenizer, sum(map(len, texts)))


def bounded_chat_prompt(
    renderer: BaseRenderer[Any],
    model: Any,
    conversation: list[Any],
    template_kwargs: Mapping[str, Any],
) -> str:
    """The templated prompt, refused if it cannot fit the context (blocking: run it on a pool)."""
    prompt = apply_chat_template(model, conversation, **template_kwargs)
    return bounded_text(renderer, renderer.default_chat_tok_params, prompt)


def bounded_text(renderer: BaseRenderer[Any], params: TokenizeParams, text: str) -> str:
    """``text``, refused if its characters or a prefix's tokens exceed the context."""
    tokenizer = renderer.tokenizer
    checked = str(params.apply_pre_tokenization(tokenizer, {"prompt": text})["prompt"])
    params.check_text_tokens(tokenizer, checked)
    return checked


class PlaceholderTokens:
    """A model's media placeholder tokens, and the checks that each stands for an item."""

    def __init__(self, renderer: BaseRenderer[Any]) -> None:
        self.by_id: dict[int, str] = {}
        processor = renderer.mm_processor
        tokenizer = renderer.tokenizer
        if processor is None or tokenizer is None:
            return
        hf_processor = processor.info.get_hf_processor()
        for attribute in _MEDIA_TOKEN_ATTRIBUTES:
            token = getattr(hf_processor, attribute, None)
            if isinstance(token, str) and token:
                token_id = tokenizer.convert_tokens_to_ids(token)
                if isinstance(token_id, int) and token_id >= 0:
                    self.by_id[token_id] = token

    def check_text(self, texts: Iterable[str], *, parameter: str) -> None:
        """Refuse client text that spells a placeholder token: the early, cheap form of
        :meth:`check` (a template writes the placeholders; a client's text never needs one)."""
        for text in texts:
            found = sorted(token for token in self.by_id.values() if token in text)
            if found:
                raise _stray(found, None, parameter)

    def check(
        self,
        token_ids: Sequence[int],
        placeholders: Mapping[str, Sequence[Any]] | None,
        *,
        parameter: str,
    ) -> None:
        """Refuse ``token_ids`` if a placeholder token lies outside every item's range."""
        if not self.by_id or not token_ids:
            return
        if isinstance(token_ids, list) and self._each_inside(token_ids, placeholders):
            return  # the common case, in list counts; the arrays below name the strays
        ids = np.asarray(token_ids, dtype=np.int64)
        stray = np.zeros(ids.shape, dtype=bool)
        for token_id in self.by_id:  # a few ids: one pass each beats np.isin's sort
            stray |= ids == token_id
        for ranges in (placeholders or {}).values():
            for item in ranges:
                stray[item.offset : item.offset + item.length] = False
        if not stray.any():
            return
        found = sorted({self.by_id[int(t)] for t in ids[stray]})
        raise _stray(found, int(stray.sum()), parameter)

    def _each_inside(
        self, token_ids: list[int], placeholders: Mapping[str, Sequence[Any]] | None
    ) -> bool:
        """Whether every placeholder token lies in an item's range, counted (False: look
        closer; also for overlapping ranges, where counts could hide a stray)."""
        spans = sorted(
            (item.offset, item.offset + item.length)
            for ranges in (placeholders or {}).values()
            for item in ranges
        )
        if any(end > start for (_, end), (start, _) in itertools.pairwise(spans)):
            return False
        for token_id in self.by_id:
            total = token_ids.count(token_id)
            if total and total != sum(token_ids[a:b].count(token_id) for a, b in spans):
                return False
        return True


def _stray(found: list[str], count: int | None, parameter: str) -> VLLMValidationError:
    how_many = f"{count} " if count is not None else ""
    return VLLMValidationError(
        f"the prompt holds {how_many}media placeholder token(s) ({', '.join(found)}) that "
        "stand for no media item: placeholder tokens may not appear in text or token-id "
        "prompts; attach the media as content parts instead",
        parameter=parameter,
    )


__all__ = [
    "PlaceholderTokens",
    "bounded_chat_prompt",
    "bounded_text",
    "conversation_texts",
    "refuse_long_text",
]
