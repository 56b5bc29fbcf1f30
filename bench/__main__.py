"""Run every benchmark (``make bench``), each in its own process and database, then print
one summary and rewrite the tables of docs/benchmark-tables.md from bench/results/.

    python -m bench                    # all of them (make bench)
    python -m bench claim_contention   # some of them, by name
    python -m bench --large            # the largest sizes of the curves (make bench-large)
    python -m bench history            # the long history and its prune (make bench-history)
    python -m bench --markdown-only    # only rewrite docs/benchmark-tables.md from the last results

A benchmark whose module is in bench/peers/ runs with .venv-peers' python (the peers'
packages are installed there, never in .venv; ``make bench`` creates it); the others with
this python. After the runs: the tables, the lateness plot (bench/lateness.py) and the
cancellation path's goals side by side. Exits non-zero if any benchmark missed a goal or
failed to run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench.common import PYTHON, RESULTS, ROOT, fmt
from bench.lateness import cancellation_goals, lateness_plot
from bench.markdown import markdown_write
from support.processes import guarded_run, sigterm_exits

# Name -> the module and its arguments; cheapest first, so a broken setup shows up early.
BENCHMARKS = {
    "claim_contention": ["claim_contention"],
    "tick_lateness": ["tick_lateness"],
    "scheduler_pass": ["scheduler_pass"],
    "payouts": ["payouts"],
    "carts": ["carts"],
    "cancellations": ["cancellations"],
    "cancellations_workers2": ["cancellations", "--quick", "--workers", "2"],
    "cancellations_pgbouncer": ["cancellations", "--pgbouncer"],  # the direct run's 30 s steps: like for like
    "cancellations_peers": ["peers.cancellations", "--kill"],
    "transfers": ["transfers"],
}
# The peers' interpreter (Makefile: PEERS_VENV), for the modules under bench/peers/.
PEERS_PYTHON = ROOT / ".venv-peers" / "bin" / "python"
# Benchmark 6 (ten million runs of history, then their prune) takes about as long as all of
# the above together, most of it generating the history: make bench-history.
ALONE = {"history": ["history"]}
# The curves' largest sizes (20 million orders, 5 million carts): make bench-large.
LARGE = {
    "payouts_large": ["payouts", "--sizes", "1000,10000,100000", "--rounds", "1", "--name", "payouts_large"],
    "carts_large": ["carts", "--sizes", "100000,1000000,5000000", "--name", "carts_large"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description="Run the benchmarks and summarise them.")
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default: all of {', '.join(BENCHMARKS)})")
    parser.add_argument("--markdown-only", action="store_true", help="only rewrite docs/benchmark-tables.md")
    parser.add_argument("--large", action="store_true", help=f"run {', '.join(LARGE)} (the curves' largest sizes)")
    args = parser.parse_args()
    known = {**BENCHMARKS, **LARGE, **ALONE}
    unknown = sorted(set(args.names) - set(known))
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(known)}")
    if args.markdown_only:
        markdown_write()
        lateness_plot()
        return 0
    names = args.names or list(LARGE if args.large else BENCHMARKS)
    with sigterm_exits():  # SIGTERM stops the running benchmark through guarded_run's finally
        outcomes = [(name, *_run(known[name])) for name in names]
    markdown_write()
    plot = lateness_plot()
    print("\n== summary ==")
    for name, code, seconds in outcomes:
        print(f"{'PASS' if code == 0 else 'FAIL'}  {name:<23} {fmt(seconds)} s")
    if any(name.startswith("cancellations") for name in names):
        print("the cancellation path (bench/results/cancellations*.json):")
        print("\n".join(f"  {line}" for line in cancellation_goals(RESULTS)))
        print(f"  lateness against rate, every system: {plot.relative_to(ROOT) if plot else 'no results to draw'}")
    print(f"total {fmt(sum(seconds for _, _, seconds in outcomes))} s; docs/benchmark-tables.md updated")
    return 0 if all(code == 0 for _, code, _ in outcomes) else 1


def _run(command: list[str]) -> tuple[int, float]:
    module, *args = command
    python = str(PEERS_PYTHON) if module.startswith("peers.") else PYTHON
    print(f"\n--- {'.venv-peers: ' if python != PYTHON else ''}python -m bench.{module} {' '.join(args)}", flush=True)
    started = time.monotonic()
    if not Path(python).exists():
        print(f"{python} is missing: run make bench (it creates .venv-peers) or make bench-peers", flush=True)
        return 1, time.monotonic() - started
    code = guarded_run([python, "-m", f"bench.{module}", *args], cwd=ROOT)
    return code, time.monotonic() - started


if __name__ == "__main__":
    sys.exit(main())
