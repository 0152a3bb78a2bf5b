"""The real node's images, built here and imported into its containerd (no registry answers).

- ``cw.local/cw-runtime:<tag>``: Debian bookworm (mmdebstrap, from Debian's packages) with its
  Python 3.11, the pinned training stack (kubeconfigs/cluster/runtime-image/requirements.txt,
  installed with pip from PyPI, or from pip's cache when the test environment fetched the same
  wheels) and the tiny model at :data:`TINY_MODEL`. The tag is a hash of the pins and of the build
  steps: it is built once per change, in a few minutes cold (progress said at each step).
- ``cw.local/pause:<kubernetes version>``: the sandbox image, one static binary (tools/pause).

Both are written as docker-archive streams (two layers, uncompressed) into ``ctr images import``.
Disk: the layer file while building, then containerd's content blob and its unpacked snapshot, so
about three times the image (about 6 GB) at the peak.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from ..errors import StartError
from ..paths import cluster_resources_dir

RUNTIME_REPO = "cw.local/cw-runtime"
PAUSE_REPO = "cw.local/pause"
DEBIAN_SUITE = "bookworm"
#: Bumped whenever the steps below change what the image holds (it is part of the tag).
BUILD_STEPS_VERSION = "3"
#: Where the image keeps the pinned packages (Debian's python3 searches it by itself, so a pod's own
#: PYTHONPATH, such as cw's /etc/cw, adds to it instead of hiding it), and the tiny model
#: configs/test-cluster-sft.yaml trains.
PYTHON_DIR = "/usr/local/lib/python3.11/dist-packages"
TINY_MODEL = "/opt/cw/models/tiny-llama"
IMAGE_ENV = (
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    # Nothing in a test cluster's pod may fetch from a hub: fail at once instead.
    "HF_HUB_OFFLINE=1",
    "HF_DATASETS_OFFLINE=1",
    "PYTHONUNBUFFERED=1",
)
#: The programs pods run by name, from the pinned packages' console scripts.
SCRIPTS = ("trl", "accelerate", "torchrun", "lm_eval", "transformers")


def requirements_file() -> Path:
    """The pins of the runtime image."""
    return cluster_resources_dir() / "runtime-image" / "requirements.txt"


def runtime_tag() -> str:
    """The runtime image's tag: a hash of its pins, its Debian suite and its build steps."""
    digest = hashlib.sha256()
    for part in (requirements_file().read_bytes(), DEBIAN_SUITE.encode(), BUILD_STEPS_VERSION.encode(),
                 (Path(__file__).parent / "tiny_model.py").read_bytes()):  # fmt: skip
        digest.update(hashlib.sha256(part).digest())
    return f"py311-{digest.hexdigest()[:12]}"


def runtime_image() -> str:
    """The runtime image's reference (what configs/test-cluster-sft.yaml names)."""
    return f"{RUNTIME_REPO}:{runtime_tag()}"


def pause_image(kubernetes_version: str) -> str:
    """The sandbox image's reference."""
    return f"{PAUSE_REPO}:{kubernetes_version}"


def _run(command: Sequence[str], what: str, log: Path, env: dict[str, str] | None = None) -> None:
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(command)}\n".encode())
        out.flush()
        done = subprocess.run(list(command), stdout=out, stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0:
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-5:])
        raise StartError(f"building the runtime image: {what} failed (exit {done.returncode}); see {log}: {tail}", str(log))


