"""Rendering one parsed request: what both ``mediaref serve`` and ``mediaref render`` run.

A chat request goes the way the library's own path does: the messages are parsed with every
media item fetched concurrently through a connector of its own (the server's address policy,
one download budget, one decode budget and one fetch scope per request: a deadline for all its
downloads and at most 16 connections at once; lazy :class:`~mediaref.media.base.MediaRef` s,
keyed without decoding), the chat template is applied and the prompt's length bounded on the
server's pool (:mod:`mediaref.serve.prompt_checks`: an over-long prompt never reaches the model's
worker), then the renderer processes the prompt (a processor-cache hit neither decodes nor runs
HF), and token ids carrying a placeholder token that stands for no item are refused. A
completions request tokenizes each text prompt (bounded the same way), or checks each token-id
prompt against the vocabulary. Blocking work runs on the server's
:class:`~mediaref.serve.fair_pool.FairPool` in the request's client's turn (``client``;
``mediaref render`` is one local client).

The models a server serves, their renderers and processor caches, and what requests share (the
pool, the fetch slots, the encoded-item cache, the metrics) are
:class:`~mediaref.serve._served_models.ServedModels`, the base of :class:`RenderService`; the
eager baseline (``ServeOptions.eager_media``: every item decoded at fetch, vLLM 0.33's own way)
is :mod:`mediaref.serve._eager_media`.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from mediaref.exceptions import VLLMValidationError
from mediaref.media.base import MediaRef
from mediaref.registry import TimingContext
from mediaref.renderers.base import BaseRenderer, MultiModalRequest
from mediaref.renderers.chat_utils import parse_chat_messages_async
from mediaref.serve._eager_media import decode_all
from mediaref.serve._served_models import NamesAModel, ServedModels
from mediaref.serve.features import build_features, item_info
from mediaref.serve.options import ServeOptions
from mediaref.serve.prompt_checks import (
    bounded_chat_prompt,
    bounded_text,
    conversation_texts,
    refuse_long_text,
)
from mediaref.serve.protocol import ChatRenderRequest, CompletionRenderRequest
from mediaref.serve.responses import generate_request, parse_context


@dataclass
class RenderTimings:
    """Where one request's time went, in seconds (``mediaref render`` prints these)."""

    fetch: float = 0.0
    template: float = 0.0
    process: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)
    decoded: int = 0
    """Media items this request decoded (0 on a processor-cache hit)."""
    fields: dict[str, list[dict[str, Any] | None]] = field(default_factory=dict)
    """Each item's processed fields, by modality: their dtypes and shapes (``mediaref render``
    prints them; the response itself carries them only inside its tensors)."""

    @property
    def total(self) -> float:
        return self.fetch + self.template + self.process


INLINE_TEXT_CHARS = 16 * 1024
"""A prompt of at most this much text (and no tools) is templated or tokenized on the event loop:
that takes tens of microseconds, less than handing it to a thread. Longer ones, whose bounds
may cost milliseconds, go to the pool."""

LOCAL_CLIENT = "local"
"""The client a request counts as outside the server (``mediaref render``, library callers)."""


def _media_items(mm_data: Any) -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for modality, value in (mm_data or {}).items():
        for item in value if isinstance(value, list) else [value]:
            items.append((modality, item))
    return items


