"""Answer /healthz ahead of every other middleware.

Probes (a load balancer, the kubelet) connect by IP, so their Host header is rarely in
ALLOWED_HOSTS, and they speak plain HTTP inside the cluster. Answering here, before
SecurityMiddleware and CommonMiddleware, skips host validation and the HTTPS redirect.
That is safe for this one response: it is built from nothing in the request (no URL
from the Host header, no cookie, no redirect), so a forged Host cannot poison anything.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from scheduling.views import healthz

HEALTHZ_PATH = "/healthz"


class HealthzMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info == HEALTHZ_PATH:
            return healthz(request)
        return self.get_response(request)
