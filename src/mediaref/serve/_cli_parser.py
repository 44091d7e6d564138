"""The ``mediaref`` argument parser, and what it parsed as ``ServeOptions``.

:func:`build_parser` assembles the two commands: ``serve`` takes every flag group of
:mod:`mediaref.serve._cli_flags` and its own flags (binding, workers, concurrency, shutdown,
logging); ``render`` takes the model and media groups and its request file. :func:`options_from`
maps either command's arguments to :class:`~mediaref.serve.options.ServeOptions`: a flag the
command does not have is left out, so ``mediaref render`` keeps the server's default for it.
"""

from __future__ import annotations

import argparse
from importlib import metadata
from pathlib import Path
from typing import Any

from mediaref.serve._cli_flags import (
    add_client_limit_options,
    add_media_options,
    add_model_options,
    add_redis_cache_options,
    add_tool_options,
)
from mediaref.serve.options import (
    DEFAULT_MODEL,
    LOG_LEVELS,
    ServeOptions,
    available_cores,
)

REQUEST_DIRECTORY = "(the request's directory)"
"""``render``'s default ``--allowed-local-media-path``, shown as such in its help: the command
replaces it with the request file's directory once it knows the file."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mediaref",
        description="mediaref serve: the GPU-less render server; mediaref render: one request, "
        "offline (with no REQUEST, the shipped example). docs/serving.md has the details.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the render server")
    add_model_options(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    serve.add_argument(
        "--port", type=int, default=8000, help="port to bind, 0: any free one (default: 8000)"
    )
    serve.add_argument(
        "--workers",
        type=_workers,
        default=1,
        metavar="N|auto",
        help="processes serving the port, sharing each model's processed items through shared "
        "memory; auto: one per core this process may run on (default: 1)",
    )
    serve.add_argument(
        "--max-concurrency",
        type=int,
        default=64,
        help="requests rendered at once; the rest wait, bodies unread (default: 64)",
    )
    serve.add_argument(
        "--max-request-body-mb",
        type=float,
        default=64.0,
        help="one request body, data: URLs included; over it: 413 (default: 64)",
    )
    serve.add_argument(
        "--shutdown-timeout",
        type=float,
        default=30.0,
        help="seconds SIGTERM waits for in-flight requests (default: 30)",
    )
    add_client_limit_options(serve)
    add_media_options(serve, local_default="")
    add_tool_options(serve)
    add_redis_cache_options(serve)
    serve.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="info",
        help="the mediaref loggers' level (default: info)",
    )
    serve.add_argument(
        "--disable-access-log",
        action="store_true",
        help="no line per request (method, route, status, latency, request id) at info level",
    )

    render = commands.add_parser("render", help="render one request offline, print the JSON")
    render.add_argument(
        "request",
        nargs="?",
        type=Path,
        help="a chat (messages) or completions (prompt) render request as JSON; relative file: "
        "URLs are read relative to it (default: the shipped example)",
    )
    render.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="render it this many times: the first is a cache miss, the rest hits (default: 2)",
    )
    add_model_options(render)
    add_media_options(render, local_default=REQUEST_DIRECTORY)
    return parser


_SERVE_ONLY = (
    "host",
    "port",
    "max_concurrency",
    "max_request_body_mb",
    "shutdown_timeout",
    "max_concurrency_per_client",
    "max_connections",
    "max_connections_per_client",
    "max_buffered_body_mb",
    "header_timeout",
    "body_timeout",
    "min_body_rate_kb",
    "send_timeout",
    "min_send_rate_kb",
    "client_body_rate_mb",
    "max_fetch_connections_per_client",
    "refusals_per_client_second",
    "log_level",
    "workers",
    "enable_auto_tool_choice",
    "tool_call_parser",
    "cache_redis_url",
    "cache_redis_secret_file",
    "cache_redis_ttl_s",
    "cache_redis_max_entry_mb",
)


def _workers(value: str) -> int:
    """``--workers``: a count, or ``auto`` (the cores this process may run on)."""
    if value == "auto":
        return available_cores()
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count or auto, got {value!r}") from None


def _version() -> str:
    try:
        return metadata.version("mediaref")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def options_from(args: argparse.Namespace, **overrides: Any) -> ServeOptions:
    values: dict[str, Any] = {
        "models": tuple(args.models or (DEFAULT_MODEL,)),
        "mm_processor_cache_gb": args.mm_processor_cache_gb,
        "dtype": args.dtype,
        "encoded_cache_mb": args.encoded_cache_mb,
        "tensor_format": args.tensor_format,
        "max_items_per_request": args.max_items_per_request,
        "max_request_download_mb": args.max_request_download_mb,
        "allowed_media_domains": tuple(args.allowed_media_domains),
        "allowed_local_media_path": args.allowed_local_media_path,
        "media_url_allow_private_ips": args.media_url_allow_private_ips,
        "trust_exif_image_id": args.trust_exif_image_id,
        "trust_request_mm_kwargs": args.trust_request_mm_kwargs,
        "trust_request_chat_template": args.trust_request_chat_template,
        "trust_request_mm_uuids": args.trust_request_mm_uuids,
        "eager_media": args.eager_media,
        "layout_from_headers": args.layout_from_headers,
    }
    for name in _SERVE_ONLY:
        if hasattr(args, name):
            values[name] = getattr(args, name)
    if hasattr(args, "disable_access_log"):
        values["access_log"] = not args.disable_access_log
        values["client_shares"] = not args.disable_client_shares
    values.update(overrides)
    return ServeOptions(**values)


__all__ = ["REQUEST_DIRECTORY", "build_parser", "options_from"]
