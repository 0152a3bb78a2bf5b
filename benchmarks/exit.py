"""What the `cw` executable's exit saves: a dry run ended by Python's teardown, and by cw's own exit.

Usage: python benchmarks/exit.py [--runs 15]

Both run the same dry run in a fresh interpreter, alternately; the first calls ``main`` (which
ends with SystemExit and the interpreter's teardown), the second ``console_main`` (the `cw`
executable, cli/hard_exit.py). Prints the medians and the difference.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["trl", "sft", str(ROOT / "configs" / "trl-sft.yaml"), "--dry-run", "--name", "bench"]


def _probe(entry: str) -> str:
    return f"import sys\nsys.argv = ['cw', *sys.argv[1:]]\nfrom cw_cli.cli.app import {entry}\n{entry}()\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"main": [], "console_main": []}
    for _ in range(args.runs):
        for entry, measured in times.items():
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", _probe(entry), *ARGS], capture_output=True)
            measured.append(time.perf_counter() - started)
            if done.returncode != 0:
                raise SystemExit(f"{entry} failed: {done.stderr.decode()[-2000:]}")
    normal, fast = (statistics.median(times[key]) * 1000 for key in ("main", "console_main"))
    print(f"dry run, medians of {args.runs}: with teardown {normal:.0f} ms, cw's exit {fast:.0f} ms, saved {normal - fast:.0f} ms")


if __name__ == "__main__":
    main()
