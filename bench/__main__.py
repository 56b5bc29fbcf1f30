"""Run every benchmark (``make bench``), each in its own process and database, then print
one summary and rewrite the results section of BENCHMARKS.md from bench/results/.

    python -m bench                    # all six
    python -m bench claim_contention   # some of them, by module name
    python -m bench --markdown-only    # only rewrite BENCHMARKS.md from the last results

Exits non-zero if any benchmark missed a goal or failed to run.
"""

from __future__ import annotations

import argparse
import sys
import time

from bench.common import PYTHON, ROOT, fmt, run, stop_on_sigterm
from bench.markdown import markdown_write

# Cheapest first, so a broken setup shows up early.
BENCHMARKS = ["claim_contention", "tick_lateness", "payouts", "carts", "cancellations", "history"]


def main() -> int:
    parser = argparse.ArgumentParser(description="Run the benchmarks and summarise them.")
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default: all of {', '.join(BENCHMARKS)})")
    parser.add_argument("--markdown-only", action="store_true", help="only rewrite BENCHMARKS.md")
    args = parser.parse_args()
    stop_on_sigterm()
    unknown = sorted(set(args.names) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    if args.markdown_only:
        markdown_write()
        return 0
    outcomes = [(name, *_run(name)) for name in (args.names or BENCHMARKS)]
    markdown_write()
    print("\n== summary ==")
    for name, code, seconds in outcomes:
        print(f"{'PASS' if code == 0 else 'FAIL'}  {name:<18} {fmt(seconds)} s")
    print(f"total {fmt(sum(seconds for _, _, seconds in outcomes))} s; BENCHMARKS.md updated")
    return 0 if all(code == 0 for _, code, _ in outcomes) else 1


def _run(name: str) -> tuple[int, float]:
    print(f"\n--- python -m bench.{name}", flush=True)
    started = time.monotonic()
    code = run([PYTHON, "-m", f"bench.{name}"], cwd=ROOT)
    return code, time.monotonic() - started


if __name__ == "__main__":
    sys.exit(main())
