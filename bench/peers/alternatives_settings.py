"""Settings of the real tools' processes in the alternatives table
(bench/peers/alternatives.py): the project's settings, plus

- procrastinate's Django integration, autodiscovering ``alternatives_tasks`` (the periodic
  probe) instead of ``tasks``;
- django-q2 as a team running its own schedules configures it: the scheduler on (the
  project turns it off: Tiffin's own scheduler claims the ticks), its defaults otherwise,
  and every duration a team sets in seconds divided by the deployment's speed
  (``TIFFIN_CLOCK_SPEED``): ``retry``, the broker's lease on a task, is the lease every
  strategy with one gets (90 simulated seconds), and ``timeout``, after which a worker
  kills its task, is 80 (the docs: retry "should always be larger than timeout"); the guard loop that runs the scheduler
  every 30 cycles keeps its default of every 15 simulated seconds.

The project's INSTALLED_APPS and Q_CLUSTER are not touched.
"""

import os

from tiffin.settings import *  # noqa: F403
from tiffin.settings import INSTALLED_APPS as PROJECT_INSTALLED_APPS

_SPEED = float(os.environ.get("TIFFIN_CLOCK_SPEED", "1"))
_LEASE_SECONDS = 90  # simulation.strategies.LEASE_SECONDS (not imported: settings load first)

INSTALLED_APPS = [*PROJECT_INSTALLED_APPS, "procrastinate.contrib.django", "bench.peers.apps.PeersConfig"]
PROCRASTINATE_AUTODISCOVER_MODULE_NAME = "alternatives_tasks"

Q_CLUSTER = {
    "name": "tiffin-alternatives",
    "orm": "default",
    "workers": int(os.environ.get("Q_WORKERS", "2")),
    # Its docs: retry "should always be larger than timeout", which kills a task running longer.
    "timeout": max(1, round((_LEASE_SECONDS - 10) / _SPEED)),
    "retry": max(2, round(_LEASE_SECONDS / _SPEED)),
    "guard_cycle": 0.5 / _SPEED,
    "poll": 0.2 / _SPEED,
    "scheduler": True,
    "catch_up": True,
}
