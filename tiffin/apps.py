from django.apps import AppConfig
from django.db.backends.signals import connection_created


class TiffinConfig(AppConfig):
    name = "tiffin"
    verbose_name = "Tiffin"

    def ready(self) -> None:
        from tiffin import checks, fast_pg_timestamps  # noqa: F401  (checks: registers the system checks)

        connection_created.connect(fast_pg_timestamps.install, dispatch_uid="tiffin.fast_pg_timestamps")
