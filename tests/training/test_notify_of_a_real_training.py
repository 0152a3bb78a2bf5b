"""`notify:` with a real trainer (issue 34 item 6): cw's rendered TRL SFT (the exact ConfigMap and
command, through cw_entrypoint.py, cw_fault.py and cw_notify.py) trains a tiny random Llama on CPU,
offline, and a webhook receiver on 127.0.0.1 gets the success through Apprise's json://; the copy
of stderr the notifier keeps loses no line of the trainer's log. A run that fails in the trainer
sends the exception's own line."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from training_helpers import CONFIGS_DIR, OFFLINE_ENV

from cw_cli.localrun.runner import LocalRunner

pytestmark = pytest.mark.training
pytest.importorskip("apprise")

CPU = {"use_cpu": True, "bf16": False, "report_to": "none", "logging_steps": 2, "save_strategy": "steps", "save_steps": 3,
       "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1, "dataloader_num_workers": 0, "seed": 0,
       "max_length": 64, "max_steps": 4}  # fmt: skip


@pytest.fixture
def receiver():
    got: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            got.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0)))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], got
    server.shutdown()
    server.server_close()


def _run(render_plan, tmp_path, port: int, name: str, sets: list[str]) -> tuple[int, list[str]]:
    config = yaml.safe_load((CONFIGS_DIR / "trl-sft.yaml").read_text(encoding="utf-8"))
    config["notify"] = {"urls": [f"json://127.0.0.1:{port}/cw"]}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    manifests = render_plan("trl", "sft", path, run_name=name, sets=sets)
    assert "cw_notify.py" in next(m for m in manifests if m["kind"] == "ConfigMap")["data"]
    (tmp_path / "tmp").mkdir(exist_ok=True)
    runner = LocalRunner(manifests, tmp_path / "volume", workdir=tmp_path / name, config_overrides=CPU,
                         extra_env={**OFFLINE_ENV, "TMPDIR": str(tmp_path / "tmp")}, cpu_only=True)  # fmt: skip
    lines: list[str] = []
    code = runner.run(lines.append)
    return code, lines


def test_a_real_training_tells_its_success_and_its_log_is_whole(render_plan, tiny_model, sft_dataset, tmp_path, receiver):
    port, got = receiver
    code, lines = _run(render_plan, tmp_path, port, "t-told", [f"model_name_or_path={tiny_model}", f"dataset_name={sft_dataset}"])
    log = "\n".join(lines)
    assert code == 0, "\n".join(lines[-50:])
    [sent] = got
    assert sent["title"] == "cw: t-told succeeded" and sent["type"] == "success", sent
    assert "exit code 0" in sent["message"] and str(tmp_path / "volume" / "t-told") in sent["message"]
    # The trainer's stderr (tqdm's bar, to its last step) still reached the log through the notifier's copy.
    assert "4/4 [" in log.replace("\r", "\n"), log[-3000:]
    assert "[cw-notify] sent 'cw: t-told succeeded' to 1 target(s)" in log


def test_a_trainer_that_fails_tells_the_exception(render_plan, tiny_model, tmp_path, receiver):
    port, got = receiver
    missing = tmp_path / "no-such-dataset"
    code, lines = _run(render_plan, tmp_path, port, "t-failed", [f"model_name_or_path={tiny_model}", f"dataset_name={missing}"])
    assert code not in (0, 75, 143), "\n".join(lines[-50:])
    [sent] = got
    assert sent["title"] == "cw: t-failed failed" and sent["type"] == "failure", sent
    assert f"exit code {code}" in sent["message"]
    # The rank's own exception, not the launcher's (accelerate's CalledProcessError comes last in the log).
    assert f"exit code {code}: FileNotFoundError: Couldn't find any data file at {missing}" in sent["message"], sent["message"]
    assert "CalledProcessError" not in sent["message"]
