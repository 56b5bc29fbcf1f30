"""``manage.py worker`` starts its django-q2 cluster again when a start fails (the sentinel
died, say because its first database connection was terminated), and gives up after its
attempts with the last error. A stand-in cluster fails a set number of times."""

from __future__ import annotations

import pytest

from scheduling.management.commands.worker import CLUSTER_START_ATTEMPTS, cluster_start


class Flaky:
    made = 0

    def __init__(self, failures: int) -> None:
        self.failures = failures

    def start(self) -> int:
        Flaky.made += 1
        if Flaky.made <= self.failures:
            raise RuntimeError(f"Q Cluster x failed to start: sentinel exited with code 1 (start {Flaky.made})")
        return 4242


@pytest.fixture(autouse=True)
def fresh() -> None:
    Flaky.made = 0


def test_a_failed_start_is_tried_again_after_a_growing_pause_and_the_started_cluster_returned(caplog):
    pauses: list[float] = []
    cluster = cluster_start(lambda: Flaky(failures=2), pause=1.0, sleep=pauses.append)
    assert Flaky.made == 3 and pauses == [1.0, 2.0]
    assert cluster.start() == 4242  # the one that started
    assert [r.levelname for r in caplog.records].count("WARNING") == 2
    assert "attempt 1 of 5" in caplog.text


def test_after_its_last_attempt_the_last_error_is_raised():
    pauses: list[float] = []
    with pytest.raises(RuntimeError, match=f"start {CLUSTER_START_ATTEMPTS}"):
        cluster_start(lambda: Flaky(failures=99), sleep=pauses.append)
    assert Flaky.made == CLUSTER_START_ATTEMPTS and len(pauses) == CLUSTER_START_ATTEMPTS - 1


def test_a_first_start_that_works_is_not_repeated():
    cluster_start(lambda: Flaky(failures=0), sleep=lambda seconds: pytest.fail("no pause expected"))
    assert Flaky.made == 1
