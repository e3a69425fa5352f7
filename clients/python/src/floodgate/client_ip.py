"""The client's IP address, believing forwarding headers only from trusted proxies: the walk of the
server's ``floodgate_tower::ClientIp`` (the one walk of the project), rule for rule.

1. If the peer is not in a trusted network, the peer is the client; forwarding headers are ignored
   entirely (anyone can write them).
2. Otherwise the addresses of the configured header (``X-Forwarded-For`` by default, or RFC 7239
   ``Forwarded``) are read **from the right** (the hop closest to us first; repeated header lines
   count as one list in order). Each address in a trusted network is skipped; the first that is not
   is the client. The left-most values, which the client itself may have written, are therefore
   never believed unless every hop to their right is trusted.
3. A malformed entry (not an IP, ``unknown``, an obfuscated ``_node``, an empty list item, a
   ``Forwarded`` element without exactly one ``for=``, a value that is not visible ASCII) stops the
   walk: the client is the last address reached, which is a trusted hop (or the peer itself).
4. If every address is trusted, the left-most one is the client.

Accepted entries: ``192.0.2.1``, ``192.0.2.1:8080``, ``2001:db8::1``, ``[2001:db8::1]``,
``[2001:db8::1]:4711``, and in ``Forwarded`` the same inside quotes. IPv4-mapped IPv6 addresses
(``::ffff:192.0.2.1``) count as their IPv4 address, for the result and for the trust check.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from typing import Literal

from floodgate.errors import ConfigError

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
ProxyHeader = Literal["x-forwarded-for", "forwarded"]

_OBFUSCATED_PORT = re.compile(r"_[A-Za-z0-9._-]+")
_PORT = re.compile(r"\+?[0-9]+")


def _canonical(ip: IpAddress) -> IpAddress:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _parse_ip(text: str) -> IpAddress | None:
    # Python takes a scope (`fe80::1%eth0`); the server's parser does not.
    if "%" in text:
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _is_port(port: str) -> bool:
    if _PORT.fullmatch(port):
        return int(port) <= 65535
    return _OBFUSCATED_PORT.fullmatch(port) is not None


def parse_node(node: str) -> IpAddress | None:
    """An address as proxies write it: ``v4``, ``v4:port``, ``v6``, ``[v6]``, ``[v6]:port``."""
    node = node.strip()
    if node.startswith("["):
        inside, bracket, after = node[1:].partition("]")
        if not bracket or not (after == "" or (after.startswith(":") and _is_port(after[1:]))):
            return None
        ip = _parse_ip(inside)
        return _canonical(ip) if isinstance(ip, ipaddress.IPv6Address) else None
    ip = _parse_ip(node)
    if ip is not None:
        return _canonical(ip)
    host, colon, port = node.rpartition(":")
    if not colon or not _is_port(port):
        return None
    ip = _parse_ip(host)
    return ip if isinstance(ip, ipaddress.IPv4Address) else None


def _split_unquoted(text: str, sep: str) -> list[str]:
    """Splits at ``sep`` outside double-quoted strings (a backslash escapes inside quotes)."""
    parts: list[str] = []
    start = 0
    quoted = escaped = False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif quoted and ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == sep and not quoted:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _forwarded_for(element: str) -> IpAddress | None:
    """The node of a ``Forwarded`` element's ``for=``; ``None`` when it has none, several, or one
    that is not an IP address (or any parameter without ``=``)."""
    found: IpAddress | None = None
    for pair in _split_unquoted(element, ";"):
        name, equals, value = pair.partition("=")
        if not equals:
            return None
        if name.strip().lower() != "for":
            continue
        if found is not None:
            return None
        value = value.strip()
        if value.startswith('"'):
            inner = value[1:]
            if not inner.endswith('"'):
                return None
            inner = inner[:-1]
            if '"' in inner or "\\" in inner:
                return None
            value = inner
        node = parse_node(value)
        if node is None:
            return None
        found = node
    return found


def _visible_ascii(value: str) -> bool:
    return all(ch == "\t" or " " <= ch <= "~" for ch in value)


def _network(cidr: str) -> IpNetwork:
    net = ipaddress.ip_network(cidr.strip(), strict=False)
    # A mapped IPv4 network (`::ffff:10.0.0.0/104`) is trusted as the IPv4 network it names.
    if isinstance(net, ipaddress.IPv6Network) and net.prefixlen >= 96:
        mapped = net.network_address.ipv4_mapped
        if mapped is not None:
            return ipaddress.IPv4Network((mapped, net.prefixlen - 96), strict=False)
    return net


class ClientIp:
    """The walk (see the module's documentation) over ``trusted`` networks: CIDRs (``10.0.0.0/8``,
    ``fd00::/8``) or single addresses; one that is neither raises :class:`~floodgate.ConfigError`
    naming it. With none trusted, the peer is always the client."""

    def __init__(self, trusted: Iterable[str] = (), header: ProxyHeader = "x-forwarded-for") -> None:
        if isinstance(trusted, str):
            raise ConfigError("trusted_proxies", f"must be a list of CIDRs, got the string {trusted!r}")
        networks: list[IpNetwork] = []
        for cidr in trusted:
            try:
                networks.append(_network(cidr))
            except (ValueError, TypeError) as error:
                raise ConfigError("trusted_proxies", f"{cidr!r} is not a CIDR or an address: {error}") from None
        if header not in ("x-forwarded-for", "forwarded"):
            raise ConfigError("forwarded_header", f"must be 'x-forwarded-for' or 'forwarded', got {header!r}")
        self.trusted: tuple[IpNetwork, ...] = tuple(networks)
        self.header: ProxyHeader = header

    def is_trusted(self, ip: IpAddress) -> bool:
        """Whether ``ip`` is a trusted proxy."""
        ip = _canonical(ip)
        return any(ip in net for net in self.trusted)

    def resolve(self, peer: str | None, values: Sequence[str]) -> str | None:
        """The client of a request from ``peer`` whose forwarding header had ``values`` (its lines
        in order); ``None`` when the peer is not an IP address (a Unix socket, a test client)."""
        if peer is None:
            return None
        ip = _parse_ip(peer)
        if ip is None:
            return None
        reached = _canonical(ip)
        if not self.trusted or not self.is_trusted(reached):
            return str(reached)
        for value in reversed(values):
            if not _visible_ascii(value):
                return str(reached)
            entries = (
                value.split(",")
                if self.header == "x-forwarded-for"
                else [_forwarded_for(e) for e in _split_unquoted(value, ",")]
            )
            for entry in reversed(entries):
                hop = parse_node(entry) if isinstance(entry, str) else entry
                if hop is None:
                    return str(reached)
                reached = hop
                if not self.is_trusted(hop):
                    return str(hop)
        return str(reached)
