"""How fast `cw metrics` is on a long run (a tracked figure; never asserted in tests).

Writes a synthetic log of N logged steps (default 10,000) in the format of the recorded TRL GRPO
output (tests/fixtures/metrics: each record behind tqdm bars, \\r on one line), then times
parsing it, drawing the table and chart, the JSON export, and the whole command
(`python -m cw_cli metrics FILE`, interpreter start included).

Usage: python benchmarks/metrics_parse.py [--steps 10000] [--runs 3]
"""

from __future__ import annotations

import argparse
import ast
import io
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RECORDED = ROOT / "tests" / "fixtures" / "metrics" / "trl-1.16.0-transformers-5.23.0-grpo.log"


def synthetic_log(path: Path, steps: int) -> None:
    """A log of ``steps`` records shaped like the recorded GRPO ones, with varying values."""
    text = RECORDED.read_bytes().decode()
    template = next(line[line.index("{'"):] for line in text.split("\n") if "{'loss'" in line)
    keys = list(ast.literal_eval(template))
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("[cw-launch] exec: trl grpo --config /etc/cw/config.yaml\n")
        for step in range(1, steps + 1):
            values = {k: f"{rng.gauss(1.0, 0.3) / (1 + step / 1000):.4g}" for k in keys}
            values["epoch"] = f"{step / steps:.4g}"
            bar = f"\r {100 * step // steps:3d}%|#####     | {step}/{steps} [01:02<03:04,  1.50it/s]"
            fh.write(f"{bar}\r{' ' * 45}\r{values}\n")
        fh.write(f"\r{' ' * 45}\r{{'train_runtime': '1234', 'train_loss': '0.5', 'epoch': '1'}}\n")


def best_and_median(function, runs: int) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    from rich.console import Console

    from cw_cli.cli.metrics import _view
    from cw_cli.metrics.export import to_json
    from cw_cli.metrics.parse import default_metrics
    from cw_cli.metrics.sources import load_path

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "run.log"
        synthetic_log(log, args.steps)
        size_mb = log.stat().st_size / 1e6
        loaded = load_path(log)
        assert len(loaded.series()["reward"]) == args.steps, "the synthetic log did not parse"

        def render() -> None:
            console = Console(file=io.StringIO(), width=120, force_terminal=True)
            console.print(_view([loaded], default_metrics([loaded]), 120))

        rows = [
            ("parse", best_and_median(lambda: load_path(log), args.runs)),
            ("table + chart", best_and_median(render, args.runs)),
            ("-o json", best_and_median(lambda: to_json([loaded]), args.runs)),
            ("whole command", best_and_median(
                lambda: subprocess.run([sys.executable, "-m", "cw_cli", "metrics", str(log)], cwd=ROOT,
                                       capture_output=True, check=True), args.runs)),
        ]
    print(f"{args.steps} logged steps, {size_mb:.1f} MB log, {len(loaded.series())} metrics per record")
    print(f"{'':16} {'best':>8} {'median':>8}")
    for label, (best, median) in rows:
        print(f"{label:16} {best * 1000:7.0f}ms {median * 1000:7.0f}ms")


if __name__ == "__main__":
    main()
