"""The errors mediaref raises, mapped once at each boundary.

::

    VLLMError                                             vLLM's root of its own errors
    ├── VLLMClientError                                   4xx  caused by the request
    └── VLLMServerError                                   5xx  caused by the server
    MediaRefError (VLLMError)                                  every error mediaref raises on purpose
    ├── VLLMValidationError (VLLMClientError, ValueError)  400  bad request input
    │   └── MediaClientError                              400  the client's fault while fetching
    │       ├── MediaNotAllowedError                      403  refused domain, address, path or scheme
    │       ├── MediaTooLargeError                        413  over a cap: encoded size, pixels, decoded bytes
    │       └── MediaNotFoundError                        404  the origin answered 404/410 or the file is missing
    ├── VLLMUnprocessableEntityError (VLLMClientError, ValueError)
    │                                                     422  a fetched item would not decode
    ├── MediaNotImplementedError (NotImplementedError)    501  a data: URL not in base64, as vLLM answers it
    └── MediaServerError (VLLMServerError, ConnectionError) 502  the origin failed us (5xx after retries, reset)
        └── MediaTimeoutError (TimeoutError)              504  the origin was too slow

``VLLMError``, ``VLLMClientError`` and ``VLLMServerError`` are vLLM's (``vllm/exceptions.py``): a
serving layer that dispatches on them (client error: 4xx, server error: 5xx) handles mediaref's
errors unchanged. ``VLLMValidationError`` and ``VLLMUnprocessableEntityError`` are siblings, as
in vLLM: a server that checks for the first before the second (vLLM's ``create_error_response``)
still answers a 422 with 422. The rest of vLLM 0.33's classes are here too (mediaref raises none
of them), so that with mediaref in place this module is ``vllm.exceptions``
(:mod:`mediaref.vllm_hook`): vLLM's code and mediaref's raise and catch one set of classes, and
vLLM's servers map mediaref's errors by class (keeping ``param``). ``VLLMValidationError`` and
``VLLMUnprocessableEntityError`` take vLLM's
``parameter=`` and ``value=`` and, as vLLM's do, append them to the message when set
(``"bad input (parameter=image_url, value=...)"``).

Decoding: a decoder raises ``ValueError`` for a payload that will not decode and
:class:`MediaTooLargeError` for one over a cap; the processor re-raises them, naming the modality
and the item's index, as :class:`VLLMUnprocessableEntityError` (422) and
:class:`MediaTooLargeError` (413). Anything else a decoder raises (``MemoryError``, ``OSError``,
``TypeError``, ``RuntimeError``...) is the server's fault, not the client's: it is logged and
propagates as itself (a server maps it to 500), and a memoized decode does not remember it.

``VLLMValidationError`` and ``VLLMUnprocessableEntityError`` also subclass ``ValueError``
(vLLM 0.33's do not): serving code that
maps ``ValueError`` to a 400 response, as vLLM's did before its client/server split, keeps
working. Every class carries ``status_code`` so a server can map the whole hierarchy with one
lookup.

Transport errors name the URL (``data:`` URLs shortened, see :func:`describe_url`) and the reason.

An error that has been answered (or dropped beside the one that was) should be let go with
:func:`release_frames`: an exception's traceback holds its frames, whose locals often hold the
exception, so without it every failed fetch leaves a cycle for the garbage collector.
"""

from __future__ import annotations

from http import HTTPStatus

_DATA_URL_PREVIEW_CHARS = 48


def describe_url(url: str) -> str:
    """A URL short enough for an error message: ``data:`` payloads are cut to their first bytes."""
    if url[:5].lower() == "data:" and len(url) > _DATA_URL_PREVIEW_CHARS:
        return f"{url[:_DATA_URL_PREVIEW_CHARS]}...[{len(url)} chars]"
    return url


class VLLMError(Exception):
    """vLLM's base class of its own errors: a :class:`VLLMClientError` or a :class:`VLLMServerError`."""


class VLLMClientError(VLLMError):
    """An error the request caused (HTTP 4xx)."""


