"""Which network addresses a media fetch may connect to, and the resolver that enforces it.

A URL from a request must not reach the serving host's own network: loopback, private ranges,
link-local (cloud metadata at 169.254.169.254 lives there), carrier-grade NAT, multicast, reserved
space, and the same targets smuggled inside IPv6 (IPv4-mapped, IPv4-compatible, 6to4, Teredo,
NAT64). Checking a hostname once and letting the HTTP client resolve it again would let DNS
rebinding answer differently the second time, so :class:`PolicyResolver` is the resolver the
client connects through: it checks every address a lookup returns and hands back only those,
which are then the addresses connected to.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

from aiohttp.abc import AbstractResolver, ResolveResult

from mediaref.media._transport.errors import AddressRefusedError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64_PREFIX = ipaddress.ip_network("64:ff9b::/96")
_IPV4_SPACE = 1 << 32
# What getaddrinfo hands back is already numeric; these flags tell the connector not to look it up.
_NUMERIC_FLAGS = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries to an IPv4 host, if it carries one."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64_PREFIX or int(address) < _IPV4_SPACE:
        # NAT64 and the deprecated IPv4-compatible form (::a.b.c.d) keep it in the low 32 bits.
        return ipaddress.IPv4Address(int(address) & (_IPV4_SPACE - 1))
    return None


def is_public_address(address: IPAddress) -> bool:
    """True for a globally routable unicast address; False for anything local or special."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id:
            return False
        inner = _embedded_ipv4(address)
        if inner is not None:
            return is_public_address(inner)
    # is_global already excludes private, loopback, link-local, shared (100.64/10), reserved and
    # documentation ranges; multicast can be "global" yet is never a media origin.
    return address.is_global and not address.is_multicast


def parse_ip_literal(host: str) -> IPAddress | None:
    """The address when ``host`` is an IP literal (brackets allowed), else None."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def check_address(host: str, address: IPAddress) -> None:
    if not is_public_address(address):
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
    "IPAddress",
    "PolicyResolver",
    "check_address",
    "is_public_address",
    "parse_ip_literal",
    "resolve_public",
]
