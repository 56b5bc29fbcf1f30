"""Heartbeat pings in the style of healthchecks.io: the outside half of the dead-man's switch.

A job may have a ping URL (``SCHEDULER_PING_URL_<JOB_NAME_UPPER_SNAKE>``, read into
``settings.SCHEDULER_PING_URLS``). After each success the worker POSTs to it; after a
run dies, to ``<url>/fail`` with the error as the body. The outside monitor expects a
ping every period, so it notices when everything stops, this application's own check
included. The request happens after the transition commits (a rolled-back success is
no success), with a short timeout; a ping that fails is logged, never fatal.
"""

from __future__ import annotations

import logging
import re

from django.conf import settings
from django.db import transaction

from scheduling import outbound

logger = logging.getLogger("scheduling.pings")

# healthchecks.io keeps the first 100 kB of a ping body; an error message needs far less.
BODY_LIMIT = 10_000


def ping_key(job_name: str) -> str:
    """The settings key of a job's ping URL: weekly-payouts -> WEEKLY_PAYOUTS."""
    return re.sub(r"[^A-Za-z0-9]+", "_", job_name).strip("_").upper()


def ping_url(*, job_name: str) -> str | None:
    url: str | None = settings.SCHEDULER_PING_URLS.get(ping_key(job_name))
    return url or None


def job_ping_on_commit(*, job_name: str, failed: bool, body: str = "") -> None:
    """Ping the job's URL once the current transaction commits (at once outside one)."""
    if ping_url(job_name=job_name) is None:
        return
    transaction.on_commit(lambda: job_ping(job_name=job_name, failed=failed, body=body))


def job_ping(*, job_name: str, failed: bool, body: str = "") -> bool:
    """POST to the job's URL (``/fail`` appended for a death). True if it answered 2xx/3xx."""
    base = ping_url(job_name=job_name)
    if base is None:
        return False
    url = f"{base.rstrip('/')}/fail" if failed else base
    error = outbound.post(
        url,
        body=body[:BODY_LIMIT].encode(),
        headers={"User-Agent": "tiffin-pings"},
        timeout=settings.SCHEDULER_PING_TIMEOUT_SECONDS,
    )
    if error is not None:
        # The URL is a secret (anyone holding it can ping): log the job, not the URL.
        logger.warning("ping for %s (%s) failed: %s", job_name, "fail" if failed else "success", error)
    return error is None
