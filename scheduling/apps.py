from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        from scheduling import checks  # noqa: F401  (registers the system checks)

        # Each app declares its jobs in its own jobs.py; importing them registers them.
        autodiscover_modules("jobs")
