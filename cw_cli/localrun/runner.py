"""Run a rendered trainer Job on this machine (the library behind ``cw <fw> <type> CONFIG --local``).

Given the manifests of a plan, the runner

* finds the Job's container named ``trainer`` and the ConfigMap mounted into it,
* writes the ConfigMap's files into a local folder that stands in for ``/etc/cw``,
* maps every other mount (``/checkpoints`` first of all) to a local folder,
* rewrites those mount paths wherever they appear: in the ConfigMap files (``output_dir:
  /checkpoints/<run>``), in the command and in the environment,
* builds the environment from the container's literal ``env`` values (secret references are
  taken from this machine's environment when set there), expanding ``$(VAR)`` the way the
  kubelet does, and
* runs the command as a subprocess, yielding its output line by line.

Nothing here prints; the CLI decides what to show. Reading the manifests is
:mod:`cw_cli.localrun.pod_view`; here are the program checks, the run record and
:class:`LocalRunner`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from msgspec import Struct, field

from cw_cli.localrun import pod_view
from cw_cli.localrun.pod_view import LocalRunError, configmap_files, container_env, expand_vars, map_paths

__all__ = [
    "LocalRun", "LocalRunError", "LocalRunner", "check_installed", "configmap_files", "container_env", "expand_vars",
    "map_paths", "output_dir_of", "resolve_executable", "trainer_program", "write_run_record",
]


def resolve_executable(argv0: str, python: str = sys.executable) -> str:
    """``python``/``python3`` -> this interpreter; a bare name found next to it (``trl``,
    ``accelerate`` of the same virtual environment) -> that file; anything else unchanged."""
    if argv0 in ("python", "python3"):
        return python
    if "/" not in argv0:
        sibling = Path(python).parent / argv0
        if sibling.is_file() and os.access(sibling, os.X_OK):
            return str(sibling)
    return argv0


def output_dir_of(config_files: Mapping[str, Path], cwd: Path) -> Path:
    """The trainer's output folder: the first ``output_dir`` of the written config (relative ones
    start at the working folder), else the working folder (as cw_cli/k8s/run_facts.py reads it)."""
    import tomllib

    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "output_dir" and isinstance(item, str) and item:
                    found.append(item)
                walk(item)

    for key, loader in (("config.yaml", yaml.safe_load), ("config.toml", tomllib.loads)):
        path = config_files.get(key)
        try:
            if path is not None:
                walk(loader(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, yaml.YAMLError):
            continue
    return cwd / found[0] if found else cwd


def write_run_record(checkpoint_dir: Path, cwd: Path, config_files: Mapping[str, Path]) -> None:
    """``<checkpoint_dir>/.cw-local-run.json``: where the run's outputs go, for `cw artifacts --local`
    and `cw download --local` (cw_cli/localrun/artifacts.py); only a folder inside ``checkpoint_dir``."""
    import json

    output = Path(os.path.normpath(output_dir_of(config_files, cwd)))
    if output.is_relative_to(checkpoint_dir):
        record = {"run_dir": output.relative_to(checkpoint_dir).as_posix() or "."}
        (checkpoint_dir / ".cw-local-run.json").write_text(json.dumps(record) + "\n", encoding="utf-8")


#: The package that installs a program a trainer command runs, for the install hint.
PROGRAM_PACKAGES = {
    "trl": "trl",
    "accelerate": "accelerate",
    "axolotl": "axolotl",
    "vf-rl": "verifiers",
    "vf-vllm": "verifiers",
    "vf-train": "verifiers",
    "torchrun": "torch",
    "deepspeed": "deepspeed",
}


def trainer_program(command: list[str]) -> str:
    """The program a trainer command runs: after cw's entrypoint (``python cw_entrypoint.py ...
    -- trl sft ...``) the one it execs, else the command's own first word."""
    if len(command) > 2 and command[1].endswith("cw_entrypoint.py") and "--" in command[2:]:
        rest = command[command.index("--", 2) + 1 :]
        if rest:
            return rest[0]
    return command[0]


def check_installed(command: list[str], path: str, python: str = sys.executable) -> None:
    """Refuse to start a trainer whose program is not installed here, saying how to install it
    (else cw's entrypoint would fail with a traceback of its own).

    Raises:
        LocalRunError: The program is found neither next to ``python`` nor on ``path``.
    """
    program = trainer_program(command)
    found = program if "/" in program else resolve_executable(program, python)
    if ("/" in found and os.access(found, os.X_OK) and Path(found).is_file()) or shutil.which(found, path=path):
        return
    package = PROGRAM_PACKAGES.get(program)
    how = (f"install it in the environment cw runs from: `{Path(python).parent / 'pip'} install {package}`"
           if package else "install the package that provides it in the environment cw runs from")  # fmt: skip
    raise LocalRunError(f"the trainer runs `{program}`, which is not installed here (looked next to {python} and on PATH); {how}")


