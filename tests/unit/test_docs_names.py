"""The names README.md and docs/ teach exist in the code, so a rename breaks a test and
not a reader's first hour.

Checked: the README's newcomer path (each module it links, and every identifier it names
beside that link), ``ctx.<name>`` on the handler's context, ``@job(...)``'s keyword
arguments, ``manage.py <command>``, ``make <target>``, ``python -m bench.<module>``, and
every link to a file of the repository.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from django.core.management import get_commands

from scheduling.context import RunContext
from scheduling.registry import job

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]


def occurrences(pattern: str, pages: list[Path]) -> list[tuple[str, str]]:
    """(the pattern's first group, the page it is on) for every match in ``pages``."""
    return [
        (match.group(1), page.relative_to(ROOT).as_posix())
        for page in pages
        for match in re.finditer(pattern, page.read_text())
    ]


def newcomer_path() -> list[tuple[Path, list[str]]]:
    """The README's numbered path: each item's first linked module and the identifiers
    in backquotes around it."""
    text = README.read_text()
    section = text.split("**A newcomer's path", 1)[1].split("\n\n", 2)[1]
    items = re.split(r"\n(?=\d\. )", section.strip())
    path = []
    for item in items:
        module = re.search(r"\]\((scheduling/[a-z_]+\.py)\)", item)
        assert module is not None, f"no module linked in the README's path item: {item!r}"
        # `name` or `name(...)`: a plain identifier, called or not.
        names = re.findall(r"`@?([A-Za-z_][A-Za-z0-9_]*)(?:\([^`]*\))?`", item)
        path.append((ROOT / module.group(1), names))
    return path


def test_the_readme_path_is_at_most_five_files_from_job_to_fence_check():
    path = newcomer_path()
    modules = [module.name for module, _ in path]
    assert len(path) <= 5, modules
    assert (modules[0], modules[-1]) == ("registry.py", "fencing.py")
    named = {name for _, names in path for name in names}
    assert {"job", "claim_runs", "fence_check"} <= named


def test_every_name_on_the_readme_path_is_in_the_module_it_is_listed_under():
    missing = [
        f"{module.relative_to(ROOT)}: {name}"
        for module, names in newcomer_path()
        for name in names
        if not re.search(rf"\b{name}\b", module.read_text())
    ]
    assert not missing, "README's newcomer path names what its module no longer has: " + ", ".join(missing)


def test_every_ctx_attribute_the_docs_use_exists_on_the_run_context():
    used = occurrences(r"\bctx\.([a-z_]+)", PAGES)
    assert used, "the docs no longer show ctx.<name>: update this test"
    missing = sorted({f"ctx.{name} ({page})" for name, page in used if not hasattr(RunContext, name)})
    assert not missing, "the docs use context attributes that do not exist: " + ", ".join(missing)


def test_every_job_keyword_the_docs_use_is_a_parameter_of_job():
    parameters = set(inspect.signature(job).parameters)
    calls = occurrences(r"@job\(([^)]*)\)", PAGES)
    keywords = [(keyword, page) for call, page in calls for keyword in re.findall(r"\b([a-z_]+)=", call)]
    assert keywords, "the docs no longer show @job(keyword=...): update this test"
    missing = sorted({f"{keyword} ({page})" for keyword, page in keywords if keyword not in parameters})
    assert not missing, "the docs pass @job keywords it does not take: " + ", ".join(missing)


def test_every_management_command_the_docs_name_exists():
    commands = set(get_commands())
    named = occurrences(r"manage\.py\s+([a-z_]+)", PAGES)
    table = occurrences(r"^\| `([a-z_]+)[ `]", [ROOT / "docs" / "commands.md"])
    missing = sorted({f"{name} ({page})" for name, page in [*named, *table] if name not in commands})
    assert not missing, "the docs name management commands that do not exist: " + ", ".join(missing)


def test_every_make_target_the_docs_name_exists():
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), flags=re.MULTILINE))
    named = occurrences(r"`make ([a-z][a-z0-9-]*)", PAGES)
    missing = sorted({f"make {name} ({page})" for name, page in named if name not in targets})
    assert not missing, "the docs name make targets that do not exist: " + ", ".join(missing)


def test_every_benchmark_module_the_docs_run_exists():
    named = occurrences(r"python -m bench\.([a-z_]+(?:\.[a-z_]+)*)", PAGES)
    missing = sorted(
        {
            f"bench.{name} ({page})"
            for name, page in named
            if not (ROOT / "bench" / f"{name.replace('.', '/')}.py").exists()
        }
    )
    assert not missing, "the docs run benchmark modules that do not exist: " + ", ".join(missing)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_link_to_a_file_of_the_repository_resolves(page: Path):
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    missing = sorted({link for link in local if not (page.parent / link).exists()})
    assert not missing, f"{page.relative_to(ROOT)} links to files that do not exist: {', '.join(missing)}"
