"""The render server's options: one frozen value, its defaults the multi-tenant ones.

Each field is a ``mediaref serve`` flag (:mod:`mediaref.serve.cli`, where the help text lives)
and ``docs/serving.md`` lists them with their defaults. The defaults assume clients that must not
influence each other (``docs/security.md``, *Trust*): an image's EXIF ImageID is not its cache
identity, per-request decoder and processor overrides, chat templates and item UUIDs are
refused, every request has caps on its items and bytes, and media URLs go through the connector's
address policy (no private addresses, no ``file:`` URLs) unless the operator opens them up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mediaref import envs
from mediaref.cache.redis_l2 import load_secret
from mediaref.models.builtin import BUILTIN_MODEL_NAMES, builtin_model_path
from mediaref.processing.context import DTYPES

DEFAULT_MODEL = "qwen2_vl"
"""The built-in model served when no ``--model`` is given (it loads offline, from the package)."""

_BYTES_PER_MB = 1024 * 1024

LOG_LEVELS = ("debug", "info", "warning", "error")
TensorFormat = Literal["vllm", "safetensors"]
TENSOR_FORMATS: tuple[TensorFormat, ...] = ("vllm", "safetensors")


def available_cores() -> int:
    """The cores this process may run on (``--workers auto``; the server's pool sizes)."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)


def resolve_model_dir(model: str) -> str:
    """A built-in model's name -> its directory inside the package; anything else is a path."""
    if model in BUILTIN_MODEL_NAMES:
        return str(builtin_model_path(model))
    if not Path(model).is_dir():
        raise ValueError(
            f"--model {model!r} is neither a built-in model ({', '.join(BUILTIN_MODEL_NAMES)}) "
            "nor a model directory"
        )
    return model


REGISTERED_TOOL_PARSERS = frozenset(
    {
        "apertus", "beam", "cohere_command3", "cohere_command4", "deepseek_v3", "deepseek_v31",
        "deepseek_v32", "deepseek_v4", "deepseek_v41", "dots", "ernie45", "functiongemma",
        "gemma4", "gigachat3", "glm45", "glm47", "granite", "granite-20b-fc", "granite4",
        "hermes", "hf", "hunyuan_a13b", "hy_v3", "hy_v4", "inkling", "internlm", "jamba",
        "k2_horizon", "kimi_k2", "kimi_k3", "lfm2", "ling3", "llama3_json", "llama4_json",
        "llama4_pythonic", "longcat", "mimo", "minicpm5", "minimax_m2", "minimax_m3", "mistral",
        "muse", "muse_glimmer", "musespark1x", "olmo3", "openai", "phi4_mini_json", "plamo3",
        "poolside_v1", "pythonic", "qwen3_coder", "qwen3_json", "qwen3_xml", "seed_oss", "step3",
        "step3p5", "step5", "xlam",
    }
)  # fmt: skip
"""The tool call parsers vLLM 0.33.0 registers (``ToolParserManager.list_registered()``): the
names ``--tool-call-parser`` takes with ``--enable-auto-tool-choice``, as vLLM checks them."""


@dataclass(frozen=True)
class ServeOptions:
    """How ``mediaref serve`` (and ``mediaref render``) render requests."""

    models: tuple[str, ...] = (DEFAULT_MODEL,)
    """Built-in model names or model directories. Each is served under the name given; the
    first is the default for a request that names no ``model``."""
    host: str = "127.0.0.1"
    port: int = 8000
    """0 picks a free port (the server prints the one it bound)."""
    max_concurrency: int = 64
    """Requests rendered at once; later ones wait their turn, their bodies received."""
    max_concurrency_per_client: int | None = None
    """Of those, how many one client (a peer address) may hold; None: a quarter of
    ``max_concurrency``; 0: no share (every slot, as behind a single trusted router)."""
    max_connections: int = 4096
    """Connections open at once; one over it is answered 503 and closed unread."""
    max_connections_per_client: int = 256
    """Of those, one client's; 0: no share."""
    header_timeout: float | None = None
    """Seconds a connection has to send a request's line and headers (from its opening or its
    previous response), and that an idle keep-alive connection stays open; None:
    ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE`` (5)."""
    body_timeout: float = 60.0
    """Seconds a request's whole body has to arrive once its headers have; past it: 408."""
    min_body_rate_kb: float = 64.0
    """KiB/s a body must average once ``header_timeout`` has passed since its headers (a body
    trickling slower is cut off: 408)."""
    send_timeout: float = 60.0
    """Seconds a client has to take one whole response; past it the connection is closed."""
    min_send_rate_kb: float = 64.0
    """KiB/s a client must take a response at, on average, once ``header_timeout`` has passed
    since its first byte was written (a client that stops reading loses the connection)."""
    max_buffered_body_mb: float = 2048.0
    """Request bodies the server holds at once (arriving, waiting for a slot, rendering); a
    client may hold a quarter of it. A body past either: 503."""
    max_fetch_connections_per_client: int = 32
    """Media connections the fetches of one client's requests hold at once (each request also
    holds at most ``MEDIAREF_MEDIA_REQUEST_MAX_CONNECTIONS``); 0: no share."""
    client_body_rate_mb: float = 64.0
    """MiB/s one client's bodies are read at while other clients' bodies are held, after a burst
    of ``max_request_body_mb`` (faster senders wait: TCP slows them); a client alone is read at
    full speed; 0: unpaced."""
    refusals_per_client_second: float = 10.0
    """Refusals (4xx) a client gets a second, bursts of twice as many, before each further one is
    answered later (up to 2 s): a flood of bad requests slows itself down; 0: never."""
    client_shares: bool = True
    """Whether each client (a peer address) has a share of the slots, connections, body memory
    and read pace; off behind one trusted router, whose address every request comes from."""
    max_items_per_request: int = 32
    """Media items (image, video and audio parts, embeddings included) one request may carry;
    over it: 413."""
    max_request_body_mb: float = 64.0
    """A request body's size, ``data:`` URLs included; over it: 413."""
    max_request_download_mb: float | None = None
    """All http(s) downloads of one request; None: ``VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB``
    (256); 0: no cap. Over it: 413."""
    allowed_media_domains: tuple[str, ...] = ()
    """Hosts media URLs may name, on every redirect hop (empty: any public host)."""
    allowed_local_media_path: str = ""
    """A directory ``file:`` URLs may read under ("": ``file:`` URLs are refused, 403)."""
    media_url_allow_private_ips: bool = False
    """Let media URLs reach loopback, private and other non-public addresses."""
    trust_exif_image_id: bool = False
    """Key images by their EXIF ImageID (the library's default, ``MEDIAREF_TRUST_EXIF_IMAGE_ID``,
    is on, as in vLLM; a server shared by clients keeps it off)."""
    trust_request_mm_kwargs: bool = False
    """Accept a request's ``media_io_kwargs`` and ``mm_processor_kwargs`` (vLLM's
    ``--trust-request-mm-kwargs``); without it they are a 400."""
    trust_request_chat_template: bool = False
    """Accept a request's ``chat_template`` (vLLM's ``--trust-request-chat-template``)."""
    trust_request_mm_uuids: bool = False
    """Accept content parts' ``uuid`` fields: a UUID is the item's cache identity, chosen by the
    client (``docs/security.md``, *Trust*); without it they are a 400."""
    mm_processor_cache_gb: float | None = None
    """The processor output cache per model; None: ``MEDIAREF_MM_PROCESSOR_CACHE_GB`` (4)."""
    dtype: str = "auto"
    """vLLM's ``--dtype``: floating-point tensors are sent in it; ``auto`` resolves as vLLM does
    (the model's own dtype, float32 downcast to bfloat16)."""
    enable_auto_tool_choice: bool = False
    """vLLM's ``--enable-auto-tool-choice``: render ``tool_choice: "auto"`` (and ``tools`` without a
    ``tool_choice``); without it they are a 400, as on vLLM's server. Needs ``tool_call_parser``."""
    tool_call_parser: str = ""
    """vLLM's ``--tool-call-parser``: with one, ``"required"`` and named tool choices render.
    The name is not checked against vLLM's parsers: rendering does not use it (vLLM's engine
    parses the output)."""
    cache_redis_url: str = ""
    """A Redis server the processor cache layers over (``redis://HOST:PORT/DB``): a fleet of
    servers shares one hit rate (:mod:`mediaref.cache.redis_l2`); "": none."""
    cache_redis_secret_file: str = ""
    """The fleet's secret that authenticates the Redis entries; "": ``MEDIAREF_CACHE_REDIS_SECRET``."""
    cache_redis_ttl_s: int = 24 * 3600
    """Seconds a Redis entry lives after it is written."""
    cache_redis_max_entry_mb: float = 64.0
    """Larger processed items are not written to Redis."""
    tensor_format: TensorFormat = "vllm"
    """How processed tensors are written: ``vllm`` (vLLM's render server's msgpack, which its
    engines read) or ``safetensors`` (any client reads it; the features gain ``kwargs_info``)."""
    encoded_cache_mb: float = 512.0
    """Encoded tensors of recently sent items (base64 safetensors, by item hash), so a repeated
    item's response is not encoded again; 0: off (:mod:`mediaref.serve.encoded_cache`)."""
    layout_from_headers: bool = True
    """With ``mm_payload: "none"``, answer from the items' headers where the model can (token
    ids, hashes, placeholders: nothing decoded or processed, :mod:`mediaref.processing.layout`);
    off: every request renders in full, so a payload whose pixels do not decode is refused."""
    eager_media: bool = False
    """The benchmark baseline, vLLM 0.33's way: decode every item at fetch and hash its pixels
    (``benchmarks/bench_render.py``). Never faster; do not serve with it."""
    workers: int = 1
    """Processes serving the port (one listening socket, each with its own event loop and
    processing worker, all sharing each model's processed items through shared memory:
    :mod:`mediaref.serve.workers`); the CLI's ``auto`` is the cores this process may run on."""
    shutdown_timeout: float = 30.0
    """Seconds SIGTERM waits for the requests in flight before cutting them off."""
    log_level: str = "info"
    """The ``mediaref`` loggers' level (``debug``, ``info``, ``warning``, ``error``)."""
    access_log: bool = True
    """One line a request at the ``info`` level: method, route, status, latency, request id."""

    def __post_init__(self) -> None:
        if not self.models:
            raise ValueError("at least one model must be served")
        if len(set(self.models)) != len(self.models):
            raise ValueError(f"a model is named twice: {list(self.models)}")
        for name, value in (
            ("max_concurrency", self.max_concurrency),
            ("max_items_per_request", self.max_items_per_request),
            ("max_connections", self.max_connections),
            ("workers", self.workers),
        ):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        for name, number in (
            ("max_request_body_mb", self.max_request_body_mb),
            ("body_timeout", self.body_timeout),
            ("min_body_rate_kb", self.min_body_rate_kb),
            ("send_timeout", self.send_timeout),
            ("min_send_rate_kb", self.min_send_rate_kb),
            ("max_buffered_body_mb", self.max_buffered_body_mb),
            ("header_timeout", self.header_timeout),
        ):
            if number is not None and not number > 0:
                raise ValueError(f"{name} must be positive, got {number}")
        for name, number in (
            ("encoded_cache_mb", self.encoded_cache_mb),
            ("shutdown_timeout", self.shutdown_timeout),
            ("max_concurrency_per_client", self.max_concurrency_per_client),
            ("max_connections_per_client", self.max_connections_per_client),
            ("client_body_rate_mb", self.client_body_rate_mb),
            ("refusals_per_client_second", self.refusals_per_client_second),
            ("max_fetch_connections_per_client", self.max_fetch_connections_per_client),
        ):
            if number is not None and number < 0:
                raise ValueError(f"{name} must be >= 0, got {number}")
        if self.tensor_format not in TENSOR_FORMATS:
            raise ValueError(
                f"tensor_format must be one of {', '.join(TENSOR_FORMATS)}, "
                f"got {self.tensor_format!r}"
            )
        if self.log_level not in LOG_LEVELS:
            raise ValueError(
                f"log_level must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}"
            )
        local = self.allowed_local_media_path
        if local and not Path(local).is_dir():
            raise ValueError(f"allowed_local_media_path {local!r} is not a directory")
        if self.dtype != "auto" and self.dtype not in DTYPES:
            raise ValueError(
                f"dtype must be auto or one of {', '.join(DTYPES)}, got {self.dtype!r}"
            )
        if self.enable_auto_tool_choice and not self.tool_call_parser:
            raise ValueError("--enable-auto-tool-choice requires --tool-call-parser")
        if self.enable_auto_tool_choice and self.tool_call_parser not in REGISTERED_TOOL_PARSERS:
            # vLLM's validate_api_server_args checks the name only with auto tool choice too.
            raise ValueError(
                f"invalid tool call parser: {self.tool_call_parser} "
                f"(chose from {{ {','.join(sorted(REGISTERED_TOOL_PARSERS))} }})"
            )
        if self.cache_redis_url:
            self._check_redis_cache()

    def _check_redis_cache(self) -> None:
        scheme = self.cache_redis_url.partition("://")[0]
        if scheme not in ("redis", "rediss", "unix"):
            raise ValueError(
                f"cache_redis_url must be a redis://, rediss:// or unix:// URL, got {scheme!r}"
            )
        if not self.cache_redis_ttl_s > 0 or not self.cache_redis_max_entry_mb > 0:
            raise ValueError("cache_redis_ttl_s and cache_redis_max_entry_mb must be positive")
        load_secret(self.cache_redis_secret_file or None)  # refused now, not at the first request

    @property
    def default_model(self) -> str:
        return self.models[0]

    @property
    def max_request_body_bytes(self) -> int:
        return int(self.max_request_body_mb * _BYTES_PER_MB)

    @property
    def concurrency_per_client(self) -> int:
        """Render slots one client may hold (0: no share)."""
        if not self.client_shares:
            return 0
        if self.max_concurrency_per_client is None:
            return max(1, self.max_concurrency // 4)
        return self.max_concurrency_per_client

    @property
    def connections_per_client(self) -> int:
        """Connections one client may hold open (0: no share)."""
        return self.max_connections_per_client if self.client_shares else 0

    @property
    def fetch_connections_per_client(self) -> int:
        """Media connections one client's requests hold at once (0: no share)."""
        return self.max_fetch_connections_per_client if self.client_shares else 0

    @property
    def client_refusals_per_second(self) -> float:
        """Refusals a client gets a second before they slow down (0: never)."""
        return self.refusals_per_client_second if self.client_shares else 0.0

    @property
    def buffered_body_bytes(self) -> int:
        return int(self.max_buffered_body_mb * _BYTES_PER_MB)

    @property
    def buffered_body_bytes_per_client(self) -> int:
        """Body bytes one client may have held (0: no share): a quarter of them."""
        return max(1, self.buffered_body_bytes // 4) if self.client_shares else 0

    @property
    def client_body_bytes_per_second(self) -> float:
        """The pace one client's bodies are read at (0: unpaced)."""
        return self.client_body_rate_mb * _BYTES_PER_MB if self.client_shares else 0.0

    def header_timeout_seconds(self) -> float:
        if self.header_timeout is None:
            return float(envs.VLLM_HTTP_TIMEOUT_KEEP_ALIVE)
        return self.header_timeout

    def request_download_limit_bytes(self) -> int | None:
        """One request's download budget in bytes (None: no cap), read when a request starts."""
        if self.max_request_download_mb is None:
            return envs.size_cap_bytes("VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB")
        megabytes = self.max_request_download_mb
        return int(megabytes * _BYTES_PER_MB) if megabytes > 0 else None


__all__ = [
    "DEFAULT_MODEL",
    "LOG_LEVELS",
    "TENSOR_FORMATS",
    "ServeOptions",
    "TensorFormat",
    "available_cores",
    "resolve_model_dir",
]
