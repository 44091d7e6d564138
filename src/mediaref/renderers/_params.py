"""How a chat request is rendered (vLLM's ``ChatParams``) and the renderer's cache counters."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def _merged(base: Mapping[str, Any] | None, top: Mapping[str, Any] | None) -> dict[str, Any]:
    """``base`` overridden by ``top``; nested mappings merge key by key."""
    out = dict(base or {})
    for key, value in (top or {}).items():
        below = out.get(key)
        out[key] = (
            _merged(below, value)
            if isinstance(below, Mapping) and isinstance(value, Mapping)
            else value
        )
    return out


@dataclass(frozen=True)
class ChatParams:
    """How to parse chat messages and apply the chat template."""

    chat_template: str | None = None
    chat_template_content_format: str = "auto"
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    media_io_kwargs: dict[str, dict[str, Any]] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None
    tool_choice: Any | None = None
    response_format: Any | None = None

    def with_defaults(
        self,
        default_chat_template_kwargs: dict[str, Any] | None = None,
        default_media_io_kwargs: dict[str, dict[str, Any]] | None = None,
        default_mm_processor_kwargs: dict[str, Any] | None = None,
    ) -> ChatParams:
        """These params over the server's defaults (the request's values win)."""
        if not (
            default_chat_template_kwargs or default_media_io_kwargs or default_mm_processor_kwargs
        ):
            return self
        media_io = _merged(default_media_io_kwargs, self.media_io_kwargs)
        processor = _merged(default_mm_processor_kwargs, self.mm_processor_kwargs)
        return ChatParams(
            chat_template=self.chat_template,
            chat_template_content_format=self.chat_template_content_format,
            chat_template_kwargs={
                **(default_chat_template_kwargs or {}),
                **self.chat_template_kwargs,
            },
            media_io_kwargs=media_io or None,
            mm_processor_kwargs=processor or None,
            tool_choice=self.tool_choice,
            response_format=self.response_format,
        )

    def get_apply_chat_template_kwargs(self) -> dict[str, Any]:
        """The template's keyword arguments: the request's kwargs and its template."""
        return {
            **self.chat_template_kwargs,
            "chat_template": self.chat_template,
            "return_dict": False,
        }


@dataclass
class MultiModalCacheStats:
    """Processor-cache counters since the last read (vLLM's ``MultiModalCacheStats``)."""

    reset: bool = False
    """Whether the cache was cleared in the meantime."""
    requests: int = 0
    queries: int = 0
    """Multimodal items looked up."""
    hits: int = 0

    def record(self, num_queries: int, num_hits: int) -> None:
        self.requests += 1
        self.queries += num_queries
        self.hits += num_hits


__all__ = ["ChatParams", "MultiModalCacheStats"]
