"""How fast `cw --help` and a dry run start (a tracked figure; never asserted in tests).

Usage: python benchmarks/startup.py [--runs 10]
Prints the median and best wall time of each command, and whether heavy modules were imported.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {
    "cw --help": ["--help"],
    "cw trl sft --dry-run": ["trl", "sft", str(ROOT / "configs" / "trl-sft.yaml"), "--dry-run", "--name", "bench"],
    "cw trl grpo --dry-run": ["trl", "grpo", str(ROOT / "configs" / "trl-grpo.yaml"), "--dry-run", "--name", "bench"],
    "cw verifiers grpo --dry-run": [
        "verifiers", "grpo", str(ROOT / "configs" / "verifiers-grpo.yaml"), "--dry-run", "--name", "bench",
    ],
}
# The executable's own entry point, exit included; what it imported is read by an atexit handler,
# which its exit runs.
PROBE = (
    "import atexit, sys; sys.argv = ['cw'] + sys.argv[1:]\n"
    "def report():\n"
    "    heavy = [m for m in ('kubernetes', 'torch', 'transformers', 'rich.table') if m in sys.modules]\n"
    "    sys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')\n"
    "atexit.register(report)\n"
    "from cw_cli.cli.app import console_main\n"
    "console_main()\n"
)


def measure(args: list[str], runs: int) -> tuple[float, float, str]:
    times = []
    heavy = ""
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        heavy = next((line[6:] for line in done.stderr.splitlines() if line.startswith("HEAVY=")), "?")
    return statistics.median(times), min(times), heavy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    print(f"{'command':28} {'median':>8} {'best':>8}  heavy modules imported")
    for label, args in COMMANDS.items():
        median, best, heavy = measure(args, runs)
        print(f"{label:28} {median * 1000:7.0f}ms {best * 1000:7.0f}ms  {heavy or 'none'}")


if __name__ == "__main__":
    main()
