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

Nothing here prints; the CLI decides what to show. Pure functions first, then
:class:`LocalRunner`.
"""

from __future__ import annotations

import os
import re
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

from cw_cli.labels import COMPLETION_INDEX_ANNOTATION, TRAINER

TRAINER_CONTAINER = TRAINER
CONFIG_MOUNT = "/etc/cw"
CHECKPOINT_MOUNT = "/checkpoints"
CONFIG_KEY = "config.yaml"
COMPLETION_INDEX_FIELD = f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"
_SKIP_MOUNTS = ("/dev/shm",)
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class LocalRunError(RuntimeError):
    """The manifests cannot be run locally (no trainer, multi-node, missing ConfigMap...)."""


# --------------------------------------------------------------------------- pure helpers


def find_trainer(manifests: Iterable[Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The trainer Job and its ``trainer`` container.

    Raises:
        LocalRunError: No Job has a container named ``trainer``.
    """
    from cw_cli.render.workload import OWNERS

    for manifest in manifests:
        owner = OWNERS.get(str(manifest.get("kind")))  # the trainer's owner (a --local plan's is a Job)
        template = owner.trainer_template(dict(manifest)) if owner is not None else None
        for container in ((template or {}).get("spec") or {}).get("containers", []):
            if container.get("name") == TRAINER_CONTAINER:
                return dict(manifest), dict(container)
    raise LocalRunError("the manifests have no Job with a container named 'trainer' (was it rendered with --services?)")


def pod_spec(job: Mapping[str, Any]) -> dict[str, Any]:
    return dict(job.get("spec", {}).get("template", {}).get("spec", {}))


