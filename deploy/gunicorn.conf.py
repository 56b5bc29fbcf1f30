"""gunicorn settings shared by `make up`, the Procfile and the Kubernetes web Deployment.

Each value comes from the environment so one image serves every size of machine.
Static files are served by whitenoise from STATIC_ROOT (collectstatic runs at build
time in the image, and before start in `make up`).
"""

import os

bind = f"{os.environ.get('HOST', '0.0.0.0')}:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
threads = int(os.environ.get("WEB_THREADS", "4"))
# Admin pages are quick; a request that takes longer than this is stuck, not busy.
timeout = int(os.environ.get("WEB_TIMEOUT_SECONDS", "30"))
# On SIGTERM (a rolling deploy), finish the requests in flight for up to this long.
graceful_timeout = int(os.environ.get("WEB_GRACEFUL_TIMEOUT_SECONDS", "20"))
accesslog = "-"
errorlog = "-"
# Trust X-Forwarded-Proto only from the proxy in front (set FORWARDED_ALLOW_IPS to its address).
# gunicorn never takes the client's address from X-Forwarded-For: Django does, from the
# proxies TRUSTED_PROXIES names (tiffin/client_ip.py); set both to the proxy.
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")


def on_starting(server: object) -> None:
    """Load the settings in the master before any worker starts: a value they refuse
    stops gunicorn with that one line, not a traceback from every worker."""
    from tiffin.env import settings_load_or_exit

    settings_load_or_exit()
