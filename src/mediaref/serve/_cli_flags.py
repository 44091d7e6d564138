"""The flag groups of ``mediaref serve`` and ``mediaref render``, one concern a function.

Both commands take the model and media groups (``render`` with its own default for
``--allowed-local-media-path``: the request's directory); the client limits (docs/security.md),
tool and Redis cache groups are the server's alone. A flag's destination names the
:class:`~mediaref.serve.options.ServeOptions` field it sets (``--disable-client-shares`` sets
``client_shares``, inverted): :func:`~mediaref.serve._cli_parser.options_from` relies on it.
"""

from __future__ import annotations

import argparse

from mediaref.processing.context import DTYPES
from mediaref.serve.options import DEFAULT_MODEL, TENSOR_FORMATS


def add_model_options(parser: argparse.ArgumentParser) -> None:
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


def add_media_options(parser: argparse.ArgumentParser, *, local_default: str) -> None:
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


def add_client_limit_options(parser: argparse.ArgumentParser) -> None:
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


def add_tool_options(parser: argparse.ArgumentParser) -> None:
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


def add_redis_cache_options(parser: argparse.ArgumentParser) -> None:
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


__all__ = [
    "add_client_limit_options",
    "add_media_options",
    "add_model_options",
    "add_redis_cache_options",
    "add_tool_options",
]
