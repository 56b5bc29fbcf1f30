from django.apps import AppConfig


class StatementsConfig(AppConfig):
    name = "statements"
    verbose_name = "Statements"