def _python311() -> str:
    """A Python 3.11 to install the packages with (the ABI of Debian bookworm's python3)."""
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    found = shutil.which("python3.11")
    if found:
        return found
    raise StartError("building the runtime image needs Python 3.11 (Debian bookworm's, for its packages' ABI): "
                     "install python3.11 or run cw from a Python 3.11")  # fmt: skip


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _console_scripts(python_dir: Path, bin_dir: Path) -> None:
    """Write /usr/local/bin launchers for :data:`SCRIPTS` from the installed packages' entry points."""
    from importlib.metadata import distributions

    bin_dir.mkdir(parents=True, exist_ok=True)
    for dist in distributions(path=[str(python_dir)]):
        for ep in dist.entry_points:
            if ep.group == "console_scripts" and ep.name in SCRIPTS:
                module, _, attr = ep.value.partition(":")
                script = bin_dir / ep.name
                # Guarded as pip's own launchers are: a program that starts processes by "spawn"
                # (transformers serve's model process) re-runs this file in each child.
                script.write_text(f"#!/usr/bin/python3\nimport sys\nfrom {module} import {attr.split('.')[0]}\n"
                                  f"if __name__ == '__main__':\n    sys.exit({attr}())\n")  # fmt: skip
                script.chmod(0o755)


def _docker_archive(out, ref: str, layers: list[Path], config: dict) -> None:
    """Write a docker-archive (layers, config, manifest.json) to the binary stream ``out``."""
    diff_ids = [_sha256_file(layer) for layer in layers]
    image_config = {
        "architecture": "amd64", "os": "linux", "config": config,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }  # fmt: skip
    config_bytes = json.dumps(image_config).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    names = [f"{d.split(':')[1]}/layer.tar" for d in diff_ids]
    manifest = json.dumps([{"Config": config_name, "RepoTags": [ref], "Layers": names}]).encode()
    with tarfile.open(fileobj=out, mode="w|") as archive:
        for layer, name in zip(layers, names):
            archive.add(str(layer), arcname=name)
        for name, data in ((config_name, config_bytes), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def import_archive(ctr: Sequence[str], ref: str, layers: list[Path], config: dict, log: Path) -> None:
    """Stream a docker-archive of ``layers`` into ``ctr images import -``."""
    with open(log, "ab") as out:
        proc = subprocess.Popen([*ctr, "images", "import", "-"], stdin=subprocess.PIPE,
                                stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        assert proc.stdin is not None
        try:
            _docker_archive(proc.stdin, ref, layers, config)
        finally:
            proc.stdin.close()
        rc = proc.wait()
    if rc != 0:
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-5:])
        raise StartError(f"importing {ref} failed (exit {rc}); see {log}: {tail}", str(log))


#: Where a containerd root keeps its blobs (content-addressed files, never changed once written).
BLOBS = Path("io.containerd.content.v1.content") / "blobs" / "sha256"


def share_blobs(source_root: Path, target_root: Path) -> int:
    """Make each blob ``target_root`` has and ``source_root`` has too one file: the target's copy is
    replaced by a hard link to the source's; how many were replaced.

    A blob's file is named by its digest (containerd checked it when the blob was written) and never
    changed afterwards, so two containerd roots may share it: a second node then costs only its
    unpacked snapshot on disk. ``ctr images import`` writes every blob anew, so this runs after it.
    Nothing is shared across filesystems (the link fails, the copy stays).
    """
    source, target = source_root / BLOBS, target_root / BLOBS
    if not source.is_dir() or not target.is_dir():
        return 0
    shared = 0
    for blob in target.iterdir():
        original = source / blob.name
        try:
            if not original.is_file() or original.stat().st_ino == blob.stat().st_ino:
                continue
            if original.stat().st_size != blob.stat().st_size:
                continue  # not the same content after all: keep both
            staged = blob.with_name(blob.name + ".cw-link")
            os.link(original, staged)
            os.replace(staged, blob)
        except OSError:
            continue
        shared += 1
    return shared


