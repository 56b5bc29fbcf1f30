"""docs/configuration.md and .env.example against the environment the code reads.

Every variable the code reads is found by reading the source (``ast``), not by a list kept
by hand: a call to one of ``tiffin.env``'s readers (``env_int("NAME", ...)``), or
``os.environ.get``/``os.environ[...]``/``os.getenv``, with the name as a literal or a
module constant. ``tests/`` is left out: the suite's own switches are not settings.

docs/configuration.md must name each in the first column of one of its tables.
``.env.example`` holds what a server reads (``tiffin/settings.py`` and
``deploy/gunicorn.conf.py``), as ``NAME=value`` or a commented ``# NAME=``, because it is
what an operator copies into a deployment; the accelerated clock of ``simulate`` and the
benchmarks' variables are set by those tools for their own child processes and stay out.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION = ROOT / "docs" / "configuration.md"
ENV_EXAMPLE = ROOT / ".env.example"
# .venv-peers: make bench-peers's virtualenv (procrastinate and Celery for bench/peers/).
SKIPPED_DIRECTORIES = {"tests", ".venv", ".venv-peers", "node_modules", "staticfiles", "db"}
# The files whose variables a server reads, hence .env.example's share.
SERVER_FILES = {"tiffin/settings.py", "deploy/gunicorn.conf.py"}
# tiffin.env's readers, from its source: a reader added there is recognised here too.
READERS = set(re.findall(r"^def (env_[a-z_]+)\(", (ROOT / "tiffin" / "env.py").read_text(), flags=re.MULTILINE))


@dataclass(frozen=True)
class Read:
    """One variable (or, for ``env_prefixed``, a family ``PREFIX<KEY>``) read at ``where``."""

    name: str
    prefix: bool
    where: str


def source_files() -> list[Path]:
    return sorted(
        path for path in ROOT.rglob("*.py") if not SKIPPED_DIRECTORIES.intersection(path.relative_to(ROOT).parts[:-1])
    )


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "literal"`` assignments, for reads through a constant."""
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def _is_environ(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def _variable(node: ast.expr, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _read_argument(node: ast.AST) -> tuple[ast.expr, bool] | None:
    """The name argument of an environment read, and whether it is a prefix; else None."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value):
        return node.slice, False
    if not (isinstance(node, ast.Call) and node.args):
        return None
    function = node.func
    if isinstance(function, ast.Name) and function.id in READERS:
        return node.args[0], function.id == "env_prefixed"
    if isinstance(function, ast.Attribute) and (
        function.attr == "getenv" or (function.attr == "get" and _is_environ(function.value))
    ):
        return node.args[0], False
    return None


def reads_in(path: Path) -> list[Read]:
    tree = ast.parse(path.read_text(), filename=str(path))
    constants = _constants(tree)
    relative = path.relative_to(ROOT).as_posix()
    found = []
    for node in ast.walk(tree):
        read = _read_argument(node)
        if read is not None and (name := _variable(read[0], constants)) is not None:
            found.append(Read(name=name, prefix=read[1], where=f"{relative}:{getattr(node, 'lineno', 0)}"))
    return found


def all_reads() -> list[Read]:
    return [read for path in source_files() for read in reads_in(path)]


def documented_names() -> set[str]:
    """Backquoted names in the first cell of every table row of docs/configuration.md."""
    names = set()
    for line in CONFIGURATION.read_text().splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            first_cell = line.split("|")[1]
            names.update(re.findall(r"`([A-Z][A-Z0-9_]*(?:<[A-Z_]+>)?)`", first_cell))
    return names


def env_example_names() -> set[str]:
    return set(re.findall(r"^(?:# ?)?([A-Z][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(), flags=re.MULTILINE))


def covered(read: Read, names: set[str]) -> bool:
    if read.prefix:
        return any(name.startswith(read.name) for name in names)
    return read.name in names


def missing_report(reads: list[Read], names: set[str], where: str) -> str:
    missing = sorted(
        {(read.name + ("<KEY>" if read.prefix else ""), read.where) for read in reads if not covered(read, names)}
    )
    lines = [f"  {name}  (read at {place})" for name, place in missing]
    return (
        f"{len(missing)} variable(s) the code reads are missing from {where}:\n" + "\n".join(lines) if missing else ""
    )


def test_the_reader_finds_the_settings_it_must():
    # Guards the scanner itself: a reader it stopped recognising would hide every name.
    names = {read.name for read in all_reads()}
    assert {
        "SECRET_KEY",
        "DATABASE_URL",
        "Q_WORKERS",
        "SCHEDULER_PING_URL_",
        "WEB_CONCURRENCY",
        "TIFFIN_CLOCK_START",
    } <= names


def test_every_variable_the_code_reads_is_in_docs_configuration():
    report = missing_report(all_reads(), documented_names(), "a table of docs/configuration.md")
    assert not report, report


def test_docs_configuration_names_no_variable_the_code_does_not_read():
    reads = all_reads()
    exact = {read.name for read in reads if not read.prefix}
    prefixes = [read.name for read in reads if read.prefix]
    stale = sorted(
        name for name in documented_names() if name not in exact and not any(name.startswith(p) for p in prefixes)
    )
    assert not stale, f"docs/configuration.md documents variables no code reads: {', '.join(stale)}"


def test_env_example_carries_every_variable_a_server_reads():
    server_reads = [read for read in all_reads() if read.where.split(":")[0] in SERVER_FILES]
    report = missing_report(server_reads, env_example_names(), ".env.example (as NAME=value or # NAME=)")
    assert not report, report
