"""Settings of the reference process in bench/cancellations.py: the project's settings
with django-q2's own scheduler switched on, so its one-off (ONCE) Schedules run.

The project turns that scheduler off (tiffin/settings.py) because its scheduling loop
replaces it; the benchmark runs django-q2's as shipped, to compare the two."""

from tiffin.settings import *  # noqa: F403
from tiffin.settings import Q_CLUSTER as PROJECT_Q_CLUSTER

Q_CLUSTER = {**PROJECT_Q_CLUSTER, "scheduler": True}
