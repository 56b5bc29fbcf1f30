from django.apps import AppConfig


class PayoutsConfig(AppConfig):
    name = "payouts"
    verbose_name = "Payouts"
