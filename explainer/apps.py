from django.apps import AppConfig


class ExplainerConfig(AppConfig):
    name = "explainer"
    verbose_name = "Cron explainer"
