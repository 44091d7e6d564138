"""The aiohttp sessions that media downloads go through, and the environment's proxy choice.

Sessions pool connections, so they are shared: one :class:`MediaHTTPClient` (normally the
process-wide default) keeps, per event loop, one session that resolves hostnames through
:class:`~mediaref.media._transport.addresses.PolicyResolver` and one that uses the system
resolver, for connectors that allow private addresses and for requests sent through a proxy
(where the proxy, an operator's choice, may well be on a private address and the target is checked
before the request; see ``http_download``). A session belongs to the loop it was made on, and is
closed when that loop shuts down its async generators, as ``asyncio.run`` and ``asyncio.Runner``
do on exit.

Each loop also has its :class:`~mediaref.media._transport.connection_slots.ConnectionSlots`:
``limit`` concurrent downloads in all and, only if ``limit_per_host`` is given, that many per
origin (none by default: why is in that module). The sessions' own connectors are unlimited, so
aiohttp never queues a request inside its timeout; the slots do the limiting, and say which waits
count against a fetch's timeout (see that module).

Sessions keep no cookies (one request's cookies must not travel with another's fetch), read no
``.netrc`` or proxy variables of their own (``trust_env=False``; proxies are chosen per request
below) and never decode a ``Content-Encoding`` (``auto_decompress=False``): a 1 MB gzip body can
inflate to gigabytes, and aiohttp's decoder has no output cap. The body arrives as sent, and
``http_body`` decodes the codings it supports under the size cap.
"""

from __future__ import annotations

import asyncio
import os
import threading
import urllib.request
from collections.abc import AsyncIterator

import aiohttp
from yarl import URL

from mediaref.media._transport.addresses import PolicyResolver
from mediaref.media._transport.connection_slots import ConnectionSlots

_USER_AGENT = "mediaref"
_DEFAULT_HEADERS = {
    "User-Agent": _USER_AGENT,
    # Media is compressed already; asking for identity keeps the bytes read equal to the bytes
    # counted against the size cap instead of inflating them client-side.
    "Accept-Encoding": "identity",
}


def _proxy_setting(name: str) -> str | None:
    # Lowercase wins, as in urllib. Under CGI, HTTP_PROXY is a request header ("httpoxy"), so the
    # uppercase http form is ignored there. Reading a few names directly instead of through
    # urllib.request.getproxies() avoids scanning the whole environment on every request.
    value = os.environ.get(name)
    if value is None and not (name == "http_proxy" and "REQUEST_METHOD" in os.environ):
        value = os.environ.get(name.upper())
    return value or None


def env_proxy_for(url: URL) -> tuple[URL, aiohttp.BasicAuth | None] | None:
    """The proxy that ``http_proxy`` / ``https_proxy`` / ``no_proxy`` name for ``url``, if any."""
    raw = _proxy_setting(f"{url.scheme}_proxy")
    if raw is None:
        return None
    no_proxy = _proxy_setting("no_proxy")
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if no_proxy and bypass(url.raw_host or "", {"no": no_proxy}):
        return None
    proxy = URL(raw if "://" in raw else f"http://{raw}")
    auth = aiohttp.BasicAuth(proxy.user, proxy.password or "") if proxy.user else None
    return proxy.with_user(None), auth


# No per-origin limit: it starved healthy fetches to an origin behind stalled ones to the same
# origin, and a request's own bound and deadline now limit what it can do to one (see
# connection_slots). None keeps the name for callers that pass it on.
DEFAULT_LIMIT_PER_HOST: int | None = None
# Bounds descriptors, well under a common soft limit of 1024 open files. One request holds at
# most MEDIAREF_MEDIA_REQUEST_MAX_CONNECTIONS (16) of these, so filling them takes 32 requests.
DEFAULT_LIMIT = 512


