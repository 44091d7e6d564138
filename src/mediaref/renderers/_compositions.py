"""The renderer's top-level calls: completion prompts and chat conversations to engine inputs,
composed from the steps of :mod:`._prompt_rendering` (vLLM's ``render_cmpl`` / ``render_chat``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mediaref.processing.context import TokenizeParams
from mediaref.renderers._engine_inputs import DictPrompt, EngineInput
from mediaref.renderers._prompt_rendering import PromptRendering

if TYPE_CHECKING:
    from mediaref.renderers._params import ChatParams


class RenderCompositions(PromptRendering):
    """``render_cmpl`` and ``render_chat``, each with its ``_async`` twin."""

    if TYPE_CHECKING:  # supplied by the renderer

        @property
        def default_cmpl_tok_params(self) -> TokenizeParams: ...

        @property
        def default_chat_tok_params(self) -> TokenizeParams: ...

        def render_messages(
            self, messages: list[Any], params: ChatParams
        ) -> tuple[list[Any], DictPrompt]: ...

        async def render_messages_async(
            self, messages: list[Any], params: ChatParams
        ) -> tuple[list[Any], DictPrompt]: ...

    def render_cmpl(
        self,
        prompts: Sequence[DictPrompt | bytes],
        tok_params: TokenizeParams | None = None,
        *,
        prompt_extras: dict[str, Any] | None = None,
        skip_mm_cache: bool = False,
    ) -> list[EngineInput]:
        """Completion prompts to engine inputs."""
        arrival_time = time.time()
        params = tok_params or self.default_cmpl_tok_params
        tokenized = self.tokenize_prompts(self.render_prompts(prompts), params)
        self._apply_prompt_extras(tokenized, prompt_extras)
        return [
            self.process_for_engine(p, arrival_time, skip_mm_cache=skip_mm_cache, tok_params=params)
            for p in tokenized
        ]

    async def render_cmpl_async(
        self,
        prompts: Sequence[DictPrompt | bytes],
        tok_params: TokenizeParams | None = None,
        *,
        prompt_extras: dict[str, Any] | None = None,
        skip_mm_cache: bool = False,
    ) -> list[EngineInput]:
        arrival_time = time.time()
        params = tok_params or self.default_cmpl_tok_params
        tokenized = await self.tokenize_prompts_async(
            await self.render_prompts_async(prompts), params
        )
        self._apply_prompt_extras(tokenized, prompt_extras)
        return list(
            await asyncio.gather(
                *(
                    self.process_for_engine_async(
                        p, arrival_time, skip_mm_cache=skip_mm_cache, tok_params=params
                    )
                    for p in tokenized
                )
            )
        )

    def _chat_extras(
        self, chat_params: ChatParams, prompt_extras: dict[str, Any] | None
    ) -> dict[str, Any]:
        return {**(prompt_extras or {}), "media_io_kwargs": chat_params.media_io_kwargs or {}}

    def render_chat(
        self,
        conversations: Sequence[list[Any]],
        chat_params: ChatParams,
        tok_params: TokenizeParams | None = None,
        *,
        prompt_extras: dict[str, Any] | None = None,
        skip_mm_cache: bool = False,
    ) -> tuple[list[list[Any]], list[EngineInput]]:
        """Chat conversations to (their parsed conversations, engine inputs)."""
        arrival_time = time.time()
        params = tok_params or self.default_chat_tok_params
        rendered = [self.render_messages(messages, chat_params) for messages in conversations]
        tokenized = self.tokenize_prompts([prompt for _, prompt in rendered], params)
        self._apply_prompt_extras(tokenized, self._chat_extras(chat_params, prompt_extras))
        engine_inputs = [
            self.process_for_engine(p, arrival_time, skip_mm_cache=skip_mm_cache, tok_params=params)
            for p in tokenized
        ]
        return [conversation for conversation, _ in rendered], engine_inputs

    async def render_chat_async(
        self,
        conversations: Sequence[list[Any]],
        chat_params: ChatParams,
        tok_params: TokenizeParams | None = None,
        *,
        prompt_extras: dict[str, Any] | None = None,
        skip_mm_cache: bool = False,
    ) -> tuple[list[list[Any]], list[EngineInput]]:
        arrival_time = time.time()
        params = tok_params or self.default_chat_tok_params
        rendered = await asyncio.gather(
            *(self.render_messages_async(messages, chat_params) for messages in conversations)
        )
        tokenized = await self.tokenize_prompts_async([prompt for _, prompt in rendered], params)
        self._apply_prompt_extras(tokenized, self._chat_extras(chat_params, prompt_extras))
        engine_inputs = await asyncio.gather(
            *(
                self.process_for_engine_async(
                    p, arrival_time, skip_mm_cache=skip_mm_cache, tok_params=params
                )
                for p in tokenized
            )
        )
        return [conversation for conversation, _ in rendered], list(engine_inputs)


__all__ = ["RenderCompositions"]
