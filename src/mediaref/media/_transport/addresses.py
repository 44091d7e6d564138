"""Which network addresses a media fetch may connect to, and the resolver that enforces it.

A URL from a request must not reach the serving host's own network: loopback, private ranges,
link-local (cloud metadata at 169.254.169.254 lives there), carrier-grade NAT, multicast, reserved
and documentation space, and the same targets smuggled inside IPv6 translation prefixes.

The verdict does not rest on :mod:`ipaddress` alone: ``is_global`` has changed between Python
versions (``192.0.0.0/24``, ``fec0::/10``, ``3fff::/20`` and ``64:ff9b:1::/48`` all read as
global on 3.11), so an explicit table of refused networks, taken from the IANA IPv4 and IPv6
special-purpose address registries, is checked first and ``is_global`` after it. An address is
public only if neither refuses it. An IPv6 address in a prefix that carries an IPv4 address to an
IPv4 host (IPv4-mapped, SIIT, NAT64, 6to4, Teredo) is judged by the IPv4 address it carries.

Checking a hostname once and letting the HTTP client resolve it again would let DNS rebinding
answer differently the second time, so :class:`PolicyResolver` is the resolver the client connects
through: it checks every address a lookup returns and hands back only those, which are then the
addresses connected to. A refusal names the host but never the address it resolved to (that would
map the internal network for the client); the address goes to the debug log.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket

from aiohttp.abc import AbstractResolver, ResolveResult

from mediaref.media._transport.errors import AddressRefusedError

logger = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_net4 = ipaddress.IPv4Network
_net6 = ipaddress.IPv6Network

# IANA IPv4 Special-Purpose Address Registry, plus multicast and the reserved class E space.
# Every entry is refused whatever ``is_global`` says; a few (192.0.0.0/24 as a whole) hold
# addresses IANA marks globally reachable but that are anycast protocol services, never media.
REFUSED_IPV4: tuple[ipaddress.IPv4Network, ...] = (
    _net4("0.0.0.0/8"),  # "this network" (RFC 791); 0.0.0.0 reaches the local host on Linux
    _net4("10.0.0.0/8"),  # private (RFC 1918)
    _net4("100.64.0.0/10"),  # shared address space, carrier-grade NAT (RFC 6598)
    _net4("127.0.0.0/8"),  # loopback
    _net4("169.254.0.0/16"),  # link-local; cloud metadata services (RFC 3927)
    _net4("172.16.0.0/12"),  # private (RFC 1918)
    _net4("192.0.0.0/24"),  # IETF protocol assignments (RFC 6890): DS-Lite, NAT64 discovery...
    _net4("192.0.2.0/24"),  # documentation TEST-NET-1 (RFC 5737)
    _net4("192.88.99.0/24"),  # deprecated 6to4 relay anycast (RFC 7526)
    _net4("192.168.0.0/16"),  # private (RFC 1918)
    _net4("198.18.0.0/15"),  # benchmarking (RFC 2544)
    _net4("198.51.100.0/24"),  # documentation TEST-NET-2 (RFC 5737)
    _net4("203.0.113.0/24"),  # documentation TEST-NET-3 (RFC 5737)
    _net4("224.0.0.0/4"),  # multicast (RFC 5771)
    _net4("240.0.0.0/4"),  # reserved, and 255.255.255.255 limited broadcast (RFC 1112, 919)
)

# IANA IPv6 Special-Purpose Address Registry and the other non-unicast-global ranges.
REFUSED_IPV6: tuple[ipaddress.IPv6Network, ...] = (
    _net6("::/96"),  # unspecified, loopback and deprecated IPv4-compatible ::a.b.c.d (RFC 4291)
    _net6("64:ff9b:1::/48"),  # local-use NAT64 (RFC 8215): the operator's own translators
    _net6("100::/64"),  # discard-only (RFC 6666)
    _net6("2001:2::/48"),  # benchmarking (RFC 5180)
    _net6("2001:db8::/32"),  # documentation (RFC 3849)
    _net6("2001:10::/28"),  # deprecated ORCHID (RFC 4843)
    _net6("3fff::/20"),  # documentation (RFC 9637)
    _net6("5f00::/16"),  # SRv6 SIDs (RFC 9602)
    _net6("fc00::/7"),  # unique local (RFC 4193); fd00:ec2::254 is a cloud metadata address
    _net6("fe80::/10"),  # link-local
    _net6("fec0::/10"),  # deprecated site-local (RFC 3879)
    _net6("ff00::/8"),  # multicast
)

# The rest of 2001::/23 (IETF protocol assignments) is refused, but Teredo (2001::/32) inside it
# carries IPv4 addresses and is judged by them, like the other translation prefixes below.
_IETF_ASSIGNMENTS = _net6("2001::/23")
_TEREDO = _net6("2001::/32")
_NAT64 = _net6("64:ff9b::/96")  # well-known NAT64 prefix (RFC 6052): the low 32 bits
_SIIT = _net6("::ffff:0:0:0/96")  # IPv4-translated ::ffff:0:a.b.c.d (RFC 2765): the low 32 bits
_IPV4_MASK = (1 << 32) - 1

# What getaddrinfo hands back is already numeric; these flags tell the connector not to look it up.
_NUMERIC_FLAGS = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV


def embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...] | None:
    """The IPv4 addresses an IPv6 address carries to IPv4 hosts; None outside those prefixes."""
    if address.ipv4_mapped is not None:  # ::ffff:a.b.c.d
        return (address.ipv4_mapped,)
    if address in _NAT64 or address in _SIIT:
        return (ipaddress.IPv4Address(int(address) & _IPV4_MASK),)
    if address.sixtofour is not None:  # 2002:aabb:ccdd::/48
        return (address.sixtofour,)
    if address.teredo is not None:  # 2001::/32: (server, client); both are dialled on the way
        return address.teredo
    return None


def _is_refused_by_table(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv4Address):
        return any(address in network for network in REFUSED_IPV4)
    return address in _IETF_ASSIGNMENTS or any(address in network for network in REFUSED_IPV6)


def is_public_address(address: IPAddress) -> bool:
    """True for a globally routable unicast address; False for anything local or special."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id:
            return False
        carried = embedded_ipv4(address)
        if carried is not None:
            # The translator delivers to the carried address: that is the one to judge.
            return all(is_public_address(inner) for inner in carried)
    if _is_refused_by_table(address):
        return False
    # is_global as a second opinion: it also knows ranges the table may one day miss.
    return address.is_global and not address.is_multicast


