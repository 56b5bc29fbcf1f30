from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling"

    def ready(self) -> None:
        from importlib import import_module

        from django.conf import settings
        from django.utils.module_loading import autodiscover_modules

        from scheduling import checks  # noqa: F401  (registers the system checks)
        from scheduling.metrics import metrics_process_setup, metrics_series_declare
        from scheduling.registry import registry

        # Before anything counts: the multiprocess directory, when metrics are on.
        metrics_process_setup()

        # Each app declares its jobs in its own jobs.py; importing them registers them.
        autodiscover_modules("jobs")
        # Extra job modules named by the environment (the failure scenarios declare
        # test-only jobs this way in the processes they start).
        for module in settings.SCHEDULER_EXTRA_JOB_MODULES:
            import_module(module)
        metrics_series_declare(job_names=[job.name for job in registry.all()])
