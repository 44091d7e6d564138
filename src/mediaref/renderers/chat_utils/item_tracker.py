"""The per-request tracker of multimodal items: limits, decoders, budgets, and the items' results.

One tracker serves one request. Adding an item checks the model's per-prompt limit and returns
the model's placeholder text for it; the item itself is a load planned by a content parser
(:mod:`.content_parser`), run when :meth:`~MultiModalItemTracker.resolve_items` is called: one by
one by :class:`MultiModalItemTracker`, all at once by :class:`AsyncMultiModalItemTracker`. Both
return ``(mm_data, mm_uuids)`` holding the connector's lazy
:class:`~mediaref.media.base.MediaRef` objects; nothing is decoded here (except the items of the
unified ``vision_chunk`` modality, which must be concrete before the renderer sees them).

Decoders are resolved through the model's processing info
(:meth:`~mediaref.processing.context.BaseProcessingInfo.get_media_io`), with the request's
``media_io_kwargs`` over the model config's. The tracker owns the request's
:class:`~mediaref.media.connector.MediaRequestDownloadBudget`,
:class:`~mediaref.media.connector.MediaRequestFetchScope` and
:class:`~mediaref.media.decode_budget.MediaDecodedBudget`; the default connector is built with
the first two, from ``VLLM_MEDIA_CONNECTOR``, on the first fetch.
"""

from __future__ import annotations

import asyncio
import functools
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Generic, TypeAlias, TypeVar, cast

from mediaref.exceptions import VLLMValidationError, release_frames
from mediaref.inputs import (
    MultiModalBatchedField,
    MultiModalDataDict,
    MultiModalFlatField,
    MultiModalSharedField,
    MultiModalUUIDDict,
    VisionChunk,
    VisionChunkImage,
    VisionChunkVideo,
)
from mediaref.media.base import MediaIO
from mediaref.media.connector import (
    MediaConnector,
    MediaRequestDownloadBudget,
    MediaRequestFetchScope,
    load_media_connector,
)
from mediaref.media.decode_budget import MediaDecodedBudget
from mediaref.processing import BaseMultiModalProcessor
from mediaref.processing.context import BaseProcessingInfo, ModelConfig
from mediaref.registry import MULTIMODAL_REGISTRY, MultiModalRegistry
from mediaref.renderers.chat_utils import _model
from mediaref.renderers.chat_utils._bounded_loads import items_at_once, run_bounded
from mediaref.renderers.chat_utils._embeds import parse_metadata_array
from mediaref.renderers.chat_utils._loads import PendingItem
from mediaref.renderers.chat_utils._resolve import resolve_tracked_items
from mediaref.renderers.chat_utils._template import ModelChatTemplate, ModelPlaceholders
from mediaref.renderers.chat_utils._vision_chunk import predecode, predecode_async
from mediaref.renderers.chat_utils.content_parser import (
    AsyncItem,
    AsyncMultiModalContentParser,
    BaseMultiModalContentParser,
    MultiModalContentParser,
)
from mediaref.renderers.chat_utils.types import ModalityStr

_T = TypeVar("_T")

_parse_metadata_array = parse_metadata_array  # vLLM's name for it, here
_ResolvedItems: TypeAlias = tuple["MultiModalDataDict | None", "MultiModalUUIDDict | None"]

_CPU_BOUND_MODALITIES = frozenset({"image_embeds", "audio_embeds", "video_embeds", "vision_chunk"})


