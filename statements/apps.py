from django.apps import AppConfig


class StatementsConfig(AppConfig):
    name = "statements"
    verbose_name = "Statements"

    def ready(self) -> None:
        from statements import checks  # noqa: F401  (registers the system checks)