def parse_ip_literal(host: str) -> IPAddress | None:
    """The address when ``host`` is an IP literal (brackets allowed), else None."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def check_address(host: str, address: IPAddress) -> None:
    if not is_public_address(address):
        if str(address) != host:
            logger.debug("media fetch: %s resolved to non-public address %s", host, address)
        raise AddressRefusedError(host, address)


async def resolve_public(
    host: str, port: int, family: int = socket.AF_UNSPEC
) -> list[ResolveResult]:
    """Resolve ``host`` and return its addresses, refusing the host if any address is not public.

    One non-public answer refuses the whole host rather than being filtered out: a name that maps
    to an internal address at all is either misconfigured or an attack, and failing loudly says so.
    """
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, family=family)
    results: list[ResolveResult] = []
    for info_family, _, proto, _, sockaddr in infos:
        if info_family not in (socket.AF_INET, socket.AF_INET6):
            continue
        # A scoped IPv6 answer ("fe80::1%eth0") is link-local, which the check refuses anyway.
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        check_address(host, address)
        results.append(
            ResolveResult(
                hostname=host,
                host=str(address),
                port=int(sockaddr[1]),
                family=info_family,
                proto=proto,
                flags=_NUMERIC_FLAGS,
            )
        )
    if not results:
        raise socket.gaierror(socket.EAI_NONAME, f"{host} has no IPv4 or IPv6 address")
    return results


class PolicyResolver(AbstractResolver):
    """An aiohttp resolver that only ever returns public addresses.

    aiohttp connects to exactly the addresses a resolver returns, so the check and the connection
    see the same answer. IP-literal hosts skip resolvers in aiohttp; the URL policy checks those.
    """

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return await resolve_public(host, port, family)

    async def close(self) -> None:
        return None


__all__ = [
    "REFUSED_IPV4",
    "REFUSED_IPV6",
    "IPAddress",
    "PolicyResolver",
    "check_address",
    "embedded_ipv4",
    "is_public_address",
    "parse_ip_literal",
    "resolve_public",
]
