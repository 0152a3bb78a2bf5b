"""Instructions the offline commands execute, counted by valgrind: cw beside its floor and its peer.

Usage:
    python benchmarks/instructions.py [--torchx PATH] [--cw-venv DIR] [--steps]

Wall time on a small shared VM moves by ±10% from one minute to the next, more than most single
changes to cw save. The count of instructions a process executes (valgrind's callgrind, hash
seed fixed) is the same on every run to a few hundred instructions in a billion, so it says
whether a change made `cw ... --dry-run` do less work, and how much.

It counts user-space instructions only: time in the kernel (the reads and stat calls of imports)
is not in it, and one instruction is not one nanosecond, so the ratio of two counts is not the
ratio of their wall times (benchmarks/commands.py measures those). For the dry run on this
project's 2-core VM, the wall ratio to torchx has been about 0.79 times the count ratio.

``--steps`` splits cw's part of a dry run into cumulative steps (each a fresh process that stops
at that step), the split that guides where to cut next.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from commands import floor_code, installed_cw  # noqa: E402 - the same cw install and floor as the wall-time table
from sweep_submit import CONFIG  # noqa: E402 - the same small SFT run

#: cw's part of a dry run in steps; each runs after the floor and after the steps before it.
STEPS = [
    ("cw's config models", "import cw_cli.config.quantity, cw_cli.errors, cw_cli.config.models"),
    ("config loading modules", "import cw_cli.types, cw_cli.config.yaml_source, cw_cli.config.loader"),
    ("the TRL framework", "from cw_cli.frameworks.registry import FrameworkRegistry\n"
                          "registry = FrameworkRegistry().load_builtin('trl')"),
    ("rendering modules and the API", "import cw_cli.render.plan, cw_cli.api"),
    ("plan the run", "from cw_cli import api\nfrom pathlib import Path\n"
                     "planned = api.plan(api.read_config(Path(CONFIG)), 'trl', 'sft', name='d', registry=registry)"),
    ("its manifests as YAML", "planned.to_yaml()"),
    ("the memory estimate", "api.estimate_run(planned, gpu_memory=None, allow_meta_device=False)"),
    ("the CLI's modules", "import cw_cli.cli.app, cw_cli.cli.run"),
]  # fmt: skip


def instructions(argv: list[str]) -> int:
    """Instructions ``argv`` executes, as callgrind counts them."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONHASHSEED"] = "0"  # the one input that changes a Python process's count between runs
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
                          capture_output=True, text=True, env=env)  # fmt: skip
    for line in done.stderr.splitlines():
        if "Collected :" in line:
            return int(line.split()[-1])
    raise SystemExit(f"{' '.join(argv)}: no count from valgrind (exit {done.returncode}): {done.stderr[-2000:]}")


def _millions(count: int) -> str:
    return f"{count / 1e6:8.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torchx", default=str(Path.home() / ".cache/cw/venvs/torchx/bin/torchx"))
    parser.add_argument("--cw-venv", default=str(Path.home() / ".cache/cw/venvs/cw-bench"))
    parser.add_argument("--steps", action="store_true", help="split cw's part of the dry run into steps")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (e.g. apt-get install valgrind)")
    python = installed_cw(Path(args.cw_venv))
    cw = str(Path(python).with_name("cw"))
    folder = Path(tempfile.mkdtemp(prefix="cw-instructions-"))
    try:
        import yaml

        config = folder / "sft.yaml"
        config.write_text(yaml.safe_dump(CONFIG))
        for _ in range(2):  # bytecode written and the page cache warm before counting
            subprocess.run([cw, "trl", "sft", str(config), "--dry-run", "--name", "d"], capture_output=True)
        floor = instructions([python, "-c", floor_code("click, yaml, jinja2", validates=True)])
        rows = [
            ("cw trl sft CFG --dry-run", instructions([cw, "trl", "sft", str(config), "--dry-run", "--name", "d"])),
            ("floor: click, yaml, jinja2 + a one-field model", floor),
        ]
        torchx = args.torchx if shutil.which(args.torchx) else None
        if torchx:
            rows.append(("torchx run --dryrun", instructions(
                [torchx, "run", "-s", "kubernetes", "-cfg", "queue=default", "--dryrun", "--workspace", "", "utils.echo",
                 "--msg", "hi"])))  # fmt: skip
        peer = rows[2][1] if torchx else None
        print("millions of instructions (valgrind --tool=callgrind, PYTHONHASHSEED=0)")
        print(f"| {'command':48} | {'count':>8} | {'/ torchx':>8} |")
        print(f"|{'-' * 50}|{'-' * 10}|{'-' * 10}|")
        for label, count in rows:
            ratio = f"{count / peer:8.3f}" if peer else "       -"
            print(f"| {label:48} | {_millions(count)} | {ratio} |")
        if args.steps:
            _print_steps(python, config, floor)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _print_steps(python: str, config: Path, floor: int) -> None:
    code = floor_code("click, yaml, jinja2", validates=True).replace("import os\nos._exit(0)\n", "")
    code = f"import os\nCONFIG = {str(config)!r}\n{code}"
    print(f"\ncw's part of the dry run, step by step (after the floor's {floor / 1e6:.1f} M)")
    before = floor
    for index, (label, step) in enumerate(STEPS):
        code += step + "\n"
        count = instructions([python, "-c", code + "os._exit(0)\n"])
        print(f"| {index + 1}. {label:45} | {_millions(count - before)} |")
        before = count
    print(f"| {'cw over the floor, these steps':48} | {_millions(before - floor)} |")


if __name__ == "__main__":
    main()
