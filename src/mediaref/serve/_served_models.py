"""The models one render server serves, and what their requests share.

:class:`ServedModels` is built once, when the server starts: for each model it names, a renderer
(the model's directory resolved, its dtype, its processor cache), the placeholder tokens a prompt
must not spell and the gate in front of the model's single worker; for the server, the pool that
blocking work runs on, each client's fetch slots, the encoded-item cache and the metrics that
watch the caches. It is the base of :class:`~mediaref.serve.service.RenderService`, which renders
requests with these and keeps none of its own; what a request needs of them (its model's
renderer, a connector of its own) is asked here.

**The processor cache.** vLLM's render server skips its processor cache (``skip_mm_cache``):
its cache only mirrors an engine core's. mediaref's server has no engine core, so each model's
renderer keeps a processor-only cache (whole processed items), and a repeated item is served from
it: that is what makes a hot workload cheap (``docs/performance.md``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

from mediaref.cache.layered import LayeredProcessorCache
from mediaref.cache.redis_l2 import RedisL2Store
from mediaref.media.connector import (
    MediaConnector,
    MediaRequestDownloadBudget,
    MediaRequestFetchScope,
)
from mediaref.media.decode_budget import MediaDecodedBudget
from mediaref.processing.context import ModelConfig, resolve_dtype
from mediaref.registry import MULTIMODAL_REGISTRY
from mediaref.renderers.base import BaseRenderer
from mediaref.serve.client_limits import ClientSemaphores, FairGate
from mediaref.serve.encoded_cache import EncodedItemCache
from mediaref.serve.errors import ModelNotFoundError
from mediaref.serve.fair_pool import FairPool
from mediaref.serve.fleet_cache import layered_cache
from mediaref.serve.metrics import ServeMetrics
from mediaref.serve.options import ServeOptions, available_cores, resolve_model_dir
from mediaref.serve.prompt_checks import PlaceholderTokens

if TYPE_CHECKING:
    from mediaref.serve.worker_plan import WorkerPlan


class NamesAModel(Protocol):
    """A request of any route: it may name a served model."""

    @property
    def model(self) -> str | None: ...


class ServedModels:
    """The models one server renders for, each with its renderer (and processor cache)."""

    def __init__(
        self,
        options: ServeOptions,
        *,
        metrics: ServeMetrics | None = None,
        shared: WorkerPlan | None = None,
    ) -> None:
        """``shared``: this server is one worker of several, sharing items with the others."""
        self.options = options
        self._shared = shared
        self.renderers: dict[str, BaseRenderer[Any]] = {}
        self.placeholders: dict[str, PlaceholderTokens] = {}
        self._model_dirs: dict[str, str] = {}
        cores = available_cores()
        # Twice the cores, a quarter of them one client's at most: another client's work always
        # finds a free thread. The pool's jobs are the long ones (long prompts' bounds, large
        # bodies and responses); a request's short work runs where it is
        # (:data:`~mediaref.serve.service.INLINE_TEXT_CHARS`).
        self.pool = FairPool("render", 2 * cores, per_client=max(1, cores // 2))
        self.processing: dict[str, FairGate] = {}
        self.fleet_caches: dict[str, LayeredProcessorCache] = {}
        self.fetch_slots = ClientSemaphores(options.fetch_connections_per_client)
        try:
            for name in options.models:
                directory = resolve_model_dir(name)
                if directory != name:
                    self._model_dirs[directory] = name
                config = ModelConfig(
                    model=directory,
                    model_id=name,  # hashes name the model as given, as vLLM's do
                    mm_processor_cache_gb=options.mm_processor_cache_gb,
                    dtype=resolve_dtype(directory, options.dtype),
                )
                renderer: BaseRenderer[Any] = self._renderer(name, config)
                self.renderers[name] = renderer
                self.placeholders[name] = PlaceholderTokens(renderer)
                self.processing[name] = FairGate(2 * cores, per_client=cores)
        except BaseException:
            self.close()
            raise
        self.encoded = EncodedItemCache(int(options.encoded_cache_mb * 1024 * 1024))
        # The metrics watch the local caches: asking the layered one would ask Redis.
        caches: dict[str, Any] = {name: r.mm_processor_cache for name, r in self.renderers.items()}
        caches.update({name: cache.local for name, cache in self.fleet_caches.items()})
        stores = {
            kind: {
                name: store
                for name, cache in self.fleet_caches.items()
                for store in cache.stores
                if isinstance(store, RedisL2Store) == (kind == "l2")
            }
            for kind in ("l2", "worker")
        }
        self.metrics = metrics or ServeMetrics(caches, stores["l2"], stores["worker"])

    def _renderer(self, name: str, config: ModelConfig) -> BaseRenderer[Any]:
        """The model's renderer; its processor cache over the workers' shared store
        (``--workers``) and the fleet's Redis (``--cache-redis-url``), when there are such."""
        cache = layered_cache(name, config, self.options, self._shared)
        if cache is None:
            return BaseRenderer(config)
        self.fleet_caches[name] = cache
        return BaseRenderer(
            config, mm_processor=MULTIMODAL_REGISTRY.create_processor(config, cache=cache)
        )

    def warmup(self) -> None:
        """Load each model's processor and run its warmup before the first request."""
        for renderer in self.renderers.values():
            renderer.start_mm_warmup().result()

    def close(self) -> None:
        self.pool.close()
        for renderer in self.renderers.values():
            renderer.shutdown()
        for cache in self.fleet_caches.values():
            cache.close()

    def public_message(self, message: str) -> str:
        """``message`` as a client may read it: a model's directory becomes its served name."""
        for directory, name in self._model_dirs.items():
            message = message.replace(directory, name)
        return message

    def renderer_for(self, request: NamesAModel) -> tuple[str, BaseRenderer[Any]]:
        """The served model a request names (its ``model``; the default when it names none)."""
        name = request.model or self.options.default_model
        renderer = self.renderers.get(name)
        if renderer is None:
            raise ModelNotFoundError(f"The model `{name}` does not exist.")
        return name, renderer

    def connector(self, shared_slots: asyncio.Semaphore | None = None) -> MediaConnector:
        """A connector for one request: the server's address policy, the request's budgets and
        its fetch scope (one fetch deadline, at most 16 connections at once)."""
        options = self.options
        return MediaConnector(
            allowed_local_media_path=options.allowed_local_media_path,
            allowed_media_domains=list(options.allowed_media_domains) or None,
            allow_private_ips=options.media_url_allow_private_ips,
            decoded_budget=MediaDecodedBudget(),
            download_budget=MediaRequestDownloadBudget(options.request_download_limit_bytes()),
            fetch_scope=MediaRequestFetchScope(shared_slots=shared_slots),
        )


__all__ = ["NamesAModel", "ServedModels"]