class _LoopSessions:
    """The two sessions and the connection slots of one event loop, sessions made on first use."""

    def __init__(self, limit: int, limit_per_host: int | None) -> None:
        self.slots = ConnectionSlots(per_origin=limit_per_host, total=limit)
        self._sessions: dict[bool, aiohttp.ClientSession] = {}
        self.closed = False
        # The loop only keeps a weak reference to the generator that closes these sessions at its
        # shutdown; this strong one keeps it from being collected (and run) early.
        self.shutdown_guard: AsyncIterator[None] | None = None

    def get(self, check_addresses: bool) -> aiohttp.ClientSession:
        session = self._sessions.get(check_addresses)
        if session is None:
            # limit=0: unlimited here, the slots limit (see the module docstring).
            connector = aiohttp.TCPConnector(
                limit=0,
                limit_per_host=0,
                resolver=PolicyResolver() if check_addresses else None,
            )
            session = aiohttp.ClientSession(
                connector=connector,
                headers=_DEFAULT_HEADERS,
                trust_env=False,
                auto_decompress=False,
                # Sessions are shared by every request: a cookie one origin set while serving
                # one client's media must not ride along on another client's fetch.
                cookie_jar=aiohttp.DummyCookieJar(),
            )
            self._sessions[check_addresses] = session
        return session

    async def close(self) -> None:
        self.closed = True
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()


class MediaHTTPClient:
    """Shared aiohttp sessions for media downloads, per event loop (see the module docstring)."""

    def __init__(
        self, *, limit: int = DEFAULT_LIMIT, limit_per_host: int | None = DEFAULT_LIMIT_PER_HOST
    ) -> None:
        if limit < 1 or (limit_per_host is not None and limit_per_host < 1):
            raise ValueError("limit and limit_per_host must be at least 1")
        self._limit = limit
        self._limit_per_host = limit_per_host
        self._by_loop: dict[asyncio.AbstractEventLoop, _LoopSessions] = {}
        self._lock = threading.Lock()  # loops on several threads may share one client

    async def session(self, *, check_addresses: bool) -> aiohttp.ClientSession:
        """The session for the running loop; ``check_addresses`` selects the policy resolver."""
        return (await self._loop_sessions()).get(check_addresses)

    async def connection_slots(self) -> ConnectionSlots:
        """The running loop's connection slots (see the module docstring)."""
        return (await self._loop_sessions()).slots

    async def _loop_sessions(self) -> _LoopSessions:
        loop = asyncio.get_running_loop()
        with self._lock:
            sessions = self._by_loop.get(loop)
            is_new = sessions is None or sessions.closed
            if is_new:
                # Loops closed without shutting down their generators leave entries behind.
                for stale in [lp for lp in self._by_loop if lp.is_closed()]:
                    del self._by_loop[stale]
                sessions = self._by_loop[loop] = _LoopSessions(self._limit, self._limit_per_host)
        assert sessions is not None
        if is_new:
            # Starting this generator registers it with the loop, whose shutdown_asyncgens()
            # finalizes it on exit; its finally block closes the loop's sessions.
            guard = self._close_at_loop_shutdown(loop, sessions)
            sessions.shutdown_guard = guard
            await guard.__anext__()
        return sessions

    async def _close_at_loop_shutdown(
        self, loop: asyncio.AbstractEventLoop, sessions: _LoopSessions
    ) -> AsyncIterator[None]:
        try:
            yield
        finally:
            with self._lock:
                if self._by_loop.get(loop) is sessions:
                    del self._by_loop[loop]
            await sessions.close()

    async def close(self) -> None:
        """Close the running loop's sessions now; later downloads open new ones."""
        loop = asyncio.get_running_loop()
        with self._lock:
            sessions = self._by_loop.pop(loop, None)
        if sessions is not None:
            await sessions.close()


_default_client: MediaHTTPClient | None = None
_default_lock = threading.Lock()


def default_http_client() -> MediaHTTPClient:
    """The process-wide client that connectors use unless given their own."""
    global _default_client
    with _default_lock:
        if _default_client is None:
            _default_client = MediaHTTPClient()
        return _default_client


__all__ = [
    "DEFAULT_LIMIT",
    "DEFAULT_LIMIT_PER_HOST",
    "MediaHTTPClient",
    "default_http_client",
    "env_proxy_for",
]
