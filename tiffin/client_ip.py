"""The address of the client a request came from, for the login lockout and rate caps.

``REMOTE_ADDR`` is the connection's peer. Behind a reverse proxy that peer is the proxy,
the same for every visitor, so the client is read from ``X-Forwarded-For`` instead; but
any client can send that header, so it is believed only from the proxies named in
``TRUSTED_PROXIES`` (addresses or networks). Each proxy appends the address it received
the request from, so the header is read from the right:

1. the peer is not a trusted proxy (or none is named): the peer is the client, and the
   header is ignored;
2. otherwise walk the header's addresses from the right, skipping trusted proxies: the
   first one that is not trusted is the client (what a client wrote to the left of it is
   its own claim, never believed);
3. an entry that is not an address stops the walk: the nearest trusted hop is answered
   (a proxy passing on garbage is charged for it, never the garbage itself);
4. every hop trusted: the leftmost address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from django.conf import settings
from django.http import HttpRequest

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def client_ip_address(request: HttpRequest) -> str:
    """The client's address for ``request`` under ``settings.TRUSTED_PROXIES``."""
    return client_ip_from(
        peer=request.META.get("REMOTE_ADDR", ""),
        forwarded_for=request.META.get("HTTP_X_FORWARDED_FOR", ""),
        trusted=settings.TRUSTED_PROXIES,
    )


def client_ip_from(*, peer: str, forwarded_for: str, trusted: Sequence[Network]) -> str:
    """The numbered rules of this module, on plain values (the peer, the header's text)."""
    nearest = _address(peer)
    if nearest is None or not _trusted(nearest, trusted):
        return peer  # 1.
    hops = [hop.strip() for hop in forwarded_for.split(",") if hop.strip()]
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:
            return str(nearest)  # 3.
        nearest = address
        if not _trusted(address, trusted):
            return str(address)  # 2.
    return str(nearest)  # 4. (the peer itself when there is no header)


def _address(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _trusted(address: Address, trusted: Sequence[Network]) -> bool:
    return any(address in network for network in trusted)
