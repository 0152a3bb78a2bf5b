"""cw's trainer entry point: resume from the newest checkpoint, then exec the real command.

Copied verbatim into the run's ConfigMap (key ``cw_launch.py``, mounted at /etc/cw), so it
must stay a single file with no cw imports. The trainer container runs::

    python /etc/cw/cw_launch.py trl sft --config /etc/cw/config.yaml --num_processes 8 [...]

Everything after the script name is the command to run. Before running it, cw_launch reads
``output_dir`` (from ``--output_dir`` on the command line, else from the ``--config`` YAML) and,
if that folder holds a complete ``checkpoint-<step>`` (one with ``trainer_state.json``, which
Trainer writes last), appends ``--resume_from_checkpoint <that folder>``. TRL's scripts pass
``training_args.resume_from_checkpoint`` to ``trainer.train()``, so the run continues from
that step with its optimizer, scheduler and RNG state.

Nothing is added when the user already set ``resume_from_checkpoint`` (config or command
line), when ``CW_AUTO_RESUME`` is ``0``/``false``/``no``, or when there is no checkpoint yet.
Then the process image is replaced (``os.execvp``), so signals and the exit code are the
command's own. ``--dry-run`` as the first argument prints the final command instead.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_PREFIX = "[cw-launch]"


def _flag_value(argv: list[str], flag: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _has_flag(argv: list[str], *flags: str) -> bool:
    return any(a == f or a.startswith(f + "=") for a in argv for f in flags)


def read_config(path: str) -> dict:
    """The YAML mapping at ``path`` (PyYAML ships with TRL; a tiny fallback reads top-level scalars)."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        import yaml
    except ImportError:  # pragma: no cover - every TRL image has PyYAML
        out: dict = {}
        for line in text.splitlines():
            m = re.match(r"^([A-Za-z_][\w.-]*)\s*:\s*(.*?)\s*(#.*)?$", line)
            if m and m.group(2):
                out[m.group(1)] = m.group(2).strip("'\"")
        return out
    data = yaml.safe_load(text)
    return data if isinstance(data, dict) else {}


def latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    """Newest complete ``checkpoint-<step>`` folder in ``output_dir``, or None."""
    root = Path(output_dir)
    if not root.is_dir():
        return None
    found = []
    for child in root.iterdir():
        m = _CHECKPOINT.match(child.name)
        if m and child.is_dir():
            found.append((int(m.group(1)), child))
    for _, child in sorted(found, reverse=True):
        state = child / "trainer_state.json"
        try:
            json.loads(state.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # interrupted while saving: fall back to the previous one
        return child
    return None


def resume_args(argv: list[str], environ: dict | None = None) -> tuple[list[str], str]:
    """Arguments to append to ``argv`` and a one-line reason (for the log)."""
    env = os.environ if environ is None else environ
    if str(env.get("CW_AUTO_RESUME", "1")).strip().lower() in ("0", "false", "no", "off"):
        return [], "automatic resume disabled (CW_AUTO_RESUME)"
    if _has_flag(argv, "--resume_from_checkpoint", "--resume-from-checkpoint"):
        return [], "resume_from_checkpoint given on the command line"
    config: dict = {}
    config_path = _flag_value(argv, "--config")
    if config_path:
        try:
            config = read_config(config_path)
        except OSError as exc:
            return [], f"cannot read {config_path}: {exc}"
    if config.get("resume_from_checkpoint") not in (None, ""):
        return [], "resume_from_checkpoint set in the config"
    output_dir = _flag_value(argv, "--output_dir") or _flag_value(argv, "--output-dir") or config.get("output_dir")
    if not output_dir:
        return [], "no output_dir"
    checkpoint = latest_checkpoint(output_dir)
    if checkpoint is None:
        return [], f"no checkpoint in {output_dir}: starting fresh"
    return ["--resume_from_checkpoint", str(checkpoint)], f"resuming from checkpoint {checkpoint}"


def build_command(argv: list[str], environ: dict | None = None) -> tuple[list[str], str]:
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise SystemExit(f"usage: {Path(sys.argv[0]).name} COMMAND [ARGS...]  (e.g. trl sft --config FILE)")
    extra, reason = resume_args(argv, environ)
    return argv + extra, reason


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    dry_run = bool(argv) and argv[0] == "--dry-run"
    if dry_run:
        argv = argv[1:]
    command, reason = build_command(argv)
    print(f"{_PREFIX} {reason}", file=sys.stderr, flush=True)
    if dry_run:
        print(json.dumps(command))
        return 0
    print(f"{_PREFIX} exec: {' '.join(command)}", file=sys.stderr, flush=True)
    os.execvp(command[0], command)
    return 127  # pragma: no cover - execvp does not return


if __name__ == "__main__":
    raise SystemExit(main())
