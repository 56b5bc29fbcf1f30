from django.urls import URLPattern, path

from scheduling import views

urlpatterns: list[URLPattern] = [
    path("healthz", views.healthz, name="healthz"),
    path("cron/", views.cron_explainer_public, name="cron_explainer"),
    path("metrics", views.metrics, name="metrics"),
]
