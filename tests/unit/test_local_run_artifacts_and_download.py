"""`cw artifacts --local` and `cw download --local` read a `--local` run's folder (./cw-local/<run>):
the listing is the pod-side lister's own (the same document a cluster run gives), and a download
copies the chosen folder only (final: the model's files, not the checkpoints), verified, going on
after an interruption without copying finished files again."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from unit_helpers import builtin_registry

from cw_cli.localrun.artifacts import MARKER, download_local, list_local_artifacts, local_run_dir
from cw_cli.localrun.runner import write_run_record


def _trl_run(root: Path, name: str = "my-sft", output: str | None = None) -> Path:
    """What `cw trl sft --local` leaves: ./cw-local/<run> stands in for /checkpoints, the trainer's
    folder is <run>/<output_dir>, with two checkpoints (one half-written) and the final model."""
    volume = root / "cw-local" / name
    run_dir = volume / name / (output or "")
    for step, loss in ((1, 2.5), (2, 1.5)):
        checkpoint = run_dir / f"checkpoint-{step}"
        checkpoint.mkdir(parents=True)
        (checkpoint / "model.safetensors").write_bytes(os.urandom(3000))
        (checkpoint / "optimizer.pt").write_bytes(b"\1" * 5000)
        (checkpoint / "trainer_state.json").write_text(json.dumps(
            {"global_step": step, "log_history": [{"step": step, "loss": loss}]}))  # fmt: skip
    (run_dir / "checkpoint-3").mkdir()
    (run_dir / "checkpoint-3" / "model.safetensors").write_bytes(b"\0" * 10)
    for name_, size in (("model.safetensors", 4000), ("config.json", 30), ("tokenizer.json", 50), ("training_args.bin", 20)):
        (run_dir / name_).write_bytes(os.urandom(size))
    return run_dir


@pytest.fixture
def cw(monkeypatch, tmp_path):
    from cw_cli.cli.app import build_app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))  # a cluster asked would be exit 3
    app = build_app(builtin_registry())
    return lambda *args: CliRunner().invoke(app, list(args))


def test_artifacts_lists_a_local_run_as_the_reader_pod_would(cw, tmp_path):
    run_dir = _trl_run(tmp_path)
    result = cw("artifacts", "my-sft", "--local", "-o", "json")
    assert result.exit_code == 0, result.output
    listing = json.loads(result.stdout)
    assert listing["run_dir"] == str(run_dir.resolve())
    rows = [(a["kind"], a["step"], a["complete"], a["metrics"].get("loss")) for a in listing["artifacts"]]
    assert rows == [("checkpoint", 1, True, 2.5), ("checkpoint", 2, True, 1.5), ("checkpoint", 3, False, None),
                    ("final", 2, True, 1.5)]  # fmt: skip
    final = listing["artifacts"][-1]
    assert final["files"] == 4 and final["size"] == 4100  # the files beside the checkpoints only
    # The same folder given as a path (what a user copies from the --local run's output line).
    by_path = cw("artifacts", "cw-local/my-sft", "-o", "json")
    assert by_path.exit_code == 0 and json.loads(by_path.stdout) == listing
    table = cw("artifacts", "my-sft", "--local")
    assert table.exit_code == 0 and "final" in table.stdout and "checkpoint-2" in table.stdout


def test_the_record_the_local_runner_writes_finds_a_relative_output_dir(tmp_path):
    run_dir = _trl_run(tmp_path, output="outputs/sft")
    volume = tmp_path / "cw-local" / "my-sft"
    (volume / "elsewhere" / "checkpoint-9").mkdir(parents=True)  # two candidates: the record decides
    config = tmp_path / "config.yaml"
    config.write_text("output_dir: outputs/sft\nlearning_rate: 1e-5\n")
    write_run_record(volume.resolve(), (volume / "my-sft").resolve(), {"config.yaml": config})
    assert json.loads((volume / ".cw-local-run.json").read_text()) == {"run_dir": "my-sft/outputs/sft"}
    assert local_run_dir("my-sft", tmp_path) == volume / "my-sft/outputs/sft" == run_dir


def test_download_final_copies_the_model_files_only_verified_and_resumes(cw, tmp_path):
    run_dir = _trl_run(tmp_path)
    result = cw("download", "my-sft", "out", "--local")
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == sorted([MARKER, "config.json", "model.safetensors", "tokenizer.json",
                                                           "training_args.bin"])  # fmt: skip
    assert (out / "model.safetensors").read_bytes() == (run_dir / "model.safetensors").read_bytes()
    assert "downloaded" in result.stderr and "4 files" in result.stderr and "verified (SHA-256)" in result.stderr

    (out / "tokenizer.json").unlink()  # an interrupted download: one file missing
    (out / "config.json").write_bytes(b"x")  # and one cut short
    seen: list[int] = []
    done = download_local("my-sft", "final", out, started=lambda total, have: seen.append(have), base=tmp_path)
    assert done["resumed_bytes"] == seen[0] == 4000 + 20  # only the two whole files were kept
    assert (out / "config.json").read_bytes() == (run_dir / "config.json").read_bytes()


def test_download_of_a_checkpoint_takes_its_folder_and_refuses_a_half_written_one(cw, tmp_path):
    run_dir = _trl_run(tmp_path)
    result = cw("download", "my-sft", "ck", "--local", "--checkpoint", "latest")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == sorted([MARKER, "model.safetensors", "optimizer.pt",
                                                                         "trainer_state.json"])  # fmt: skip
    assert (tmp_path / "ck" / "model.safetensors").read_bytes() == (run_dir / "checkpoint-2" / "model.safetensors").read_bytes()
    half = cw("download", "my-sft", "half", "--local", "--checkpoint", "3")
    assert half.exit_code == 2 and "being written" in half.stderr
    other = cw("download", "my-sft", "ck", "--local", "--checkpoint", "1")
    assert other.exit_code == 5 and "holds a download of" in other.stderr


@pytest.mark.parametrize(
    "args,code,message",
    [
        (["artifacts", "nosuch", "--local"], 4, "no local run 'nosuch'"),
        (["download", "nosuch", "d", "--local"], 4, "no local run 'nosuch'"),
        (["download", "my-sft", "/proc/x", "--local"], 2, "cannot write there"),
        (["download", "my-sft", "d", "--local", "--checkpoint", "7"], 2, "no 7 to download; there: checkpoint 1, checkpoint 2, final"),
    ],
)
def test_what_a_local_run_lacks_is_one_line_with_its_exit_code(cw, tmp_path, args, code, message):
    _trl_run(tmp_path)
    result = cw(*args)
    assert result.exit_code == code and message in result.stderr, result.output
    assert "Traceback" not in result.output


def test_the_listing_is_the_pod_side_listers_document(tmp_path):
    """Same program, same document: run here as the reader pod runs it."""
    import subprocess
    import sys

    from cw_cli.frameworks.runtime_files import RUNTIME_DIR

    run_dir = _trl_run(tmp_path)
    pod = subprocess.run([sys.executable, str(RUNTIME_DIR / "cw_artifacts.py"), str(run_dir.resolve())],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert list_local_artifacts("my-sft", tmp_path) == {**json.loads(pod.stdout), "run_dir": str(run_dir.resolve())}


def test_artifacts_shows_the_evaluations_deciding_score_beside_each_model_and_the_base(cw, tmp_path):
    run_dir = _trl_run(tmp_path)
    for folder, name, step, value in ((run_dir / "checkpoint-1" / "cw-eval", "checkpoint-1", 1, 0.25),
                                      (run_dir / "cw-eval" / "final", "final", None, 0.5),
                                      (run_dir / "cw-eval" / "base", "base", None, 0.125)):  # fmt: skip
        folder.mkdir(parents=True)
        (folder / "scores.json").write_text(json.dumps(
            {"checkpoint": name, "step": step, "model": "Qwen/Qwen2.5-0.5B" if name == "base" else str(run_dir),
             "harness": "lm-eval 0.4.13", "metric": "hellaswag/acc_norm", "higher_is_better": True,
             "scores": {"hellaswag/acc_norm": value, "hellaswag/acc": 0.0}, "finished_at": "2026-11-27T15:00:00Z"}))  # fmt: skip
    table = cw("artifacts", "my-sft", "--local")
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert "HELLASWAG/ACC_NORM" in lines[0]
    by_kind = {line.split()[0] + (line.split()[1] if line.startswith("checkpoint") else ""): line for line in lines[1:]}
    assert "0.125" in by_kind["base"] and "Qwen/Qwen2.5-0.5B" in by_kind["base"]
    assert "0.25" in by_kind["checkpoint1"] and "0.5" in by_kind["final"] and "0.25" not in by_kind["checkpoint2"]
