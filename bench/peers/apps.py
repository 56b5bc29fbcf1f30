from django.apps import AppConfig


class PeersConfig(AppConfig):
    """Installed by bench/peers/settings.py only, so procrastinate's Django integration
    finds the task in bench/peers/tasks.py (its autodiscovery looks in installed apps)."""

    name = "bench.peers"
    label = "bench_peers"
