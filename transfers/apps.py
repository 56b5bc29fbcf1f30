from django.apps import AppConfig


class TransfersConfig(AppConfig):
    name = "transfers"
    verbose_name = "Transfers"
