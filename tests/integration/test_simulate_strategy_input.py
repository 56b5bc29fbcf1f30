"""``simulate --strategy`` / ``--compare`` refuse bad input with a message before they
touch the database: even with ``--reset``, a refused run forgets nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from simulation.models import StrategyRun
from simulation.strategy_runner import cron_line_fires_from

START = "2027-03-07T20:00:00Z"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--strategy", "every-server", "--duration", "10m"], "the faults need at least 0:20:00"),
        (["--strategy", "every-server", "--strategy-faults", "long-run,nap"], "give all, none, or a comma list"),
        (["--compare", "every-server,cron"], "give all, or a comma list of every-server"),
        (["--compare", "--pooler"], "--pooler goes with --strategy"),
        (["--strategy", "claim", "--compare"], "not both"),
        (["--strategy", "claim", "--crash-worker"], "use --strategy-faults"),
        (["--strategy", "advisory-lock", "--pooler", "--pooler-connections", "0"], "give 1 to 100"),
        (["--strategy", "advisory-lock", "--pooler-connections", "1"], "goes with --pooler or --compare"),
    ],
)
def test_bad_strategy_options_are_refused_and_nothing_is_reset(arguments, message):
    kept = StrategyRun.objects.create(
        strategy="every-server",
        scheduled_for=datetime(2027, 3, 7, 20, 0, tzinfo=UTC),
        server="server-1",
        started_at=datetime(2027, 3, 7, 20, 0, tzinfo=UTC),
    )
    with pytest.raises(CommandError, match=message):
        call_command("simulate", "--start", START, "--reset", *arguments, stdout=StringIO(), stderr=StringIO())
    assert list(StrategyRun.objects.all()) == [kept]


@pytest.mark.django_db
def test_a_cron_line_says_which_instant_it_fires_from_and_that_is_never_before_its_boot():
    # simulate reads it back (cron_line_fires_from): a line that booted after the window's
    # start would never fire the ticks before its boot, so its boot counts as too slow.
    before = datetime.now(UTC)
    late, on_time = StringIO(), StringIO()
    # With --until at the instant it fires from, each line has nothing to fire and exits.
    call_command(
        "strategy_cron",
        "--strategy",
        "every-server",
        "--server",
        "s-1",
        "--since",
        START,
        "--until",
        START,
        stdout=late,
    )
    booted_after = cron_line_fires_from(late.getvalue())
    assert booted_after is not None and booted_after >= before
    future = "2099-01-04T10:00:00+00:00"
    call_command(
        "strategy_cron",
        "--strategy",
        "every-server",
        "--server",
        "s-2",
        "--since",
        future,
        "--until",
        future,
        stdout=on_time,
    )
    assert cron_line_fires_from(on_time.getvalue()) == datetime.fromisoformat(future)
    assert cron_line_fires_from("s-3: every-server: starting") is None
