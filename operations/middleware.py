"""Answer /healthz and /metrics ahead of every other middleware.

Probes (a load balancer, the kubelet) connect by IP, so their Host header is rarely in
ALLOWED_HOSTS, and they speak plain HTTP inside the cluster. Answering here, before
SecurityMiddleware and CommonMiddleware, skips host validation and the HTTPS redirect.
That is safe for these responses: they are built from nothing in the request but the
metrics' bearer token (no URL from the Host header, no cookie, no redirect), so a forged
Host cannot poison anything. Prometheus scrapes by pod address over plain HTTP too.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from operations.views import healthz, metrics

HEALTHZ_PATH = "/healthz"
METRICS_PATH = "/metrics"


class HealthzMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info == HEALTHZ_PATH:
            return healthz(request)
        if request.path_info == METRICS_PATH:
            return metrics(request)
        return self.get_response(request)