class BaseMultiModalItemTracker(ABC, Generic[_T]):
    """Tracks one request's multimodal items, per modality, within the per-prompt limits.

    ``model_config``: the model's :class:`~mediaref.processing.context.ModelConfig`, or its
    (loaded) processing info. ``media_io_kwargs``: the request's per-modality decoder settings.
    mediaref's own keyword-only arguments: ``connector`` (default: one built per request from
    ``MEDIA_CONNECTOR_REGISTRY``), ``limit_mm_per_prompt`` (per-modality caps over the model's),
    ``chat_template`` (the request's; placeholders are read off the model's own).
    """

    def __init__(
        self,
        model_config: _model.ModelLike,
        media_io_kwargs: dict[str, dict[str, Any]] | None = None,
        *,
        connector: MediaConnector | None = None,
        limit_mm_per_prompt: Mapping[str, int] | None = None,
        chat_template: str | None = None,
    ) -> None:
        if isinstance(media_io_kwargs, MediaConnector):
            raise TypeError("the second argument is media_io_kwargs; pass connector= by keyword")
        super().__init__()
        _model.check_model_like(model_config)
        self._model = model_config
        self._model_config: ModelConfig = (
            model_config.ctx.model_config
            if isinstance(model_config, BaseProcessingInfo)
            else model_config
        )
        self._media_io_kwargs = media_io_kwargs
        self._connector = connector
        self._limit_mm_per_prompt = dict(limit_mm_per_prompt or {})
        self.chat_template = ModelChatTemplate(lambda: self._info, chat_template)
        self._items_by_modality: defaultdict[str, list[_T]] = defaultdict(list)
        # The modality ("image"/"video") each vision_chunk item came as.
        self._modality_order: defaultdict[str, list[str]] = defaultdict(list)
        # (modality, index) of every item, in request order: fetches resolve in this order.
        self._arrival: list[tuple[str, int]] = []
        self._media_ios: dict[str, MediaIO[Any]] = {}
        self.decoded_budget = MediaDecodedBudget()
        self.download_budget = MediaRequestDownloadBudget()
        self.fetch_scope = MediaRequestFetchScope()

    # -- the model -------------------------------------------------------------------------------

    @property
    def model_config(self) -> ModelConfig:
        return self._model_config

    @functools.cached_property
    def _info(self) -> BaseProcessingInfo | None:
        """The model's processing info, resolved on first need, as vLLM's tracker resolves its
        processor: building a tracker reads nothing of the model. None for a text-only model
        (no processor): it parses text and prompt embeddings, and a media item is refused when
        added (:meth:`_media_info`), as vLLM refuses it when it asks for the processor."""
        if _model.takes_no_media(self._model):
            return None
        return _model.resolve_processing_info(self._model)

    @property
    def processing_info(self) -> BaseProcessingInfo:
        return self._media_info("multimodal")

    def _media_info(self, modality: str) -> BaseProcessingInfo:
        """The processing info, for what needs the model's processor; a model without one
        takes no ``modality`` input (a client error)."""
        if self._info is None:
            raise VLLMValidationError(
                f"the model takes no {modality} input: it has no multimodal processor",
                parameter=modality,
            )
        return self._info

    @functools.cached_property
    def use_unified_vision_chunk_modality(self) -> bool:
        """Whether the model takes images and videos as one ``vision_chunk`` modality."""
        if self._info is None:
            return False
        return bool(getattr(self._info.get_hf_config(), "use_unified_vision_chunk", False))

    @functools.cached_property
    def model_cls(self) -> Any:
        """What answers ``get_placeholder_str(modality, i)`` for this model.

        The model class registered with ``MULTIMODAL_REGISTRY.register_processor`` when it has
        that classmethod (a model ported from vLLM), else :class:`ModelPlaceholders`.
        """
        registered = _model.registered_model_cls(self._media_info("multimodal"))
        if callable(getattr(registered, "get_placeholder_str", None)):
            return registered
        return ModelPlaceholders(self.chat_template)

    @property
    def mm_registry(self) -> MultiModalRegistry:
        return MULTIMODAL_REGISTRY

    @functools.cached_property
    def mm_processor(self) -> Any:
        """The model's multimodal processor, over this tracker's processing info (no reload)."""
        info = self._media_info("multimodal")
        factories = self.mm_registry.get_factories(self.model_config)
        return factories.processor(info, factories.dummy_inputs(info))

    @property
    def video_processor_name(self) -> str | None:
        """The class name of the model's HF video processor (None: it has none)."""
        return None if self._info is None else self._info.get_video_processor_name()

    # -- settings --------------------------------------------------------------------------------

    @property
    def media_io_kwargs(self) -> dict[str, dict[str, Any]] | None:
        """The request's decoder settings, else the model config's."""
        return self._media_io_kwargs or _model.config_media_io_kwargs(self.model_config)

    @property
    def allowed_local_media_path(self) -> str:
        return _model.allowed_local_media_path(self.model_config)

    @property
    def allowed_media_domains(self) -> list[str] | None:
        return _model.allowed_media_domains(self.model_config)

    @property
    def connector(self) -> MediaConnector:
        """This request's connector (built on first use, with the request's download budget and
        fetch scope)."""
        if self._connector is None:
            self._connector = load_media_connector(
                allowed_local_media_path=self.allowed_local_media_path,
                allowed_media_domains=self.allowed_media_domains,
                download_budget=self.download_budget,
                fetch_scope=self.fetch_scope,
            )
        return self._connector

    def get_media_io(self, modality: str) -> MediaIO[Any]:
        """The model's decoder for ``modality`` with this request's settings; one per modality."""
        if modality in self._media_ios:
            return self._media_ios[modality]
        kwargs = dict((self._media_io_kwargs or {}).get(modality, {}))
        try:
            media_io = self._media_info(modality).get_media_io(modality, kwargs)
        except VLLMValidationError:
            raise
        except (TypeError, ValueError) as exc:
            raise VLLMValidationError(
                f"media_io_kwargs[{modality!r}] is not valid for this model: {exc}",
                parameter="media_io_kwargs",
                value=kwargs,
            ) from exc
        self._media_ios[modality] = media_io
        return media_io

    def get_limit(self, modality: str) -> int | None:
        """The most ``modality`` items one prompt may carry (None: no limit): the model's, the
        config's ``limit_mm_per_prompt`` and this request's, whichever is smallest."""
        supported = self._supported_limits(modality)
        limits = [
            supported[modality],
            _model.configured_limit(self.model_config, modality),
            self._limit_mm_per_prompt.get(modality),
        ]
        present = [limit for limit in limits if limit is not None]
        return min(present) if present else None

    def _supported_limits(self, modality: str) -> Mapping[str, int | None]:
        info = self._media_info(modality)
        supported = info.get_supported_mm_limits()
        if modality not in supported:
            accepted = ", ".join(sorted(supported)) or "none"
            raise VLLMValidationError(
                f"the model {info.model_id!r} does not accept {modality} input "
                f"(it accepts: {accepted})"
            )
        return supported

    # -- items -----------------------------------------------------------------------------------

    def get_num_items(self, modality: ModalityStr) -> int:
        return len(self._items_by_modality.get(modality, ()))

    def add(self, modality: ModalityStr, item: _T) -> str | None:
        """Track ``item`` as one more ``modality`` item; the model's placeholder text for it.

        ``prompt_embeds`` skip the limits (no processor sees them) and have no placeholder here:
        the parser marks them itself. Over a limit, or a modality the model does not take, is a
        :class:`~mediaref.exceptions.VLLMValidationError` (HTTP 400).
        """
        if modality == "prompt_embeds":
            self._append("prompt_embeds", item)
            return None
        use_vision_chunk = modality in ("image", "video") and self.use_unified_vision_chunk_modality
        stored = "vision_chunk" if use_vision_chunk else modality
        ordinal = len(self._items_by_modality.get(stored, ())) + 1
        self._check_limit(modality, "vision_chunk" if use_vision_chunk else modality, ordinal)
        self._append(stored, item)
        if use_vision_chunk:
            self._modality_order["vision_chunk"].append(modality)
        placeholder = self.model_cls.get_placeholder_str(modality, ordinal)
        return None if placeholder is None else str(placeholder)

    def _check_limit(self, modality: str, counted: str, count: int) -> None:
        limited = counted.removesuffix("_embeds")
        self._supported_limits(limited)
        if (
            modality.endswith("_embeds")
            and _model.mm_embeds_enabled(self.model_config)
            and _model.configured_limit(self.model_config, limited) == 0
        ):
            return  # with embeddings on, a modality whose raw input is off still takes them
        self._media_info(limited).validate_num_items(limited, count)
        request_limit = self._limit_mm_per_prompt.get(limited)
        if request_limit is not None and count > request_limit:
            raise VLLMValidationError(
                f"At most {request_limit} {limited}(s) may be provided in one prompt.",
                parameter=limited,
            )

    def _append(self, modality: str, item: _T) -> None:
        items = self._items_by_modality[modality]
        self._arrival.append((modality, len(items)))
        items.append(item)

    def _request_order(self) -> list[tuple[str, int]]:
        """``(modality, index)`` of every item, in request order. Items put straight into
        ``_items_by_modality`` (vLLM's tests do) follow, in modality order."""
        order = list(self._arrival)
        if len(order) < sum(len(items) for items in self._items_by_modality.values()):
            known = set(order)
            order += [
                (modality, index)
                for modality, items in self._items_by_modality.items()
                for index in range(len(items))
                if (modality, index) not in known
            ]
        return order

    def _resolve(self, resolved: dict[str, list[tuple[object, str | None]]]) -> _ResolvedItems:
        return resolve_tracked_items(
            resolved, lambda: self.mm_processor, dict(self._modality_order)
        )

    @abstractmethod
    def create_parser(
        self, mm_processor_kwargs: dict[str, Any] | None = None
    ) -> BaseMultiModalContentParser:
        """A parser for one message's parts, adding the items it finds to this tracker."""