class VLLMServerError(VLLMError):
    """An error the server caused (HTTP 5xx)."""


# -- the rest of vLLM 0.33's ``vllm/exceptions.py`` ---------------------------------------------
# mediaref raises none of these; they are here so that this module can stand for
# ``vllm.exceptions`` (see the module docstring). Same names, bases, arguments and messages.


class VLLMNotFoundError(VLLMClientError):
    """Something the request names does not exist (vLLM answers 404)."""


class ChatTemplateResolutionError(VLLMClientError):
    """No chat template could be resolved for the request (a 400)."""


class LoRAAdapterNotFoundError(VLLMNotFoundError):
    """A requested LoRA adapter has no files at its path."""

    message: str

    def __init__(self, lora_name: str, lora_path: str) -> None:
        # As vLLM's: the message lives in ``message``, not in ``args``.
        self.message = f"Loading lora {lora_name} failed: No adapter found for {lora_path}"

    def __str__(self) -> str:
        return self.message


class GenerationError(VLLMServerError):
    """Generation ended in an internal error; ``status_code`` is the status to answer (500)."""

    def __init__(self, message: str = "Internal server error") -> None:
        super().__init__(message)
        self.status_code = HTTPStatus.INTERNAL_SERVER_ERROR


class RetryableRequestError(GenerationError):
    """A transient failure a client may retry (503)."""

    def __init__(self, message: str = "Request failed; please retry") -> None:
        super().__init__(message)
        self.status_code = HTTPStatus.SERVICE_UNAVAILABLE


class GracefulHTTPError(VLLMError):
    """An expected refusal (admission control, say) answered with its own ``http_status``."""

    def __init__(self, message: str, http_status: HTTPStatus) -> None:
        super().__init__(message)
        self.message = message
        self.http_status = http_status


class QueueOverflowError(GracefulHTTPError):
    """The engine's request queue is full: 503, so a balancer or client retries elsewhere."""

    def __init__(self) -> None:
        super().__init__(
            "The engine is currently busy and cannot accept new requests. "
            "Please try again later or on a different instance.",
            HTTPStatus.SERVICE_UNAVAILABLE,
        )


class MaxQueuedTokensError(GracefulHTTPError):
    """The engine's pending prefill tokens are at their limit: 503."""

    def __init__(self) -> None:
        super().__init__(
            "The engine has reached its prefill token backlog limit. "
            "Please try again later or on a different instance.",
            HTTPStatus.SERVICE_UNAVAILABLE,
        )


class ProfilerAlreadyActiveError(GracefulHTTPError):
    """A profiling session is already running: 409."""

    def __init__(self) -> None:
        super().__init__(
            "A profiling session is already active. Call /stop_profile before "
            "starting another session.",
            HTTPStatus.CONFLICT,
        )


def _with_parameter(message: str, parameter: str | None, value: object) -> str:
    """``message`` followed by what is known of the offending input, as vLLM formats it."""
    extras = []
    if parameter is not None:
        extras.append(f"parameter={parameter}")
    if value is not None:
        extras.append(f"value={value}")
    return f"{message} ({', '.join(extras)})" if extras else message


class MediaRefError(VLLMError):
    """Base class of every error mediaref raises on purpose."""

    status_code: int = 500


class VLLMValidationError(MediaRefError, VLLMClientError, ValueError):
    """The request is invalid (HTTP 400). ``parameter`` and ``value`` name the offending input."""

    status_code = 400

    def __init__(self, message: str, *, parameter: str | None = None, value: object = None) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.value = value

    def __str__(self) -> str:
        return _with_parameter(super().__str__(), self.parameter, self.value)


class MediaClientError(VLLMValidationError):
    """Fetching failed because of what the client sent: bad URL, refused target, 4xx, too large."""

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url


class MediaNotAllowedError(MediaClientError):
    """The URL's scheme, domain, resolved address or local path is refused by policy."""

    status_code = 403


