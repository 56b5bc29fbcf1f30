"""``simulate --strategy`` / ``--compare`` refuse bad input with a message before they
touch the database: even with ``--reset``, a refused run forgets nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from simulation.models import StrategyRun

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
