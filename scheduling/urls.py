from django.urls import URLPattern, path

from scheduling import views

urlpatterns: list[URLPattern] = [
    path("healthz", views.healthz, name="healthz"),
    path("metrics", views.metrics, name="metrics"),
]
