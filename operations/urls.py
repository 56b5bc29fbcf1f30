from django.urls import URLPattern, path

from operations import views

urlpatterns: list[URLPattern] = [
    path("healthz", views.healthz, name="healthz"),
    path("metrics", views.metrics, name="metrics"),
]
