"""What the server serves, as vLLM 0.33's render server says it: its small GET routes.

=============================  =================================================================
``GET /v1/models``             the served models (OpenAI's model list: id, max_model_len, ...)
``GET /version``               ``{"version": "0.33.0"}``: the vLLM API this server speaks (and
                               ``mediaref_version``, mediaref's own)
``GET /load``                  ``{"server_load": N}``: requests being handled now
``GET|POST /ping``             200, empty (SageMaker's health check, as vLLM answers it)
``GET /kv_event_sources``      ``{}``: a render server publishes no KV-cache events
=============================  =================================================================

They answer from the event loop, like ``/health``, and hold nothing of the front door. A model's
``id`` and ``root`` are its served name: vLLM's ``root`` is the model's path, which here stays
the server's business (``docs/compat.md``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from importlib import metadata
from typing import Any

from aiohttp import web

from mediaref.serve.service import RenderService

MIRRORED_VERSION = "0.33.0"
"""The vLLM release whose render server this one mirrors."""


def _permission(created: int) -> dict[str, Any]:
    return {
        "id": f"modelperm-{uuid.uuid4().hex[:16]}",
        "object": "model_permission",
        "created": created,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }


def models_list(service: RenderService, created: int) -> dict[str, Any]:
    """OpenAI's model list for the served models (vLLM's ``ModelList``)."""
    return {
        "object": "list",
        "data": [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": name,
                "parent": None,
                "max_model_len": renderer.model_config.derived_max_model_len,
                "permission": [_permission(created)],
            }
            for name, renderer in service.renderers.items()
        ],
    }


def _mediaref_version() -> str:
    try:
        return metadata.version("mediaref")
    except metadata.PackageNotFoundError:
        return "unknown"


def add_info_routes(
    app: web.Application, service: RenderService, in_flight: Callable[[], int]
) -> None:
    """Register the routes of the module docstring on ``app``."""
    created = int(time.time())
    version = {"version": MIRRORED_VERSION, "mediaref_version": _mediaref_version()}

    async def models(request: web.Request) -> web.Response:
        return web.json_response(models_list(service, created))

    async def version_route(request: web.Request) -> web.Response:
        return web.json_response(version)

    async def load(request: web.Request) -> web.Response:
        return web.json_response({"server_load": in_flight()})

    async def ping(request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def kv_event_sources(request: web.Request) -> web.Response:
        return web.json_response({})

    app.router.add_get("/v1/models", models)
    app.router.add_get("/version", version_route)
    app.router.add_get("/load", load)
    app.router.add_get("/ping", ping)
    app.router.add_post("/ping", ping)
    app.router.add_get("/kv_event_sources", kv_event_sources)


__all__ = ["MIRRORED_VERSION", "add_info_routes", "models_list"]
