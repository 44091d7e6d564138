"""Which http(s) URLs may be fetched; checked on the requested URL and again on every redirect hop.

aiohttp parses URLs with yarl, so yarl's reading is the one that decides where a request goes.
Python's ``urllib.parse`` must read the same scheme, host and port, or the URL is rejected: a URL
that two parsers read differently (``http://a.com\\@b.com``, stray control characters) is how
allow-lists are slipped past. Hosts are compared in one canonical form — lowercase, IDNA-encoded
as yarl sends it, without trailing dots, IPv6 compressed — on both sides of the allow-list.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from yarl import URL

from mediaref.media._transport import addresses
from mediaref.media._transport.errors import BadResponseError, RefusedError

HTTP_SCHEMES = frozenset({"http", "https"})

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
_BACKSLASH_OR_SPACE = re.compile(r"[\\\s]")  # \s: every str.isspace() character
# A host whose last label is a number is an IPv4 address in some parser's eyes (127.1, 0x7f.1,
# 2130706433); only the canonical dotted quad is accepted, so every layer reads the same address.
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$", re.IGNORECASE)


@functools.lru_cache(maxsize=1024)
def canonical_host(host: str) -> str:
    """``host`` as it goes on the wire: lowercase, IDNA, no trailing dots, IPv6 compressed."""
    bare = host.strip("[]").rstrip(".").lower()
    literal = addresses.parse_ip_literal(bare)
    if literal is not None:
        return literal.compressed
    return URL.build(scheme="http", host=bare).raw_host or ""


@functools.lru_cache(maxsize=1024)
def _ip_literal(canonical: str) -> addresses.IPAddress | None:
    return addresses.parse_ip_literal(canonical)


@dataclass(frozen=True)
class URLPolicy:
    """The per-connector rules every hop is held to."""

    allowed_domains: frozenset[str] | None  # canonical hosts; None allows any domain
    allow_private_ips: bool

    @classmethod
    def build(cls, allowed_domains: Iterable[str] | None, *, allow_private_ips: bool) -> URLPolicy:
        # An empty list allows every domain, as in vLLM, where only a non-empty list restricts.
        domains = frozenset(canonical_host(d) for d in allowed_domains or ())
        return cls(domains or None, allow_private_ips)

    def fingerprint(self) -> str:
        """A stable text naming every rule, for keying what was fetched under this policy."""
        domains = "*" if self.allowed_domains is None else ",".join(sorted(self.allowed_domains))
        return f"private={int(self.allow_private_ips)};domains={domains}"


def _check_parsers_agree(raw: str, url: URL) -> None:
    split = urlsplit(raw)
    if _BACKSLASH_OR_SPACE.search(split.netloc):
        raise ValueError("backslash or whitespace in the URL's authority")
    if split.netloc:
        if split.scheme and split.scheme.lower() != url.scheme:
            raise ValueError("URL parsers disagree on its scheme")
        if canonical_host(split.hostname or "") != canonical_host(url.raw_host or ""):
            raise ValueError("URL parsers disagree on its host")
        if split.port != url.explicit_port:
            raise ValueError("URL parsers disagree on its port")


def _yarl_url(text: str) -> URL:
    try:
        return URL(text)
    except (IndexError, TypeError) as exc:
        # yarl's own bugs on hostile input ("http://[::1]@" raises IndexError) are malformed URLs.
        raise ValueError(f"unparsable URL ({type(exc).__name__})") from None


def parse_http_url(raw: str) -> URL:
    """Parse an http(s) URL as aiohttp will, rejecting one that urllib reads differently."""
    if _CONTROL_CHARS.search(raw):
        raise ValueError("control characters in the URL")
    url = _yarl_url(raw)
    if url.scheme not in HTTP_SCHEMES:
        raise RefusedError(f"scheme {url.scheme!r} is not http or https")
    if not url.raw_host:
        raise ValueError("the URL has no host")
    _check_parsers_agree(raw, url)
    return url


def resolve_redirect(current: URL, location: str) -> URL:
    """The next hop for a ``Location`` header, held to the same parsing rules as a request URL.

    A hop off http(s) is refused by policy (``RefusedError``); a ``Location`` that does not parse,
    has no host or reads differently to the two parsers is the origin's fault
    (``BadResponseError``), not the client's.
    """
    shown = location[:200]
    if _CONTROL_CHARS.search(location):
        raise RefusedError("redirect Location contains control characters")
    try:
        target = current.join(_yarl_url(location))
        if target.scheme not in HTTP_SCHEMES:
            raise RefusedError(f"redirect to {target.scheme!r} URL {shown!r}")
        if not target.raw_host:
            raise ValueError("no host")
        _check_parsers_agree(location, target)
    except (ValueError, UnicodeError) as exc:  # yarl's and IDNA's too
        raise BadResponseError(f"malformed redirect Location {shown!r}: {exc}") from None
    return target


def check_url(url: URL, policy: URLPolicy) -> None:
    """Apply the domain allow-list and, for IP-literal hosts, the address policy to one hop.

    Hostnames are checked against the address policy when they are resolved (see
    :class:`~mediaref.media._transport.addresses.PolicyResolver`); literals never are, so here.
    """
    host = canonical_host(url.raw_host or "")
    literal = _ip_literal(host)
    if literal is None and _NUMERIC_LABEL.match(host.rsplit(".", 1)[-1]):
        raise ValueError(f"host {host!r} is not a canonical IP address")
    if policy.allowed_domains is not None and host not in policy.allowed_domains:
        raise RefusedError(f"domain {host!r} of {url} is not in allowed_media_domains")
    if literal is not None and not policy.allow_private_ips:
        addresses.check_address(host, literal)


__all__ = [
    "HTTP_SCHEMES",
    "URLPolicy",
    "canonical_host",
    "check_url",
    "parse_http_url",
    "resolve_redirect",
]
