"""The one outbound HTTP request the engine makes: a POST with a short timeout, whose
failure is reported to the caller instead of raised (the alert webhook and the heartbeat
pings log it; neither may fail a run or a check)."""

from __future__ import annotations

import http.client
import urllib.request

# What a failed delivery can raise: connection and HTTP errors (URLError and HTTPError
# are OSErrors), a malformed response, an unusable URL.
DELIVERY_ERRORS = (OSError, http.client.HTTPException, ValueError)


def post(url: str, *, body: bytes, headers: dict[str, str], timeout: float) -> Exception | None:
    """POST ``body`` to ``url`` and read the answer; None when it answered 2xx or 3xx,
    else the error that stopped it."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
    except DELIVERY_ERRORS as exc:
        return exc
    return None