# --------------------------------------------------------------------------- the runner


class LocalRun(Struct):
    """A prepared local run: what will be executed, and where."""

    command: list[str]
    env: dict[str, str]
    cwd: Path
    config_dir: Path
    checkpoint_dir: Path
    mounts: dict[str, Path]
    files: dict[str, Path]
    unresolved_env: list[str] = field(default_factory=list)

    @property
    def config_file(self) -> Path:
        return self.config_dir / pod_view.CONFIG_KEY


def _refuse_several_nodes(job: Mapping[str, Any]) -> None:
    """Refuse a trainer Job that runs on several nodes: a local run is one process tree."""
    spec = job.get("spec", {})
    if int(spec.get("completions") or 1) > 1 or int(spec.get("parallelism") or 1) > 1:
        raise LocalRunError(
            f"the trainer Job runs on {spec.get('completions')} nodes; local runs are single-node (render with --nodes 1)"
        )


def _write_config_files(
    data: Mapping[str, str | bytes], config_dir: Path, mounts: Mapping[str, Path], overrides: Mapping[str, Any]
) -> dict[str, Path]:
    """Write the ConfigMap's files under ``config_dir``, their pod paths mapped to ``mounts`` and the
    framework's config with ``overrides`` applied; relative path -> written file."""
    files: dict[str, Path] = {}
    for relative, content in data.items():
        parts = relative.split("/")
        if relative.startswith("/") or any(part in ("", ".", "..") for part in parts):
            raise LocalRunError(f"bad ConfigMap path {relative!r}")
        path = config_dir.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            text = map_paths(content, mounts)
            if relative == pod_view.CONFIG_KEY:
                text = pod_view.apply_overrides(text, overrides)
            path.write_text(text, encoding="utf-8")
        files[relative] = path
    return files


