from django.apps import AppConfig


class TiffinConfig(AppConfig):
    name = "tiffin"
    verbose_name = "Tiffin"

    def ready(self) -> None:
        from tiffin import checks  # noqa: F401  (registers the system checks)
