"""The database-counted rate cap (tiffin.ratelimit): per client and minute, a late
request from a slower clock counts in the current minute, old minutes are pruned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tiffin.models import RequestCount
from tiffin.ratelimit import rate_exceeded

pytestmark = pytest.mark.django_db

T = datetime(2027, 3, 1, 12, 0, 30, tzinfo=UTC)


def _ask(client: str, at: datetime, *, limit: int = 2) -> bool:
    return rate_exceeded(cap="test", client=client, limit=limit, now=at)


def test_each_client_has_its_own_count_for_the_minute():
    assert [_ask("a", T) for _ in range(3)] == [False, False, True]
    assert _ask("b", T) is False
    assert _ask("a", T + timedelta(seconds=29)) is True  # still 12:00
    assert _ask("a", T + timedelta(seconds=30)) is False  # 12:01: a new count


def test_a_request_stamped_by_a_slower_clock_counts_in_the_newer_minute():
    _ask("a", T + timedelta(minutes=1))
    _ask("a", T)  # a server whose clock is a minute behind
    assert RequestCount.objects.get(bucket="test:a").count == 2
    assert _ask("a", T + timedelta(minutes=1)) is True


def test_the_first_request_of_a_minute_prunes_the_minutes_that_are_over():
    for client in ["a", "b", "c"]:
        _ask(client, T)
    _ask("a", T + timedelta(minutes=1))
    assert list(RequestCount.objects.values_list("bucket", flat=True)) == ["test:a"]
