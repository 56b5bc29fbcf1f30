from django.apps import AppConfig


class TransfersConfig(AppConfig):
    name = "transfers"
    verbose_name = "Transfers"

    def ready(self) -> None:
        from transfers import metrics  # noqa: F401 (declares the transfers' gauges for /metrics)
