"""Helpers shared by the training tests (processes, paths, the launcher wrapper)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RUNTIME_DIR = REPO / "cw_cli" / "runtime"
CONFIGS_DIR = REPO / "configs"

# Nothing in these tests may reach the Hugging Face hub.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "WANDB_DISABLED": "true",
    "WANDB_MODE": "disabled",
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_NUM_THREADS": "1",
    "CUDA_VISIBLE_DEVICES": "",
}
LAUNCHER_KEY = "cw_entrypoint.py"


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 120.0, proc: subprocess.Popen | None = None) -> dict:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return json.loads(resp.read())
        except Exception as exc:  # noqa: BLE001 - not up yet
            last = exc
            time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {timeout}s: {last}")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


class RewardServerProcess:
    """``reward_server.py`` as a subprocess on 127.0.0.1:<free port>, stopped by PID."""

    def __init__(self, script: Path, model: Path, log: Path, extra_args: list[str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = {**os.environ, **OFFLINE_ENV}
        env.pop("PYTHONPATH", None)  # prove the file is standalone
        self._fh = open(log, "w", encoding="utf-8")
        self.proc = subprocess.Popen(
            [sys.executable, str(script), "--model", str(model), "--host", "127.0.0.1",
             "--port", str(self.port), "--batch-size", "4", *(extra_args or [])],
            stdout=self._fh, stderr=subprocess.STDOUT, env=env, cwd=log.parent,
        )
        try:
            wait_http(self.url + "/health", proc=self.proc)
        except Exception:
            self.stop()
            raise RuntimeError("reward server did not start:\n" + log.read_text()) from None

    def stats(self) -> dict:
        return get_json(self.url + "/stats")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._fh.close()


def ensure_launcher(manifests: list[dict]) -> tuple[list[dict], bool]:
    """Make the trainer run through cw_entrypoint.py (the resume wrapper).

    Returns the manifests and whether the renderer already did it. Until the renderer adopts
    ``python /etc/cw/cw_entrypoint.py <command>`` and ships ``cw_entrypoint.py`` in the ConfigMap, the
    tests add both here, exactly as the renderer should."""
    import copy

    manifests = copy.deepcopy(manifests)
    container = next(
        c for m in manifests if m["kind"] == "Job"
        for c in m["spec"]["template"]["spec"]["containers"] if c["name"] == "trainer"
    )
    command = list(container.get("command") or []) + list(container.get("args") or [])
    adopted = any(part.endswith(LAUNCHER_KEY) or part == "cw_entrypoint" for part in command[:3])
    if not adopted:
        container["command"] = ["python", f"/etc/cw/{LAUNCHER_KEY}", *command]
        container.pop("args", None)
        for m in manifests:
            if m["kind"] == "ConfigMap":
                m.setdefault("data", {})[LAUNCHER_KEY] = (RUNTIME_DIR / LAUNCHER_KEY).read_text()
    return manifests, adopted