class LocalRunner:
    """Runs the trainer of a plan on this machine.

    Args:
        manifests: The plan's manifests (dicts as rendered).
        checkpoint_dir: Local folder standing in for ``/checkpoints``.
        workdir: Where to write the ConfigMap files (a fresh temporary folder if None; it is
            removed by :meth:`cleanup` only when the runner created it).
        config_overrides: Top-level keys to set in ``config.yaml`` (e.g. ``use_cpu: true``,
            ``max_steps: 2``); None removes a key.
        extra_env: Variables set on top of the container's environment (a ``PYTHONPATH`` goes
            in front of the container's, which cw's pod-side modules need).
        inherit_env: Start from this process's environment (PATH, HOME, ...). Default True.
        cpu_only: Hide GPUs (``CUDA_VISIBLE_DEVICES=""``).
        python: Interpreter that replaces ``python`` in the command.

    Use :meth:`prepare` to inspect, :meth:`lines` to run and stream, then :attr:`returncode`.
    """

    def __init__(
        self,
        manifests: Iterable[Mapping[str, Any]],
        checkpoint_dir: os.PathLike | str,
        *,
        workdir: os.PathLike | str | None = None,
        config_overrides: Mapping[str, Any] | None = None,
        extra_env: Mapping[str, str] | None = None,
        inherit_env: bool = True,
        cpu_only: bool = False,
        python: str | None = None,
    ) -> None:
        self.manifests = [dict(m) for m in manifests]
        self.checkpoint_dir = Path(checkpoint_dir).expanduser().resolve()
        self._own_workdir = workdir is None
        self.workdir = Path(workdir).resolve() if workdir else None
        self.config_overrides = dict(config_overrides or {})
        self.extra_env = dict(extra_env or {})
        self.inherit_env = inherit_env
        self.cpu_only = cpu_only
        self.python = python or sys.executable  # read now: a test may stand in another interpreter
        self.process: subprocess.Popen[str] | None = None
        self.returncode: int | None = None
        self._prepared: LocalRun | None = None

    def prepare(self) -> LocalRun:
        """Write the ConfigMap files and compute command, environment and mounts (idempotent)."""
        if self._prepared is not None:
            return self._prepared
        job, container = pod_view.find_trainer(self.manifests)
        _refuse_several_nodes(job)
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="cw-local-"))
        config_dir = self.workdir / "etc-cw"
        scratch = self.workdir / "mounts"
        mounts, data = pod_view.mount_table(job, container, self.manifests, config_dir, self.checkpoint_dir, scratch)
        for local in mounts.values():
            local.mkdir(parents=True, exist_ok=True)
        files = _write_config_files(data, config_dir, mounts, self.config_overrides)
        cenv, missing = container_env(container, host_env=os.environ)
        cenv = {k: map_paths(v, mounts) for k, v in cenv.items()}
        env = self._environment(cenv)
        kube_env = {**cenv, **self.extra_env}  # the kubelet expands $(VAR) from the container's env only
        command = [map_paths(expand_vars(arg, kube_env), mounts) for arg in pod_view.container_command(container)]
        command[0] = resolve_executable(command[0], self.python)
        check_installed(command, env.get("PATH", ""), self.python)
        cwd = Path(container["workingDir"]) if container.get("workingDir") else self.workdir
        cwd = Path(map_paths(str(cwd), mounts))
        cwd.mkdir(parents=True, exist_ok=True)  # the container runtime creates a missing workingDir too
        write_run_record(self.checkpoint_dir, cwd, files)
        self._prepared = LocalRun(
            command=command,
            env=env,
            cwd=cwd,
            config_dir=config_dir,
            checkpoint_dir=self.checkpoint_dir,
            mounts=mounts,
            files=files,
            unresolved_env=missing,
        )
        return self._prepared

    def _environment(self, cenv: dict[str, str]) -> dict[str, str]:
        """The trainer's environment: this process's (when inherited), the container's (``cenv``,
        paths mapped), then the caller's extras."""
        env_base = dict(os.environ) if self.inherit_env else {}
        env = {**env_base, **cenv, **self.extra_env}
        # Search paths add up instead of replacing each other: the caller's first, then the
        # container's (cw's pod-side modules), then this process's.
        host_pythonpath = os.environ.get("PYTHONPATH") if self.inherit_env else None
        search = [self.extra_env.get("PYTHONPATH"), cenv.get("PYTHONPATH"), host_pythonpath]
        if "PYTHONPATH" in cenv:
            env["PYTHONPATH"] = os.pathsep.join(p for p in search if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        # Programs a launcher execs by name (`trl`, `accelerate`) come from the same environment
        # as the interpreter, activated or not.
        scripts = str(Path(self.python).parent)
        if scripts not in env.get("PATH", "").split(os.pathsep):
            env["PATH"] = os.pathsep.join(p for p in (scripts, env.get("PATH", "")) if p)
        # cw_pip.py only checks here: a local run must not install into the user's environment.
        env.setdefault("CW_PIP_CHECK", "1")
        if self.cpu_only:
            env["CUDA_VISIBLE_DEVICES"] = ""
        return env

    def lines(self) -> Iterator[str]:
        """Start the trainer and yield its output (stdout and stderr merged), line by line,
        without trailing newlines. :attr:`returncode` is set when the iterator is exhausted."""
        run = self.prepare()
        self.process = subprocess.Popen(
            run.command,
            cwd=run.cwd,
            env=run.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,  # own process group: stop() reaches accelerate's workers too
        )
        try:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                yield line.rstrip("\r\n")
            self.returncode = self.process.wait()
        finally:
            if self.process.poll() is None:
                self.stop()

    def run(self, on_line: Any = None) -> int:
        """Run to completion; ``on_line(line)`` is called for every output line. Returns the exit code."""
        for line in self.lines():
            if on_line is not None:
                on_line(line)
        assert self.returncode is not None
        return self.returncode

    def stop(self, timeout: float | None = None) -> int | None:
        """Terminate the trainer's process group (SIGTERM, then SIGKILL after ``timeout``; default the
        pod's terminationGracePeriodSeconds, the time cw_entrypoint needs to save a checkpoint)."""
        proc = self.process
        if timeout is None:
            timeout = float(pod_view.pod_spec(pod_view.find_trainer(self.manifests)[0]).get("terminationGracePeriodSeconds", 10))
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc else None
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.returncode = proc.wait(timeout=timeout)
                return self.returncode
            except subprocess.TimeoutExpired:
                continue
        self.returncode = proc.wait()
        return self.returncode

    def cleanup(self) -> None:
        """Remove the temporary folder the runner created (never the checkpoint folder)."""
        if self._own_workdir and self.workdir is not None and self.workdir.exists():
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.cleanup()
