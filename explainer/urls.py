from django.urls import URLPattern, path

from explainer import views

urlpatterns: list[URLPattern] = [
    path("cron/", views.cron_explainer_public, name="cron_explainer"),
]