def find_configmaps(manifests: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """ConfigMaps of the plan by name."""
    return {m["metadata"]["name"]: dict(m) for m in manifests if m.get("kind") == "ConfigMap"}


def volume_sources(job: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The Job's pod volumes by name."""
    return {v["name"]: dict(v) for v in pod_spec(job).get("volumes", [])}


def configmap_files(configmap: Mapping[str, Any], items: list[Mapping[str, str]] | None = None) -> dict[str, str | bytes]:
    """The files a ConfigMap volume shows: path in the mount -> text (``data``) or bytes (``binaryData``).

    With ``items`` only the listed keys appear, each at its ``path`` (as the kubelet projects them).
    """
    import base64

    by_key: dict[str, str | bytes] = dict(configmap.get("data") or {})
    by_key.update({key: base64.b64decode(value) for key, value in (configmap.get("binaryData") or {}).items()})
    if not items:
        return by_key
    return {item["path"]: by_key[item["key"]] for item in items if item["key"] in by_key}


def mount_table(
    job: Mapping[str, Any],
    container: Mapping[str, Any],
    manifests: Iterable[Mapping[str, Any]],
    config_dir: Path,
    checkpoint_dir: Path,
    scratch_dir: Path,
) -> tuple[dict[str, Path], dict[str, str | bytes]]:
    """Local folder per container mount path, and the ConfigMap files to write.

    ConfigMap volumes map to ``config_dir``, ``/checkpoints`` to ``checkpoint_dir``, any other
    mount to a folder under ``scratch_dir``; ``/dev/shm`` is left alone.

    Returns:
        (mount path -> local folder, path under the ConfigMap mount -> text or bytes).

    Raises:
        LocalRunError: A mounted ConfigMap is not among the manifests.
    """
    volumes = volume_sources(job)
    configmaps = find_configmaps(manifests)
    mounts: dict[str, Path] = {}
    files: dict[str, str | bytes] = {}
    for mount in container.get("volumeMounts", []):
        path = mount["mountPath"].rstrip("/") or "/"
        if path in _SKIP_MOUNTS:
            continue
        volume = volumes.get(mount["name"], {})
        if "configMap" in volume:
            name = volume["configMap"].get("name")
            if name not in configmaps:
                raise LocalRunError(f"ConfigMap {name!r} mounted at {path} is not in the manifests")
            files.update(configmap_files(configmaps[name], volume["configMap"].get("items")))
            mounts[path] = config_dir
        elif path == CHECKPOINT_MOUNT:
            mounts[path] = checkpoint_dir
        else:
            mounts[path] = scratch_dir / path.strip("/").replace("/", "_")
    if CONFIG_MOUNT not in mounts and len(configmaps) == 1:
        # A plan whose Job does not mount the ConfigMap still has one: use it at /etc/cw.
        files.update(configmap_files(next(iter(configmaps.values()))))
        mounts[CONFIG_MOUNT] = config_dir
    mounts.setdefault(CHECKPOINT_MOUNT, checkpoint_dir)
    return mounts, files


def map_paths(text: str, mounts: Mapping[str, os.PathLike | str]) -> str:
    """Replace container mount paths in ``text`` by their local folders.

    Only whole path prefixes are replaced: ``/checkpoints/run`` and ``"/checkpoints"`` map,
    ``/data/checkpoints`` and ``/checkpointsX`` do not.
    """
    for mount in sorted(mounts, key=len, reverse=True):
        pattern = re.compile(r"(?<![\w./-])" + re.escape(mount) + r"(?=/|$|[\s'\",:;\]}\)=])", re.MULTILINE)
        text = pattern.sub(str(mounts[mount]).replace("\\", "\\\\"), text)  # a literal replacement
    return text


def expand_vars(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: known variables are replaced, unknown references are
    kept verbatim, ``$$`` is an escaped ``$``."""

    def repl(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _VAR_REF.sub(repl, value)


def container_env(
    container: Mapping[str, Any],
    host_env: Mapping[str, str] | None = None,
    completion_index: int = 0,
) -> tuple[dict[str, str], list[str]]:
    """The container's environment as the kubelet would build it, minus the cluster.

    Literal values are expanded against the variables defined before them. ``secretKeyRef``
    values come from ``host_env`` under the same variable name when set there; the Job
    completion index (node rank) is ``completion_index``; other ``valueFrom`` sources are
    skipped.

    Returns:
        (environment, names of variables that could not be resolved).
    """
    host_env = os.environ if host_env is None else host_env
    env: dict[str, str] = {}
    missing: list[str] = []
    for item in container.get("env", []) or []:
        name = item["name"]
        if "value" in item:
            env[name] = expand_vars(str(item.get("value") or ""), env)
            continue
        source = item.get("valueFrom") or {}
        field_path = (source.get("fieldRef") or {}).get("fieldPath")
        if field_path == COMPLETION_INDEX_FIELD:
            env[name] = str(completion_index)
        elif name in host_env:
            env[name] = host_env[name]
        else:
            missing.append(name)
    return env, missing


def container_command(container: Mapping[str, Any]) -> list[str]:
    """``command`` followed by ``args``."""
    command = [str(c) for c in container.get("command") or []]
    command += [str(a) for a in container.get("args") or []]
    if not command:
        raise LocalRunError("the trainer container has no command (image entrypoints cannot be run locally)")
    return command


def apply_overrides(config_text: str, overrides: Mapping[str, Any]) -> str:
    """Top-level keys of a YAML config replaced (``None`` removes a key)."""
    if not overrides:
        return config_text
    data = yaml.safe_load(config_text) or {}
    if not isinstance(data, dict):
        raise LocalRunError("config.yaml is not a YAML mapping; cannot apply overrides")
    for key, value in overrides.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


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
        return self.config_dir / CONFIG_KEY


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
            if relative == CONFIG_KEY:
                text = apply_overrides(text, overrides)
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
        job, container = find_trainer(self.manifests)
        _refuse_several_nodes(job)
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="cw-local-"))
        config_dir = self.workdir / "etc-cw"
        scratch = self.workdir / "mounts"
        mounts, data = mount_table(job, container, self.manifests, config_dir, self.checkpoint_dir, scratch)
        for local in mounts.values():
            local.mkdir(parents=True, exist_ok=True)
        files = _write_config_files(data, config_dir, mounts, self.config_overrides)
        cenv, missing = container_env(container, host_env=os.environ)
        cenv = {k: map_paths(v, mounts) for k, v in cenv.items()}
        env = self._environment(cenv)
        kube_env = {**cenv, **self.extra_env}  # the kubelet expands $(VAR) from the container's env only
        command = [map_paths(expand_vars(arg, kube_env), mounts) for arg in container_command(container)]
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
            timeout = float(pod_spec(find_trainer(self.manifests)[0]).get("terminationGracePeriodSeconds", 10))
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
