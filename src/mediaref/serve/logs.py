"""The render server's log lines: the access log, refused requests, and the level.

Everything logs under ``mediaref`` (the server's own lines under ``mediaref.serve``), to stderr,
at ``--log-level`` (default ``info``):

- **the access log** (:class:`AccessLog`, on unless ``--disable-access-log``), one line a
  request: ``POST /v1/chat/completions/render 200 12.3ms id=chatcmpl-... client=10.0.0.7``;
- **refused requests** (:data:`client_error_log`): one line with the status and the reason, never
  a traceback (the client's mistake is not the server's failure), at most
  ``CLIENT_ERROR_LINES_PER_SECOND`` a second so that a client cannot flood the log; the lines
  dropped are counted in the next one;
- the server's own failures (500) with their traceback, and its start, drain and stop lines.
"""

from __future__ import annotations

import logging
import logging.handlers
import queue
import sys
import threading
import time
from collections.abc import Callable

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

logger = logging.getLogger("mediaref.serve")
access_logger = logging.getLogger("mediaref.serve.access")

CLIENT_ERROR_LINES_PER_SECOND = 10
REQUEST_ID_KEY = web.RequestKey("request_id", str)
"""Where a request keeps the id its response names, for the access log."""
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str) -> logging.handlers.QueueListener:
    """Send the ``mediaref`` loggers to stderr at ``level``, written by a thread of their own.

    A line logged on the event loop is only queued there: writing it is the listener thread's
    business, so a slow or full stderr (a pipe nobody drains fast enough) never stalls requests.
    Returns the started listener; stop it to flush the queue at exit.
    """
    root = logging.getLogger("mediaref")
    root.setLevel(level.upper())
    for old in [h for h in root.handlers if isinstance(h, _MediarefQueueHandler)]:
        root.removeHandler(old)
    lines: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    root.addHandler(_MediarefQueueHandler(lines))
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(logging.Formatter(_FORMAT))
    listener = logging.handlers.QueueListener(lines, stderr)
    listener.start()
    return listener


class _MediarefQueueHandler(logging.handlers.QueueHandler):
    """The handler :func:`configure_logging` installs (so a second call replaces it)."""


class RateLimitedLog:
    """At most ``per_second`` lines a second on average (bursts of that many); the lines dropped
    meanwhile are counted in the next one written."""

    def __init__(
        self,
        target: logging.Logger,
        per_second: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.target = target
        self.per_second = per_second
        self._clock = clock
        self._tokens = per_second
        self._last = clock()
        self._dropped = 0
        self._lock = threading.Lock()

    def info(self, message: str, *args: object) -> bool:
        """Log ``message % args`` at info level unless over the rate; whether it was."""
        if not self.target.isEnabledFor(logging.INFO):
            return False
        with self._lock:
            now = self._clock()
            self._tokens = min(self.per_second, self._tokens + (now - self._last) * self.per_second)
            self._last = now
            if self._tokens < 1:
                self._dropped += 1
                return False
            self._tokens -= 1
            dropped, self._dropped = self._dropped, 0
        suffix = f" ({dropped} similar lines dropped)" if dropped else ""
        self.target.info(message + suffix, *args)
        return True


client_error_log = RateLimitedLog(logger, CLIENT_ERROR_LINES_PER_SECOND)
"""Where refused requests are logged (see the module docstring)."""


class AccessLog(AbstractAccessLogger):
    """aiohttp's access logger, writing the line the module docstring shows."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.info(
            "%s %s %d %.1fms id=%s client=%s",
            request.method,
            request.path,
            response.status,
            time * 1000,
            request.get(REQUEST_ID_KEY, "-"),
            request.remote or "-",
        )


__all__ = [
    "CLIENT_ERROR_LINES_PER_SECOND",
    "REQUEST_ID_KEY",
    "AccessLog",
    "RateLimitedLog",
    "access_logger",
    "client_error_log",
    "configure_logging",
    "logger",
]
