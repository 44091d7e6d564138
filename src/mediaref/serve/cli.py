"""``mediaref serve`` and ``mediaref render`` (the ``mediaref`` console script, ``python -m mediaref``).

``mediaref serve`` runs the render server (:mod:`mediaref.serve.server`); ``mediaref render
[REQUEST.json]`` renders one request offline, exactly as the server would, and prints the
response JSON on stdout and where the time went on stderr. With no REQUEST it renders the shipped
example (``assets/example_request.json``: the sample photo and a generated clip). Each option's
default is the multi-tenant one documented in ``docs/serving.md``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import metadata, resources
from pathlib import Path
from typing import Any

from mediaref.processing.context import DTYPES
from mediaref.serve.options import (
    DEFAULT_MODEL,
    LOG_LEVELS,
    TENSOR_FORMATS,
    ServeOptions,
    available_cores,
)

EXAMPLE_REQUEST = "example_request.json"


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="DIR",
        help=f"a built-in model name or a model directory; repeat to serve several, the first "
        f"is the default (default: the built-in {DEFAULT_MODEL!r}, offline)",
    )
    parser.add_argument(
        "--encoded-cache-mb",
        type=float,
        default=512.0,
        help="encoded tensors of recently sent items, so a repeat is not re-encoded (default: 512)",
    )
    parser.add_argument(
        "--tensor-format",
        choices=TENSOR_FORMATS,
        default="vllm",
        help="how processed tensors are written: vllm (its render server's msgpack, which its "
        "engines read) or safetensors (any client reads it) (default: vllm)",
    )
    parser.add_argument(
        "--mm-processor-cache-gb",
        type=float,
        default=None,
        help="processor output cache per model (default: MEDIAREF_MM_PROCESSOR_CACHE_GB, 4)",
    )
    parser.add_argument(
        "--dtype",
        choices=("auto", *DTYPES),
        default="auto",
        help="floating-point tensors are sent in this dtype, as vLLM's --dtype (default: auto, "
        "the model's own, float32 downcast to bfloat16)",
    )


def _add_media_options(parser: argparse.ArgumentParser, *, local_default: str) -> None:
    parser.add_argument(
        "--max-items-per-request",
        type=int,
        default=32,
        help="media items one request may carry; over it: 413 (default: 32)",
    )
    parser.add_argument(
        "--max-request-download-mb",
        type=float,
        default=None,
        help="all http(s) downloads of one request; over it: 413 (default: "
        "VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB, 256; 0: no cap)",
    )
    parser.add_argument(
        "--allowed-media-domains",
        nargs="*",
        default=[],
        metavar="HOST",
        help="hosts media URLs may name, checked on every redirect hop (default: any public host)",
    )
    parser.add_argument(
        "--allowed-local-media-path",
        default=local_default,
        metavar="DIR",
        help="a directory file: URLs may read under (default: %(default)r"
        + (": file: URLs refused)" if not local_default else ")"),
    )
    parser.add_argument(
        "--media-url-allow-private-ips",
        action="store_true",
        help="let media URLs reach loopback, private and other non-public addresses (default: off)",
    )
    parser.add_argument(
        "--trust-exif-image-id",
        action="store_true",
        help="key images by their EXIF ImageID, a client-chosen identity (default: off)",
    )
    for flag, what in (
        ("--trust-request-mm-kwargs", "a request's media_io_kwargs and mm_processor_kwargs"),
        ("--trust-request-chat-template", "a request's chat_template"),
        ("--trust-request-mm-uuids", "content parts' uuid fields (client-chosen cache identity)"),
    ):
        parser.add_argument(flag, action="store_true", help=f"accept {what} (default: 400)")
    parser.add_argument(
        "--no-layout-from-headers",
        dest="layout_from_headers",
        action="store_false",
        help='render mm_payload "none" requests in full too (default: from headers where the '
        "model can: nothing decoded)",
    )
    parser.add_argument(
        "--eager-media",
        action="store_true",
        help="the benchmark baseline: decode at fetch, hash pixels (vLLM 0.33's way; slower)",
    )


def _add_client_limit_options(parser: argparse.ArgumentParser) -> None:
    """What one client may hold, and how fast a request must arrive (docs/security.md)."""
    parser.add_argument(
        "--max-concurrency-per-client",
        type=int,
        default=None,
        help="render slots one client (peer address) may hold; 0: no share, as behind one "
        "trusted router (default: a quarter of --max-concurrency)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=4096,
        help="connections open at once; past it: 503 and closed (default: 4096)",
    )
    parser.add_argument(
        "--max-connections-per-client",
        type=int,
        default=256,
        help="connections one client may hold open; 0: no share (default: 256)",
    )
    parser.add_argument(
        "--max-buffered-body-mb",
        type=float,
        default=2048.0,
        help="request bodies held at once, a quarter of it per client; past it: 503 "
        "(default: 2048)",
    )
    parser.add_argument(
        "--max-fetch-connections-per-client",
        type=int,
        default=32,
        help="media connections the fetches of one client's requests hold at once; 0: no share "
        "(default: 32)",
    )
    parser.add_argument(
        "--client-body-rate-mb",
        type=float,
        default=64.0,
        help="MiB/s one client's bodies are read at while other clients' bodies are held, "
        "after a burst of --max-request-body-mb; a client alone is read at full speed; "
        "0: unpaced (default: 64)",
    )
    parser.add_argument(
        "--refusals-per-client-second",
        type=float,
        default=10.0,
        help="refusals (4xx) a client gets a second, bursts of twice as many, before each "
        "further one is answered later, up to 2 s; 0: never (default: 10)",
    )
    parser.add_argument(
        "--disable-client-shares",
        action="store_true",
        help="no per-client shares or pace: behind one trusted router, whose address every "
        "request comes from",
    )
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=None,
        help="seconds to send a request's headers, and an idle keep-alive connection's life "
        "(default: VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5)",
    )
    parser.add_argument(
        "--body-timeout",
        type=float,
        default=60.0,
        help="seconds a request's whole body has to arrive; past it: 408 (default: 60)",
    )
    parser.add_argument(
        "--min-body-rate-kb",
        type=float,
        default=64.0,
        help="KiB/s a body must average after the header timeout; slower: 408 (default: 64)",
    )
    parser.add_argument(
        "--send-timeout",
        type=float,
        default=60.0,
        help="seconds a client has to take one whole response; past it the connection is "
        "closed (default: 60)",
    )
    parser.add_argument(
        "--min-send-rate-kb",
        type=float,
        default=64.0,
        help="KiB/s a client must take a response at after the header timeout; slower: the "
        "connection is closed (default: 64)",
    )


def _add_tool_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--enable-auto-tool-choice",
        action="store_true",
        help='render tool_choice "auto" (vLLM\'s flag; needs --tool-call-parser)',
    )
    parser.add_argument(
        "--tool-call-parser",
        default="",
        metavar="NAME",
        help="vLLM's tool call parser name: with one, required and named tool choices render",
    )


def _add_redis_cache_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cache-redis-url",
        default="",
        metavar="URL",
        help="a Redis server (redis://HOST:PORT/DB) under the processor cache, shared by a fleet "
        "of servers (default: none)",
    )
    parser.add_argument(
        "--cache-redis-secret-file",
        default="",
        metavar="FILE",
        help="the fleet's secret that authenticates every Redis entry (default: "
        "MEDIAREF_CACHE_REDIS_SECRET)",
    )
    parser.add_argument(
        "--cache-redis-ttl-s",
        type=int,
        default=24 * 3600,
        help="seconds a Redis entry lives (default: 86400)",
    )
    parser.add_argument(
        "--cache-redis-max-entry-mb",
        type=float,
        default=64.0,
        help="larger processed items are not written to Redis (default: 64)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mediaref",
        description="mediaref serve: the GPU-less render server; mediaref render: one request, "
        "offline (with no REQUEST, the shipped example). docs/serving.md has the details.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the render server")
    _add_model_options(serve)
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
    _add_client_limit_options(serve)
    _add_media_options(serve, local_default="")
    _add_tool_options(serve)
    _add_redis_cache_options(serve)
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
    _add_model_options(render)
    _add_media_options(render, local_default="(the request's directory)")
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


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "serve":
            options = options_from(args)
            if options.workers > 1:
                from mediaref.serve.workers import run_supervisor

                return run_supervisor(options)
            from mediaref.serve.server import run_server

            return run_server(options)
        return _render_command(args)
    except ValueError as exc:  # a bad option value: ServeOptions says which
        print(f"mediaref {args.command}: {exc}", file=sys.stderr)
        return 2


def _render_command(args: argparse.Namespace) -> int:
    from mediaref.serve.render_once import render_file

    if args.repeat < 1:
        raise ValueError(f"--repeat must be at least 1, got {args.repeat}")
    with resources.as_file(resources.files("mediaref") / "assets" / EXAMPLE_REQUEST) as example:
        path: Path = (args.request or example).resolve()
        if not path.is_file():
            raise ValueError(f"{args.request}: no such request file")
        local = args.allowed_local_media_path
        if local == "(the request's directory)":
            local = str(path.parent)
        options = options_from(args, allowed_local_media_path=local)
        return render_file(path, options, repeat=args.repeat)


def main(argv: Sequence[str] | None = None) -> int:
    return _run(argv)


__all__ = ["EXAMPLE_REQUEST", "build_parser", "main", "options_from"]
