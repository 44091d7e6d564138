"""A string-format message's text: its text parts with the model's placeholders put in.

The placeholders go in front of the text, in the order their items came, unless the text already
holds them: a client may write a model placeholder into its text to place the item itself. With
``interleave_strings`` each media part leaves its modality's generic marker (``<##IMAGE##>``)
among the texts, and the markers are replaced by the items' placeholders in order.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence

from mediaref.exceptions import VLLMValidationError

logger = logging.getLogger(__name__)


def _too_many(placeholder: str) -> VLLMValidationError:
    return VLLMValidationError(
        f"Found more '{placeholder}' placeholders in input prompt than actual multimodal data "
        "items.",
        parameter="messages",
    )


def _interleave(placeholder_storage: Mapping[str, Sequence[str]], texts: list[str]) -> str:
    pending = {marker: list(found) for marker, found in placeholder_storage.items()}
    for index, text in enumerate(texts):
        if text in pending:
            if not pending[text]:
                raise _too_many(text)
            texts[index] = pending[text].pop(0)
    return "\n".join(texts)


def get_full_multimodal_text_prompt(
    placeholder_storage: Mapping[str, Sequence[str]],
    texts: list[str],
    interleave_strings: bool,
    multimodal_content_part_separator: str = "\n",
) -> str:
    """The message text: ``texts`` joined, with every item's placeholder in it exactly once.

    ``placeholder_storage`` maps each generic marker to its items' placeholders (a parser's
    :meth:`~.content_parser.BaseMultiModalContentParser.mm_placeholder_storage`). A placeholder
    the text holds more often than there are items is a 400.
    """
    counts = Counter(p for found in placeholder_storage.values() for p in found)
    text_prompt = (
        _interleave(placeholder_storage, texts) if interleave_strings else "\n".join(texts)
    )
    missing: list[str] = []
    for placeholder, count in counts.items():
        remaining = count - text_prompt.count(placeholder)
        if remaining < 0:
            logger.error(
                "More placeholders than items in a prompt; placing them by hand needs "
                "interleave_strings off (it is %s).",
                interleave_strings,
            )
            raise _too_many(placeholder)
        missing.extend([placeholder] * remaining)
    return multimodal_content_part_separator.join(
        [*missing, text_prompt] if text_prompt else missing
    )


__all__ = ["get_full_multimodal_text_prompt"]