class RenderService(ServedModels):
    """Renders a server's requests (chat, completions, text to tokenize) on its models.

    The models and what requests share are built by :class:`ServedModels`; a base class rather
    than a member, so that what routes and tests reach (``service.renderers``, ``service.pool``,
    ``service.fetch_slots``...) stays an attribute of the service itself."""

    def _media_io_kwargs(self, request: ChatRenderRequest) -> dict[str, dict[str, Any]]:
        # The server's EXIF-ID policy first; a trusted client's own image kwargs may override it.
        kwargs: dict[str, dict[str, Any]] = {
            "image": {"trust_exif_image_id": self.options.trust_exif_image_id}
        }
        for modality, values in (request.media_io_kwargs or {}).items():
            kwargs[modality] = {**kwargs.get(modality, {}), **dict(values)}
        return kwargs

    async def render_chat(
        self,
        request: ChatRenderRequest,
        timings: RenderTimings | None = None,
        *,
        client: str = LOCAL_CLIENT,
        check_tool_choice: bool = True,
    ) -> dict[str, Any]:
        """One ``GenerateRequest`` as JSON for a chat request; ``client`` takes its turns on
        the server's pool (:mod:`mediaref.serve.fair_pool`). ``check_tool_choice``: refuse a tool
        choice the server's tool flags do not serve, as vLLM's chat rendering does (its
        Responses rendering does not check)."""
        if check_tool_choice:
            _check_tool_choice(request.tool_choice, self.options)
        timings = timings if timings is not None else RenderTimings()
        name, renderer = self.renderer_for(request)
        if request.reused_prompt_token_ids is not None:  # disaggregated serving: not rendered
            ids = request.reused_prompt_token_ids
            renderer.validate_token_ids(ids, parameter="kv_transfer_params.prompt_token_ids")
            return generate_request(
                request,
                request_id=f"chatcmpl-{request.request_id}",
                token_ids=list(ids),
                features=None,
                max_model_len=renderer.model_config.derived_max_model_len,
                context=parse_context(request),
            )
        model = renderer.mm_processor.info if renderer.mm_processor is not None else None
        model_like: Any = model if model is not None else renderer.model_config
        start = time.perf_counter()
        with self.fetch_slots.of(client) as shared_slots:
            conversation, mm_data, mm_uuids = await parse_chat_messages_async(
                request.messages,
                model_like,
                media_io_kwargs=self._media_io_kwargs(request),
                mm_processor_kwargs=request.mm_processor_kwargs,
                connector=self.connector(shared_slots),
                chat_template=request.chat_template,
            )
        texts = conversation_texts(conversation)
        refuse_long_text(renderer.default_chat_tok_params, renderer.tokenizer, texts)
        self.placeholders[name].check_text(texts, parameter="messages")
        if self.options.eager_media and mm_data:
            mm_data = await asyncio.to_thread(decode_all, mm_data)
        timings.fetch = time.perf_counter() - start
        self.metrics.fetch_seconds.observe(timings.fetch)

        start = time.perf_counter()
        template_kwargs = {
            "chat_template": request.chat_template,
            "add_generation_prompt": request.add_generation_prompt,
            "continue_final_message": request.continue_final_message,
            "tools": request.tools,
            "chat_template_kwargs": request.chat_template_kwargs,
        }
        args = (renderer, model_like, conversation, template_kwargs)
        if sum(map(len, texts)) <= INLINE_TEXT_CHARS and not request.tools:
            prompt = bounded_chat_prompt(*args)  # tens of microseconds: cheaper than a thread
        else:
            prompt = await self.pool.run(client, bounded_chat_prompt, *args)
        timings.template = time.perf_counter() - start

        output = await self._process(
            name,
            renderer,
            MultiModalRequest(
                prompt,
                mm_data or {},
                mm_processor_kwargs=request.mm_processor_kwargs or {},
                mm_uuids=mm_uuids,
                # Routers ask for token ids, hashes and placeholders only: from the headers.
                layout_only=(
                    request.mm_payload == "none"
                    and self.options.layout_from_headers
                    and self.options.tensor_format
                    == "vllm"  # safetensors' kwargs_info needs tensors
                    and not self.options.eager_media
                ),
            ),
            timings,
            client,
        )
        self.placeholders[name].check(
            output["prompt_token_ids"], output.get("mm_placeholders"), parameter="messages"
        )
        # Encoding the tensors copies megabytes: off the event loop.
        with_tensors = request.mm_payload == "tensors"
        features = await self.pool.run(
            client,
            functools.partial(
                build_features,
                output,
                with_tensors=with_tensors,
                encoded=self.encoded,
                model=name,
                tensor_format=self.options.tensor_format,
                metadata_fields_for=_metadata_fields(renderer),
            ),
        )
        return generate_request(
            request,
            request_id=f"chatcmpl-{request.request_id}",
            token_ids=list(output["prompt_token_ids"]),
            features=features,
            max_model_len=renderer.model_config.derived_max_model_len,
            context=parse_context(request),
        )

    async def _process(
        self,
        model: str,
        renderer: BaseRenderer[Any],
        request: MultiModalRequest,
        timings: RenderTimings,
        client: str,
    ) -> Any:
        request.timing_ctx = TimingContext()
        start = time.perf_counter()
        # The model's single worker runs jobs in arrival order: the requests being processed at
        # once are few, and taken in their clients' turns, so another client's backlog is never
        # queued ahead of this one's on the worker.
        async with self.processing[model].slot(client):
            output = await renderer.process_multimodal_async(request)
        timings.process = time.perf_counter() - start
        timings.stages = dict(request.timing_ctx.stage_secs)
        self.metrics.observe_stages(timings.stages)
        for modality, item in _media_items(request.mm_data):
            if isinstance(item, MediaRef) and item.is_decoded:
                timings.decoded += 1
                self.metrics.decodes.labels(modality).inc()
            elif self.options.eager_media:
                timings.decoded += 1
                self.metrics.decodes.labels(modality).inc()
        timings.fields = {
            modality: [None if item is None else item_info(item) for item in items]
            for modality, items in (output.get("mm_kwargs") or {}).items()
        }
        hashes = [h for row in (output.get("mm_hashes") or {}).values() for h in row]
        self.metrics.observe_cached(model, hashes)
        return output

    async def tokenize_text(
        self, model: str, text: str, *, add_special_tokens: bool, client: str = LOCAL_CLIENT
    ) -> list[int]:
        """``text``'s token ids for ``model``, bounded by its context (a 400 past it) and
        refused if it spells a media placeholder token."""
        renderer = self.renderers[model]
        self.placeholders[model].check_text([text], parameter="prompt")
        if len(text) <= INLINE_TEXT_CHARS:
            return _tokenize(renderer, text, add_special_tokens)
        return await self.pool.run(client, _tokenize, renderer, text, add_special_tokens)

    async def render_completion(
        self, request: CompletionRenderRequest, *, client: str = LOCAL_CLIENT
    ) -> list[dict[str, Any]]:
        """One ``GenerateRequest`` per prompt of a completions request."""
        name, renderer = self.renderer_for(request)
        base_id = f"cmpl-{request.request_id}"
        results: list[dict[str, Any]] = []
        for index, prompt in enumerate(request.prompts):
            if isinstance(prompt, str):
                token_ids = await self.tokenize_text(
                    name, prompt, add_special_tokens=request.add_special_tokens, client=client
                )
            else:
                renderer.validate_token_ids(prompt, parameter="prompt")
                token_ids = list(prompt)
            self.placeholders[name].check(token_ids, None, parameter="prompt")
            results.append(
                generate_request(
                    request,
                    request_id=base_id if len(request.prompts) == 1 else f"{base_id}-{index}",
                    token_ids=token_ids,
                    features=None,
                    max_model_len=renderer.model_config.derived_max_model_len,
                )
            )
        return results


