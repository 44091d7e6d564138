"""Every failure of a render request becomes one status and one body in OpenAI's error shape.

The body is vLLM's ``ErrorResponse``::

    {"error": {"message": "...", "type": "UnprocessableEntityError", "param": null, "code": 422}}

The status comes from one place: the ``status_code`` every :mod:`mediaref.exceptions` class
carries (400 malformed, 403 refused URL, 404 missing origin file, 413 over a cap, 422 undecodable
media naming its modality and index, 502 origin failure, 504 origin timeout: the table in
``docs/security.md``; 501 a ``data:`` URL not in base64, as vLLM answers it), aiohttp's own HTTP
errors (404 unknown route, 405, 408 a body too slow, 413 a body over ``--max-request-body-mb``,
503 a client past its share), and a chat template that fails on the request's input (400, as in
vLLM). A client's message names served models, never their directories (``public``), and is
logged as one rate-limited line without a traceback (:mod:`mediaref.serve.logs`). Anything else
is the server's fault: 500, logged with its traceback, and its message is not sent (it may name
server paths); ``docs/security.md`` lists these as "whatever the server raised".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web
from jinja2 import TemplateError

from mediaref.exceptions import (
    MediaRefError,
    VLLMClientError,
    VLLMUnprocessableEntityError,
    VLLMValidationError,
    release_frames,
)
from mediaref.serve.logs import client_error_log, logger

# OpenAI's client error names where it has one, the status's name otherwise.
ERROR_TYPES: dict[int, str] = {
    400: "BadRequestError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    408: "RequestTimeoutError",
    413: "RequestTooLargeError",
    422: "UnprocessableEntityError",
    500: "InternalServerError",
    501: "NotImplementedError",  # vLLM's name for it
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}

INTERNAL_ERROR_MESSAGE = "Internal server error: the server failed this request (see its log)."


class ModelNotFoundError(MediaRefError, VLLMClientError):
    """The request names a model this server does not serve (HTTP 404, as vLLM answers)."""

    status_code = 404


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, "ClientError" if status < 500 else "InternalServerError")


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """vLLM's ``ErrorResponse`` as JSON."""
    return {
        "error": {"message": message, "type": error_type(status), "param": param, "code": status}
    }


def status_of(exc: BaseException) -> int:
    """The HTTP status ``exc`` stands for (500: the server's own failure)."""
    if isinstance(exc, web.HTTPException):
        return exc.status
    if isinstance(exc, MediaRefError):
        return int(exc.status_code)
    if isinstance(exc, TemplateError):
        return 400  # the server's template failed on what the request put into it
    return 500


def error_response_for(
    exc: BaseException,
    *,
    context: str = "",
    public: Callable[[str], str] = str,
) -> tuple[int, dict[str, Any]]:
    """The status and body answering ``exc``. A 500 is logged here with its traceback; a client
    error as one rate-limited line. ``public`` rewrites a message for the client (the server
    names its models by their served names, never by their directories)."""
    status = status_of(exc)
    where = f" ({context})" if context else ""
    if status >= 500 and not isinstance(exc, MediaRefError):
        logger.error("render request failed%s", where, exc_info=exc)
        release_frames(exc)  # logged: nothing needs its frames now
        return status, error_body(status, INTERNAL_ERROR_MESSAGE)
    release_frames(exc)
    if isinstance(exc, web.HTTPException):
        message = exc.text or exc.reason
    else:
        message = str(exc) or type(exc).__name__
    message = public(message)
    client_error_log.info("refused %d%s: %s", status, where, message[:300])
    param = (
        exc.parameter
        if isinstance(exc, (VLLMValidationError, VLLMUnprocessableEntityError))
        else None
    )
    return status, error_body(status, message, param)


__all__ = [
    "ERROR_TYPES",
    "INTERNAL_ERROR_MESSAGE",
    "ModelNotFoundError",
    "error_body",
    "error_response_for",
    "error_type",
    "status_of",
]
