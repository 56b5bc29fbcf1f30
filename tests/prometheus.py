"""Debian's Prometheus for the metrics tests: promtool, and a real server on a free port;
and ``scrape``, what the test client reads from /metrics.

``make prometheus-deps`` installs the package; without it the tests that need it skip
with the reason, except under CI=true, where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.ports import free_port
from support.processes import PROJECT_DIR, stop_group, wait_for

RULES = PROJECT_DIR / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = PROJECT_DIR / "deploy" / "prometheus" / "alerts.test.yml"
SCRAPE_CONFIG = PROJECT_DIR / "deploy" / "prometheus" / "prometheus.yml"


def scrape(client: Any, **headers: Any) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample of a /metrics scrape by the test ``client``: {sample name: {sorted labels: value}}."""
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def binary(name: str) -> str:
    """The path of ``promtool`` or ``prometheus``; skips (fails under CI=true) without it."""
    found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if found:
        return found
    reason = f"{name} is missing: run 'make prometheus-deps' (Debian's prometheus package)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and the metrics tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary("promtool"), *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


class PrometheusServer:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"

    def query(self, expression: str) -> list[dict[str, Any]]:
        """The instant vector ``expression`` evaluates to now, through the HTTP API."""
        address = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expression})}"
        with urllib.request.urlopen(address, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def values(self, expression: str, label: str) -> dict[str, float]:
        """``{series[label]: value}`` of an instant vector."""
        return {series["metric"].get(label, ""): float(series["value"][1]) for series in self.query(expression)}

    def targets_up(self) -> bool:
        try:
            return self.values("up", "instance") != {} and all(v == 1 for v in self.values("up", "instance").values())
        except OSError:
            return False


@contextmanager
def prometheus_server(
    *, target: str, tmp_path: Path, interval: str = "1s", token: str = ""
) -> Iterator[PrometheusServer]:
    """A Prometheus server on a free port scraping ``target`` (host:port) every ``interval``;
    stopped (its process group) however the block ends."""
    port = free_port()
    auth = f"    authorization:\n      credentials: {token}\n" if token else ""
    config = tmp_path / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {interval}\n  evaluation_interval: {interval}\n"
        f"scrape_configs:\n  - job_name: tiffin\n{auth}    static_configs:\n      - targets: ['{target}']\n"
    )
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            binary("prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    server = PrometheusServer(port)
    try:
        wait_for(server.targets_up, timeout=60, interval=0.2, what="Prometheus scraping its target")
        yield server
    finally:
        stop_group(process, grace=10)
        log.close()