def _as_pair(item: object) -> tuple[object, str | None]:
    if isinstance(item, PendingItem):
        return item.resolve()
    return cast("tuple[object, str | None]", item)  # an (item, uuid) pair, as vLLM's callers add


class MultiModalItemTracker(BaseMultiModalItemTracker["tuple[object, str | None] | PendingItem"]):
    """Resolves its items on the calling thread, one after another in request order."""

    def resolve_items(self) -> _ResolvedItems:
        """``(mm_data, mm_uuids)`` per modality, fetching what is pending; ``(None, None)`` if empty."""
        if not self._items_by_modality:
            return None, None
        resolved: dict[str, list[tuple[object, str | None]]] = {
            modality: [(None, None)] * len(items)
            for modality, items in self._items_by_modality.items()
        }
        for modality, index in self._request_order():
            resolved[modality][index] = _as_pair(self._items_by_modality[modality][index])
        if "vision_chunk" in resolved:
            predecode(resolved["vision_chunk"])
        return self._resolve(resolved)

    def create_parser(
        self, mm_processor_kwargs: dict[str, Any] | None = None
    ) -> BaseMultiModalContentParser:
        return MultiModalContentParser(self, mm_processor_kwargs=mm_processor_kwargs)


class AsyncMultiModalItemTracker(BaseMultiModalItemTracker[AsyncItem]):
    """Resolves its items concurrently, at most as many at once as a request may connect
    (``MEDIAREF_MEDIA_REQUEST_MAX_CONNECTIONS``, 16; see :mod:`._bounded_loads`: the stalled
    requests of one client held hundreds of waiting coroutines, and a full collection took
    100 ms). After a failure no further item starts.
    """

    async def resolve_items(self) -> _ResolvedItems:
        """``(mm_data, mm_uuids)`` per modality; ``(None, None)`` if no item was added.

        Every started item runs to its end before a failure is raised (the first in request
        order): no download is left running unobserved behind an error that already reached
        the client.
        """
        if not self._items_by_modality:
            return None, None
        order = self._request_order()
        results = await run_bounded(
            [self._items_by_modality[modality][index] for modality, index in order],
            items_at_once(len(order)),
        )
        failures = [result for result in results if isinstance(result, BaseException)]
        if failures:
            for dropped in failures[1:]:  # only the first is answered
                release_frames(dropped)
            raise failures[0]
        resolved: dict[str, list[tuple[object, str | None]]] = {
            modality: [(None, None)] * len(items)
            for modality, items in self._items_by_modality.items()
        }
        for (modality, index), result in zip(order, results, strict=True):
            resolved[modality][index] = cast(tuple[object, str | None], result)  # no failure left
        if "vision_chunk" in resolved:
            await predecode_async(resolved["vision_chunk"])
        if resolved.keys() & _CPU_BOUND_MODALITIES:
            # Merging embeddings and cutting videos into chunks is tensor work: off the loop.
            return await asyncio.to_thread(self._resolve, resolved)
        return self._resolve(resolved)

    def create_parser(
        self, mm_processor_kwargs: dict[str, Any] | None = None
    ) -> BaseMultiModalContentParser:
        return AsyncMultiModalContentParser(self, mm_processor_kwargs=mm_processor_kwargs)


__all__ = [
    "AsyncMultiModalItemTracker",
    "BaseMultiModalItemTracker",
    "BaseMultiModalProcessor",
    "MultiModalBatchedField",
    "MultiModalFlatField",
    "MultiModalItemTracker",
    "MultiModalSharedField",
    "VisionChunk",
    "VisionChunkImage",
    "VisionChunkVideo",
]
