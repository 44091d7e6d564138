"""Resolved prompt updates as JSON data, for caches outside the process (the Redis L2 cache).

A cached item carries its resolved prompt updates (:class:`ResolvedPromptUpdate`). Inside one
process they are kept as objects; a cache another process reads gets them as data only, never
code: token ids or text for targets and contents, and the token ids an ``is_embed`` selects.
An update holding anything else (a position target, a mask function of a model's own) is
refused with :class:`~mediaref.cache.layered.UnstorableItem`, and its item is cached locally only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mediaref.cache.layered import UnstorableItem
from mediaref.processing._prompt.details import PromptUpdateDetails, _EmbedTokenIds
from mediaref.processing._prompt.updates import ResolvedPromptUpdate, UpdateMode


def _plain(seq: object) -> object:
    return list(seq) if isinstance(seq, tuple) else seq


def _tupled(value: object) -> Any:
    return value if isinstance(value, str) else tuple(value)  # type: ignore[arg-type]


class PromptUpdatesJSON:
    """The :class:`~mediaref.cache.layered.PromptUpdatesCodec` of resolved prompt updates."""

    def dumps(self, prompt_updates: Sequence[Any]) -> bytes:
        return json.dumps([self._to_data(update) for update in prompt_updates]).encode()

    def loads(self, data: bytes) -> tuple[ResolvedPromptUpdate, ...]:
        return tuple(self._from_data(entry) for entry in json.loads(data))

    @staticmethod
    def _to_data(update: object) -> dict[str, Any]:
        if not isinstance(update, ResolvedPromptUpdate):
            raise UnstorableItem(f"a prompt update of type {type(update).__name__}")
        content, is_embed = update.content, update.content.is_embed
        if not isinstance(update.target, (str, tuple)):
            raise UnstorableItem("a prompt update targets a position")
        if is_embed is not None and not isinstance(is_embed, _EmbedTokenIds):
            raise UnstorableItem("a prompt update selects its embeddings with a function")
        return {
            "modality": update.modality,
            "item_idx": update.item_idx,
            "mode": update.mode.value,
            "target": _plain(update.target),
            "full": _plain(content.full),
            "embed_ids": None if is_embed is None else list(is_embed.token_ids),
        }

    @staticmethod
    def _from_data(entry: dict[str, Any]) -> ResolvedPromptUpdate:
        full = _tupled(entry["full"])
        embed_ids = entry["embed_ids"]
        content: PromptUpdateDetails[Any] = (
            PromptUpdateDetails.from_seq(full)
            if embed_ids is None
            else PromptUpdateDetails.select_token_ids(full, embed_ids)
        )
        return ResolvedPromptUpdate(
            modality=str(entry["modality"]),
            item_idx=int(entry["item_idx"]),
            mode=UpdateMode(entry["mode"]),
            target=_tupled(entry["target"]),
            content=content,
        )


PROMPT_UPDATES_JSON = PromptUpdatesJSON()
"""The codec a :class:`~mediaref.cache.layered.LayeredProcessorCache` is built with."""

__all__ = ["PROMPT_UPDATES_JSON", "PromptUpdatesJSON"]
