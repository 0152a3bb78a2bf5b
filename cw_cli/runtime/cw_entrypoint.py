"""cw's trainer entry point: resume from the newest checkpoint, then exec the real command.

Copied verbatim into the run's ConfigMap (key ``cw_entrypoint.py``, mounted at /etc/cw), so it
must stay a single file with no cw imports. The trainer container runs::

    python /etc/cw/cw_entrypoint.py trl sft --config /etc/cw/config.yaml --num_processes 8 [...]

Everything after the script name is the command to run. Before running it, cw_entrypoint reads
``output_dir`` (from ``--output_dir`` on the command line, else from the ``--config`` YAML) and,
if that folder holds a complete ``checkpoint-<step>`` (one with ``trainer_state.json``, which
Trainer writes last), appends ``--resume_from_checkpoint <that folder>``. TRL's scripts pass
``training_args.resume_from_checkpoint`` to ``trainer.train()``, so the run continues from
that step with its optimizer, scheduler and RNG state.

Nothing is added when the user already set ``resume_from_checkpoint`` (config or command
line), when ``CW_AUTO_RESUME`` is ``0``/``false``/``no``, when there is no checkpoint yet, or
with ``--no-resume`` (frameworks that resume by themselves, such as Axolotl). With
``--no-resume`` the newest complete checkpoint, if any, is named in ``CW_RESUME_CHECKPOINT``
instead, for a framework cw resumes inside its process (verifiers, ``cw_vf_resume.py``).

Before anything runs, the working directory (the run's folder, ``/checkpoints/<run>``) is
claimed for this run: ``.cw-run.json`` records the framework, training type and model of
``CW_RUN_IDENTITY``. A later launch under the same run name with a different identity stops
with exit code 3 instead of resuming from, or writing over, another run's checkpoints.

Then the command runs under ``cw_fault.supervise`` (shipped beside this file): on SIGTERM the
ranks stop at the next step end with a complete checkpoint (exit 143, so the Job restarts and
resumes), and a stall (no step for longer than the stall timeout) dumps every rank's stacks and
exits 75. Without ``cw_fault.py`` (an older ConfigMap) or with ``CW_FAULT_TOLERANCE=0`` the
process image is replaced (``os.execvp``), so signals and the exit code are the command's own.

When the supervised command ends with exit 0, ``.cw/finished.json`` in the run's folder says so
(removed at every start): the evaluation watcher (``cw_eval_watch.py``) then scores the final
model, and only then, since a pod stopped to be resumed also ends its sidecars.

With ``CW_NOTIFY`` (the config's ``notify:``) the first pod tells the user through
``cw_notify.py`` (shipped beside this file): a restart at the start, success, failure (and why)
or a stall at the end; sending never blocks or fails the run.

Options before the command: ``--dry-run`` prints the final command instead, ``--no-resume``
skips the resume step, ``--setup JSON`` runs a JSON argv first (e.g. installing a verifiers
environment from its hub; its failure stops the pod with its exit code); ``--`` ends them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_PREFIX = "[cw-launch]"
MARKER = ".cw-run.json"
COMPLETE_MARKER = ".cw-complete"  # cw_fault.COMPLETE_MARKER: every rank finished the checkpoint
IDENTITY_ENV = "CW_RUN_IDENTITY"
#: With ``--no-resume``: the newest complete checkpoint, for a framework resumed inside its process.
RESUME_ENV = "CW_RESUME_CHECKPOINT"  # cw_vf_resume.CHECKPOINT_ENV
FOREIGN_FOLDER_EXIT = 3
#: Written in the run's folder when the trainer command succeeded (cw_eval_watch.FINISHED_FILE).
FINISHED_FILE = ".cw/finished.json"


#: Set (to 1) by ``cw ... --resume``: continue a folder's checkpoints although the config changed.
RESUME_CHANGED_ENV = "CW_RESUME_CHANGED_CONFIG"


def claim_folder(folder: str | os.PathLike, identity_json: str | None, resume_changed: bool = False) -> str:
    """Record which run owns ``folder``, or stop if another run's checkpoints are there.

    A folder belongs to one framework, training type and model for good. Its config (a hash of
    the mounted file) may change only when the user asked for it (``--resume``): resuming a
    run's optimizer state under a different config is a decision, not an accident.

    Returns:
        A one-line note for the log.

    Raises:
        SystemExit: The folder belongs to a run with another framework, type or model, or to
            another config without ``resume_changed``.
    """
    if not identity_json:
        return "no run identity given"
    identity = json.loads(identity_json)
    marker = Path(folder) / MARKER
    where = Path(folder).resolve()
    try:
        owner = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        owner = None
    if isinstance(owner, dict):
        # A key the marker lacks (written by an older cw) is no evidence of another run.
        differs = {k: (owner[k], v) for k, v in identity.items() if k not in ("run", "config") and k in owner and owner[k] != v}
        if differs:
            listed = ", ".join(f"{k}: {old!r} there, {new!r} now" for k, (old, new) in sorted(differs.items()))
            _stop(f"{where} holds the outputs of another run ({listed}); refusing to resume from or overwrite them. "
                  "Launch with another --name, or delete that folder to reuse the name.")  # fmt: skip
        before, now = owner.get("config"), identity.get("config")
        if before and now and before != now:
            if not resume_changed:
                _stop(f"{where} holds checkpoints of this run name trained with another config ({before} there, {now} "
                      "now). Relaunch with --resume to continue from them with the new config, or use another --name.")  # fmt: skip
            marker.write_text(json.dumps(identity, sort_keys=True) + "\n", encoding="utf-8")
            return f"{where}: continuing with a changed config ({before} -> {now}), as --resume asked"
        return f"{where} belongs to this run"
    Path(folder).mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(identity, sort_keys=True) + "\n", encoding="utf-8")
    return f"claimed {where} for this run"


def _stop(message: str) -> None:
    print(f"{_PREFIX} {message}", file=sys.stderr, flush=True)
    raise SystemExit(FOREIGN_FOLDER_EXIT)


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
    # Under cw_fault every checkpoint gets a marker once all ranks wrote their part (rank 0
    # writes trainer_state.json before the others may be done): where any has one, all must.
    marked = any((child / COMPLETE_MARKER).is_file() for _, child in found)
    for _, child in sorted(found, reverse=True):
        state = child / "trainer_state.json"
        try:
            json.loads(state.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # interrupted while saving: fall back to the previous one
        if marked and not (child / COMPLETE_MARKER).is_file():
            continue  # a save cut short after trainer_state.json, before every rank finished
        return child
    return None


def _complete(child: Path, marked: bool) -> bool:
    try:
        json.loads((child / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return not marked or (child / COMPLETE_MARKER).is_file()


def set_aside_incomplete(output_dir: str | os.PathLike) -> list[str]:
    """Move checkpoints newer than the newest complete one to ``.cw/incomplete/``.

    A framework that resumes by itself (Axolotl takes the highest ``checkpoint-<N>``) would
    otherwise resume from a save cut short; :func:`latest_checkpoint`'s rule decides what is
    complete. Returns the folder names moved (another node's entrypoint may move one first).
    """
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = sorted((int(m.group(1)), child) for child in root.iterdir()
                   if (m := _CHECKPOINT.match(child.name)) and child.is_dir())  # fmt: skip
    marked = any((child / COMPLETE_MARKER).is_file() for _, child in found)
    complete = [step for step, child in found if _complete(child, marked)]
    newest = max(complete, default=-1)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    moved = []
    for step, child in found:
        if step > newest:
            target = root / ".cw" / "incomplete" / f"{child.name}-{stamp}"
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                child.rename(target)
            except OSError:
                continue
            moved.append(child.name)
    return moved


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
    options = set()
    setups: list[list[str]] = []
    while argv and argv[0] in ("--dry-run", "--no-resume", "--setup"):
        option = argv.pop(0)
        if option == "--setup" and argv:
            setups.append([str(part) for part in json.loads(argv.pop(0))])
        options.add(option)
    dry_run = "--dry-run" in options
    notifier = None
    if not dry_run:
        resume_changed = os.environ.get(RESUME_CHANGED_ENV, "") not in ("", "0")
        note = claim_folder(os.getcwd(), os.environ.get(IDENTITY_ENV), resume_changed)
        print(f"{_PREFIX} {note}", file=sys.stderr, flush=True)
        with contextlib.suppress(OSError):  # from an earlier attempt: this one has not finished
            Path(FINISHED_FILE).unlink(missing_ok=True)
        notifier = _notifier()
        for setup in setups:
            print(f"{_PREFIX} setup: {' '.join(setup)}", file=sys.stderr, flush=True)
            code = subprocess.call(setup)
            if code != 0:
                print(f"{_PREFIX} setup failed with exit code {code}: {' '.join(setup)}", file=sys.stderr, flush=True)
                if notifier is not None:
                    notifier.ended(code)
                return code
    if "--no-resume" in options:
        command, reason = build_command(argv, {"CW_AUTO_RESUME": "0"})
        reason = "resume is left to the framework"
        if not dry_run:  # it would take the highest checkpoint-<N>, complete or not
            moved = set_aside_incomplete(os.getcwd())
            if moved:
                reason += f" (incomplete {', '.join(moved)} moved to .cw/incomplete/)"
            reason += _name_checkpoint(os.environ)
    else:
        command, reason = build_command(argv)
    print(f"{_PREFIX} {reason}", file=sys.stderr, flush=True)
    if dry_run:
        print(json.dumps(command))
        return 0
    if notifier is not None:
        notifier.started(reason)  # a restart of the run is told
    supervise = _supervisor()
    if supervise is not None:
        print(f"{_PREFIX} run (stops at a step end on SIGTERM, watches for stalls): {' '.join(command)}",
              file=sys.stderr, flush=True)  # fmt: skip
        code = supervise(command, os.getcwd())
        if code == 0:
            mark_finished(Path(FINISHED_FILE))
        if notifier is not None:
            notifier.ended(code)  # succeeded, failed (why), stalled
        return code
    if notifier is not None:
        notifier.detach()
    print(f"{_PREFIX} exec: {' '.join(command)}", file=sys.stderr, flush=True)
    os.execvp(command[0], command)
    return 127  # pragma: no cover - execvp does not return


def mark_finished(path: Path) -> None:
    """Record that the trainer command succeeded (whole or not at all; a failure to write is said, not fatal)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        temporary.write_text(json.dumps({"exit_code": 0, "finished_at": stamp}) + "\n", encoding="utf-8")
        os.replace(temporary, path)
    except OSError as exc:
        print(f"{_PREFIX} cannot record the finish in {path}: {exc}", file=sys.stderr, flush=True)


def _name_checkpoint(environ: Any) -> str:
    """Name the newest complete checkpoint of the run's folder in ``CW_RESUME_CHECKPOINT`` for a
    framework cw resumes inside its process (verifiers: ``cw_vf_resume.py``); others ignore it.

    Returns:
        What to add to the log line.
    """
    environ.pop(RESUME_ENV, None)  # never one inherited from elsewhere
    if str(environ.get("CW_AUTO_RESUME", "1")).strip().lower() in ("0", "false", "no", "off"):
        return ""
    checkpoint = latest_checkpoint(os.getcwd())
    if checkpoint is None:
        return ""
    environ[RESUME_ENV] = str(checkpoint)
    return f"; newest complete checkpoint {checkpoint} ({RESUME_ENV})"


def _notifier() -> Any:
    """cw_notify's notifier (shipped beside this file with `notify:`), or None: no `notify`, not
    the first pod, or an older ConfigMap. Notifications never stop a run."""
    if not os.environ.get("CW_NOTIFY"):
        return None
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        import cw_notify
    except ImportError:
        return None
    return cw_notify.begin(os.getcwd())


def _supervisor() -> Callable[[list[str], str], int] | None:
    """cw_fault.supervise (shipped beside this file), or None: disabled, or an older ConfigMap."""
    if str(os.environ.get("CW_FAULT_TOLERANCE", "1")).strip().lower() in ("0", "false", "no", "off"):
        return None
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        import cw_fault
    except ImportError:
        return None
    return cw_fault.supervise


if __name__ == "__main__":
    raise SystemExit(main())