def _check_tool_choice(tool_choice: Any, options: ServeOptions) -> None:
    """vLLM's rule: without a tool call parser, only ``"none"`` (or no tools) renders; ``"auto"``
    also needs ``--enable-auto-tool-choice``."""
    if options.tool_call_parser or tool_choice in (None, "none"):
        return
    if tool_choice == "auto":
        if options.enable_auto_tool_choice:
            return
        raise VLLMValidationError(
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
        )
    if isinstance(tool_choice, dict):
        described = f'function "{tool_choice.get("function", {}).get("name")}"'
    else:
        described = f'"{tool_choice}"'
    raise VLLMValidationError(f"tool_choice={described} requires --tool-call-parser to be set")


def _metadata_fields(renderer: BaseRenderer[Any]) -> Callable[[str], Collection[str]]:
    """The fields that size a modality's placeholders (what vLLM puts in ``mm_metadata``)."""
    processor = renderer.mm_processor
    if processor is None:
        return lambda modality: ()
    fields: Callable[[str], Collection[str]] = (
        processor.info.data_parser.placeholder_metadata_fields
    )
    return fields


def _tokenize(renderer: BaseRenderer[Any], text: str, add_special_tokens: bool) -> list[int]:
    text = bounded_text(renderer, renderer.default_cmpl_tok_params, text)
    return list(renderer.get_tokenizer().encode(text, add_special_tokens=add_special_tokens))


__all__ = [
    "INLINE_TEXT_CHARS",
    "LOCAL_CLIENT",
    "NamesAModel",
    "RenderService",
    "RenderTimings",
]
