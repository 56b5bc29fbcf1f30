"""Settings of the procrastinate peer's placers and worker: the project's settings with
procrastinate's Django integration (its tables come from its own migrations) and the
benchmark's task app installed. The project's INSTALLED_APPS are not touched."""

from tiffin.settings import *  # noqa: F403
from tiffin.settings import INSTALLED_APPS as PROJECT_INSTALLED_APPS

INSTALLED_APPS = [*PROJECT_INSTALLED_APPS, "procrastinate.contrib.django", "bench.peers.apps.PeersConfig"]