class MediaNotImplementedError(MediaRefError, NotImplementedError):
    """A form of media input vLLM does not implement either (a ``data:`` URL not in base64):
    HTTP 501 and a ``NotImplementedError``, as vLLM answers it. Neither a client nor a server
    error in vLLM's split, so that vLLM's ``create_error_response`` reaches its
    ``NotImplementedError`` case (501) with mediaref in place."""

    status_code = 501

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url


class MediaTooLargeError(MediaClientError):
    """Over a configured cap: the encoded size, an image's pixels, a request's decoded bytes...

    Raised at fetch time with the ``url`` when known; raised from a decode, the processor re-raises
    it with the ``modality`` and the item's ``index`` within it.
    """

    status_code = 413

    def __init__(
        self,
        message: str,
        *,
        url: str | None = None,
        modality: str | None = None,
        index: int | None = None,
    ) -> None:
        super().__init__(message, url=url)
        self.modality = modality
        self.index = index


class MediaNotFoundError(MediaClientError):
    """The origin answered 404/410, or a permitted local file does not exist."""

    status_code = 404


class VLLMUnprocessableEntityError(MediaRefError, VLLMClientError, ValueError):
    """The request's content cannot be processed, e.g. a fetched media item would not decode (422).

    Not a :class:`VLLMValidationError`, as in vLLM: a handler catching that one (a 400) does not
    catch this one.

    Takes vLLM's ``parameter`` and ``value``, and mediaref's ``modality`` and the item's ``index``
    within that modality: the processor cannot see which request field an item came from
    (``audio_url`` and ``input_audio`` are both "audio"), so it names no parameter there and the
    index is what locates the item for the client.
    """

    status_code = 422

    def __init__(
        self,
        message: str,
        *,
        parameter: str | None = None,
        value: object = None,
        modality: str | None = None,
        index: int | None = None,
    ) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.value = value
        self.modality = modality
        self.index = index

    def __str__(self) -> str:
        return _with_parameter(super().__str__(), self.parameter, self.value)


class MediaServerError(MediaRefError, VLLMServerError, ConnectionError):
    """The origin failed: a 5xx after the retries, a reset connection, an unreadable body."""

    status_code = 502

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url


class MediaTimeoutError(MediaServerError, TimeoutError):
    """The origin did not deliver the payload within the modality's fetch timeout."""

    status_code = 504


def release_frames(error: BaseException) -> None:
    """Let go of the tracebacks of ``error`` and of the errors it chains to or groups.

    A failed media fetch raises through a chain (``CancelledError`` → ``TimeoutError`` →
    :class:`MediaTimeoutError`...) whose tracebacks hold their frames, and those frames' locals
    hold the exceptions: a reference cycle that only a full garbage collection frees. A client
    whose requests name dozens of stalling URLs made thousands of them; each full collection
    then walked them, tens to hundreds of milliseconds that every other request felt. Called
    once an error has been answered or logged, it breaks each cycle at the exception's end, so
    reference counting frees the frames at once. The frames themselves are not cleared: an
    error shared by several waiters may still be propagating through a suspended one.
    """
    pending, seen = [error], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        current.__traceback__ = None
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        grouped = getattr(current, "exceptions", ())  # an ExceptionGroup's members
        if isinstance(grouped, tuple):
            pending.extend(e for e in grouped if isinstance(e, BaseException))


__all__ = [
    "ChatTemplateResolutionError",
    "GenerationError",
    "GracefulHTTPError",
    "LoRAAdapterNotFoundError",
    "MaxQueuedTokensError",
    "MediaClientError",
    "MediaNotAllowedError",
    "MediaNotFoundError",
    "MediaNotImplementedError",
    "MediaRefError",
    "MediaServerError",
    "MediaTimeoutError",
    "MediaTooLargeError",
    "ProfilerAlreadyActiveError",
    "QueueOverflowError",
    "RetryableRequestError",
    "VLLMClientError",
    "VLLMError",
    "VLLMNotFoundError",
    "VLLMServerError",
    "VLLMUnprocessableEntityError",
    "VLLMValidationError",
    "describe_url",
    "release_frames",
]
