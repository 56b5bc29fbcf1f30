"""The one time-zone database every server reads: the pinned ``tzdata`` package.

``zoneinfo`` looks for zone files on the operating system first (``/usr/share/zoneinfo``,
or ``PYTHONTZPATH``) and falls back to the ``tzdata`` package only when it finds none, so
two servers built from different images can disagree about where a business week starts
(a zone whose rules changed in one database and not the other). Business weeks decide
which hours a payout covers, so every process reads the same data: ``use_pinned_tzdata``
empties zoneinfo's search path, which leaves the pinned package as its only source. It
runs at the top of ``tiffin.settings``, before any zone is loaded; a tz database upgrade
is then a requirements change, deployed like any other.

A restaurant's zone must be a canonical name of that database (a ``Zone`` line of its
``tzdata.zi``, with an area: ``Europe/London``, ``Etc/UTC``), or ``UTC``: never a link
kept for compatibility (``Asia/Calcutta``), ``localtime`` (whatever the server's
``/etc/localtime`` says), ``posixrules``, ``Factory`` or a bare rule set such as
``EST5EDT``.
"""

from __future__ import annotations

import zoneinfo
from functools import cache
from importlib import resources

import tzdata  # type: ignore[import-untyped]

# The IANA release of the pinned package (2026f): recorded on every payout.
TZDATA_VERSION: str = tzdata.IANA_VERSION
# Accepted besides the canonical names: the one link everyone writes.
_ALIASES = frozenset({"UTC"})


def use_pinned_tzdata() -> None:
    """Make zoneinfo read only the pinned tzdata package, whatever the OS or
    PYTHONTZPATH holds, and forget any zone already loaded from elsewhere."""
    zoneinfo.reset_tzpath(to=())
    zoneinfo.ZoneInfo.clear_cache()


@cache
def canonical_zones() -> frozenset[str]:
    """The zone names a restaurant may use (see the module docstring)."""
    table = resources.files("tzdata").joinpath("zoneinfo", "tzdata.zi").read_text(encoding="utf-8")
    zones = {line.split()[1] for line in table.splitlines() if line.startswith("Z ")}
    return frozenset(name for name in zones if "/" in name) | _ALIASES
