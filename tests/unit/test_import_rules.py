"""The package graph the layout promises, read from the source (every import statement,
function-local ones included): the project core imports no app, the engine no business
app, and reads never import writes."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("orders", "carts", "payouts", "scheduling", "operations", "explainer", "simulation", "demo")
BUSINESS_APPS = ("orders", "carts", "payouts", "simulation", "demo")


def imported_modules(source: str, *, module: str) -> set[str]:
    """Every module ``source`` (the text of ``module``) imports, relative imports resolved."""
    found: set[str] = set()
    package = module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def violations(sources: dict[str, str], *, forbidden: tuple[str, ...]) -> list[str]:
    """``module: name`` for each import of a forbidden module or anything under it."""
    return [
        f"{module}: {name}"
        for module, source in sorted(sources.items())
        for name in sorted(imported_modules(source, module=module))
        if any(name == f or name.startswith(f"{f}.") for f in forbidden)
    ]


def sources(files: list[Path]) -> dict[str, str]:
    """Each file's text by its dotted module name."""
    return {".".join(path.relative_to(ROOT).with_suffix("").parts): path.read_text() for path in files}


def package_sources(package: str) -> dict[str, str]:
    return sources(sorted((ROOT / package).rglob("*.py")))


def test_the_checker_finds_function_local_and_relative_imports():
    source = "import orders.models\ndef f():\n    from ..carts import sql\n    from .services import x\n"
    found = imported_modules(source, module="payouts.selectors")
    assert {"orders.models", "carts.sql", "payouts.services.x"} <= found


def test_the_checker_reports_a_forbidden_import():
    bad = {"tiffin.bad": "def f():\n    from orders.models import Order\n", "tiffin.good": "import ordersx\n"}
    assert violations(bad, forbidden=("orders",)) == ["tiffin.bad: orders.models", "tiffin.bad: orders.models.Order"]


def test_the_project_core_imports_no_app():
    assert violations(package_sources("tiffin"), forbidden=APPS) == []


def test_the_engine_imports_no_business_app():
    money = ("transfers", "statements", "outbox", "provider_sandbox")
    assert violations(package_sources("scheduling"), forbidden=(*BUSINESS_APPS, *money, "explainer")) == []


def test_the_engine_imports_nothing_of_its_operations():
    """Operations (admin, /metrics, the check, alerts, the prune) sit beside the engine and use
    it; the engine never reaches back."""
    assert "operations.monitoring" in package_sources("operations")
    assert violations(package_sources("scheduling"), forbidden=("operations",)) == []


def test_the_explainer_reads_no_data_and_takes_only_the_cron_evaluation_from_the_engine():
    modules = package_sources("explainer")
    assert "explainer.views" in modules
    # ``from scheduling import cron`` reads as both "scheduling" and "scheduling.cron".
    engine = [name for name in violations(modules, forbidden=("scheduling",)) if name.split(": ")[1] != "scheduling"]
    assert engine and all(name.endswith(": scheduling.cron") for name in engine), engine
    assert violations(modules, forbidden=(*BUSINESS_APPS, "django.db")) == []


# Modules that only read, besides each app's selectors: the dashboard's timelines and the
# figures /metrics reads from the database at scrape time.
READ_MODULES = ("operations/timeline.py", "operations/metrics.py", "transfers/metrics.py")


def test_reads_never_import_writes():
    selectors = sorted(ROOT.glob("*/selectors.py"))
    assert {path.parent.name for path in selectors} >= {"orders", "carts", "payouts", "scheduling", "demo"}
    reads = [*selectors, *(ROOT / name for name in READ_MODULES)]
    assert all(path.is_file() for path in reads)
    services = tuple(f"{path.parent.name}.services" for path in sorted(ROOT.glob("*/services.py")))
    assert violations(sources(reads), forbidden=services) == []


def test_no_app_imports_a_command_module():
    """Command modules are entry points; what commands share lives in ``tiffin.cli``."""
    modules = {name: text for package in ("tiffin", *APPS) for name, text in package_sources(package).items()}
    commands = tuple(f"{package}.management" for package in ("tiffin", *APPS))
    assert violations(modules, forbidden=commands) == []


# The provider sandbox stands for a third party: it imports nothing of the project, and the
# project reaches it only from the tests, the simulations and the benchmarks (which start
# it as a process; none needs to import it).
PROJECT_PACKAGES = ("tiffin", *APPS, "bench", "tests", "django")
SANDBOX_USERS = ("tests", "simulation", "bench")


def test_the_provider_sandbox_imports_nothing_of_the_project():
    modules = package_sources("provider_sandbox")
    assert "provider_sandbox.server" in modules
    assert violations(modules, forbidden=PROJECT_PACKAGES) == []


def test_only_tests_simulation_and_bench_import_the_provider_sandbox():
    files = [
        path
        for path in sorted(ROOT.rglob("*.py"))
        if path.relative_to(ROOT).parts[0] not in (*SANDBOX_USERS, "provider_sandbox", ".venv", ".venv-peers")
    ]
    assert any(path.relative_to(ROOT).parts[0] == "payouts" for path in files)
    assert violations(sources(files), forbidden=("provider_sandbox",)) == []


# simulation is a development app (installed only with TIFFIN_DEVELOPMENT, tiffin/settings.py):
# the product never imports it, so a server without it runs everything it ships.
PRODUCT = (
    "tiffin", "orders", "carts", "payouts", "statements", "transfers", "outbox", "scheduling", "operations",
    "explainer", "demo",
)  # fmt: skip


def test_the_product_imports_no_simulation():
    modules = {name: text for package in PRODUCT for name, text in package_sources(package).items()}
    assert "payouts.jobs" in modules
    assert violations(modules, forbidden=("simulation", "support", "redis")) == []


def test_the_product_imports_none_of_the_benchmarks_peers():
    """procrastinate and Celery are benchmark peers (bench/peers/, requirements-peers.txt,
    installed into .venv-peers only): a server has neither, so the product never imports them."""
    modules = {name: text for package in PRODUCT for name, text in package_sources(package).items()}
    assert "orders.services" in modules
    assert violations(modules, forbidden=("bench", "celery", "procrastinate")) == []


def test_the_shared_outbox_imports_neither_outbox_nor_any_business_app():
    """``outbox`` holds what the transfer and statement outboxes share; what differs (the
    provider call, the SMTP send) stays in them, so it imports neither."""
    modules = package_sources("outbox")
    assert "outbox.services" in modules
    assert violations(modules, forbidden=(*BUSINESS_APPS, "transfers", "statements")) == []


def test_only_an_apps_sql_picks_its_sqlite_versions():
    """SQLite's statements and code (``<app>/queries_sqlite.py``, ``<app>/sql_sqlite.py``) sit
    apart from PostgreSQL's main path: the app's ``sql`` module picks them (through
    ``tiffin.db``), and nothing else of the product reads them."""
    versions = sorted(ROOT.glob("*/*_sqlite.py"))
    assert {path.parent.name for path in versions} >= {"scheduling", "payouts"}
    modules = {name: text for package in PRODUCT for name, text in package_sources(package).items()}
    for path in versions:
        app, version = path.parent.name, f"{path.parent.name}.{path.stem}"
        readers = {f"{app}.sql", *(f"{app}.{other.stem}" for other in versions if other.parent.name == app)}
        others = {name: text for name, text in modules.items() if name not in readers}
        assert violations(others, forbidden=(version,)) == []