def copy_image(source_ctr: Sequence[str], target_ctr: Sequence[str], ref: str, source_root: Path,
               target_root: Path, log: Path) -> None:  # fmt: skip
    """Copy image ``ref`` from one node's containerd to another's: ``ctr images export`` piped into
    ``ctr images import`` (which unpacks it for the target's snapshotter); then the two roots share
    the blobs (:func:`share_blobs`).

    Raises:
        StartError: The export or the import failed (their output is in ``log``).
    """
    with open(log, "ab") as out:
        # /dev/stdout: ctr writes the archive to the pipe (its `export` takes a file name).
        exporter = subprocess.Popen([*source_ctr, "images", "export", "/dev/stdout", ref], stdout=subprocess.PIPE,
                                    stderr=out)  # fmt: skip
        importer = subprocess.Popen([*target_ctr, "images", "import", "-"], stdin=exporter.stdout, stdout=out,
                                    stderr=subprocess.STDOUT)  # fmt: skip
        assert exporter.stdout is not None
        exporter.stdout.close()  # the importer holds the pipe's read end now
        codes = (importer.wait(), exporter.wait())
    if any(codes):
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-5:])
        raise StartError(f"copying {ref} between the nodes' containerds failed (exit {codes}); see {log}: {tail}", str(log))
    share_blobs(source_root, target_root)


def import_pause(ctr: Sequence[str], ref: str, pause_binary: Path, log: Path) -> None:
    """Import the sandbox image: the pause program alone, as ``/pause``."""
    with tempfile.TemporaryDirectory(prefix="cw-pause-") as tmp:
        layer = Path(tmp) / "layer.tar"
        with tarfile.open(layer, "w") as tar:
            info = tar.gettarinfo(str(pause_binary), arcname="pause")
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o755
            with open(pause_binary, "rb") as fh:
                tar.addfile(info, fh)
        import_archive(ctr, ref, [layer], {"Entrypoint": ["/pause"]}, log)


def build_runtime(ctr: Sequence[str], workdir: Path, log: Path, say: Callable[[str], None]) -> str:
    """Build the runtime image in ``workdir`` (removed afterwards) and import it; its reference.

    Raises:
        StartError: A step failed (its output is in ``log``), or a tool is missing.
    """
    ref = runtime_image()
    for tool in ("mmdebstrap", "tar"):
        if not shutil.which(tool):
            raise StartError(f"building the runtime image needs `{tool}` (apt-get install -y {tool})")
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    try:
        base = workdir / "base.tar"
        say(f"building the runtime image {ref} (once per pin change): Debian {DEBIAN_SUITE} with python3 (1/4)")
        _run(["mmdebstrap", "--variant=minbase", "--include=python3,ca-certificates,procps",
              "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
              "--dpkgopt=path-exclude=/usr/share/locale/*", DEBIAN_SUITE, str(base)], "mmdebstrap", log)  # fmt: skip
        tree = workdir / "tree"
        python_dir = tree / PYTHON_DIR.lstrip("/")
        say("runtime image: the pinned training stack from PyPI (2/4; several GB cold)")
        env = {k: v for k, v in os.environ.items() if k not in ("PIP_NO_CACHE_DIR", "PYTHONPATH")}
        _run([_python311(), "-m", "pip", "install", "--quiet", "--no-warn-script-location", "--target",
              str(python_dir), "-r", str(requirements_file())], "pip install", log, env=env)  # fmt: skip
        shutil.rmtree(python_dir / "bin", ignore_errors=True)  # launchers with this machine's shebang
        _console_scripts(python_dir, tree / "usr" / "local" / "bin")
        say("runtime image: the tiny model (3/4)")
        _run([_python311(), str(Path(__file__).parent / "tiny_model.py"), str(tree / TINY_MODEL.lstrip("/"))],
             "the tiny model", log, env={**env, "PYTHONPATH": str(python_dir)})  # fmt: skip
        layer = workdir / "python.tar"
        _run(["tar", "--numeric-owner", "--owner=0", "--group=0", "-C", str(tree), "-cf", str(layer), "opt", "usr"],
             "tar", log)  # fmt: skip
        shutil.rmtree(tree)
        say("runtime image: importing into the node's containerd (4/4)")
        import_archive(ctr, ref, [base, layer], {"Env": list(IMAGE_ENV), "Cmd": ["python3"]}, log)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return ref
