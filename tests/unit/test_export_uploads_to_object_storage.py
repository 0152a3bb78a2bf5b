"""`cw export RUN --to s3://...`: the export pod's own program (cw_export.py, run as the Job runs it,
in a process of its own) copies a real-size export to a real S3 server (moto in server mode on
this machine) through fsspec/s3fs, with the credentials and endpoint taken from the environment as
the Job's Secrets give them; the bytes arrive whole (size and SHA-256), a large file goes up in
parts, export.json goes last, and a failed upload is one line with exit 4."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cw_cli.frameworks.runtime_files import RUNTIME_DIR

moto_server = pytest.importorskip("moto.server", reason="the test extra installs moto[server]")
pytest.importorskip("s3fs", reason="the test extra installs s3fs")

BUCKET = "cw-models"
#: A model's weights at a size where s3fs uploads in parts (its block is 50 MiB).
WEIGHTS_MIB = 320


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on a free local port, with one bucket; yields the environment a Job gives."""
    import boto3

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ACCESS_KEY_ID": "cw-test", "AWS_SECRET_ACCESS_KEY": "cw-test-secret", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://{host}:{port}"}  # fmt: skip
    client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                          aws_access_key_id="cw-test", aws_secret_access_key="cw-test-secret")  # fmt: skip
    client.create_bucket(Bucket=BUCKET)
    yield env, client
    server.stop()


def _finished_run(root: Path) -> tuple[Path, str]:
    """A run folder as the Trainer leaves it: a checkpoint, and the final model beside it."""
    run_dir = root / "ex" / "outputs" / "sft"
    (run_dir / "checkpoint-10").mkdir(parents=True)
    (run_dir / "checkpoint-10" / "trainer_state.json").write_text('{"global_step": 10}')
    (run_dir / "checkpoint-10" / "optimizer.pt").write_bytes(b"\1" * 1000)
    digest = hashlib.sha256()
    block = os.urandom(1 << 20)
    with open(run_dir / "model.safetensors", "wb") as handle:
        for index in range(WEIGHTS_MIB):  # every MiB different, so a misplaced part changes the hash
            chunk = index.to_bytes(8, "little") + block[8:]
            handle.write(chunk)
            digest.update(chunk)
    (run_dir / "config.json").write_text('{"model_type": "llama"}')
    (run_dir / "tokenizer.json").write_text("{}")
    (run_dir / "training_args.bin").write_bytes(b"\2" * 100)
    return run_dir, digest.hexdigest()


def _export(run_dir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(RUNTIME_DIR / "cw_export.py"), "--run-dir", str(run_dir), *args]
    return subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True, timeout=900,
                          stdin=subprocess.DEVNULL)  # fmt: skip


def _sha256_of_object(client, key: str) -> tuple[int, str]:
    body = client.get_object(Bucket=BUCKET, Key=key)["Body"]
    digest, size = hashlib.sha256(), 0
    for chunk in iter(lambda: body.read(1 << 20), b""):
        digest.update(chunk)
        size += len(chunk)
    return size, digest.hexdigest()


def test_a_320_mib_export_arrives_whole_in_s3_in_parts_with_export_json_last(s3, tmp_path):
    env, client = s3
    run_dir, weights_sha = _finished_run(tmp_path)
    done = _export(run_dir, env, "--to", f"s3://{BUCKET}/runs/ex/final")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"uploaded to s3://{BUCKET}/runs/ex/final/" in done.stderr
    objects = {o["Key"]: o for o in client.list_objects_v2(Bucket=BUCKET, Prefix="runs/ex/final/")["Contents"]}
    assert sorted(objects) == [f"runs/ex/final/{name}" for name in
                               ("config.json", "export.json", "model.safetensors", "tokenizer.json")]  # fmt: skip
    size, sha = _sha256_of_object(client, "runs/ex/final/model.safetensors")
    assert (size, sha) == (WEIGHTS_MIB << 20, weights_sha)
    assert "-" in objects["runs/ex/final/model.safetensors"]["ETag"]  # a multipart upload's ETag: md5-of-parts-N
    manifest = json.loads(client.get_object(Bucket=BUCKET, Key="runs/ex/final/export.json")["Body"].read())
    assert manifest["files"]["model.safetensors"] == {"size": WEIGHTS_MIB << 20, "sha256": weights_sha}
    assert objects["runs/ex/final/export.json"]["LastModified"] >= objects["runs/ex/final/model.safetensors"]["LastModified"]
    lines = done.stderr.splitlines()
    assert [line for line in lines if line.startswith("[cw-export]   ")][-1] == "[cw-export]   export.json: " + str(
        (run_dir / "exported" / "final" / "export.json").stat().st_size) + " bytes"  # fmt: skip

    # The export is on the volume now: a second upload elsewhere reuses it instead of failing with exit 3.
    again = _export(run_dir, env, "--to", f"s3://{BUCKET}/copy")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "uploading it as it is" in again.stderr
    assert _sha256_of_object(client, "copy/model.safetensors") == (WEIGHTS_MIB << 20, weights_sha)


def test_a_missing_bucket_is_one_line_and_exit_4(s3, tmp_path):
    env, _ = s3
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "model.safetensors").write_bytes(b"\0" * 100)
    done = _export(run_dir, env, "--to", "s3://no-such-bucket/x")
    assert done.returncode == 4, done.stderr
    assert "Traceback" not in done.stderr and "uploading" in done.stderr and "no-such-bucket" in done.stderr


@pytest.mark.parametrize("url", ["s3://B/x", "file:///etc", "s3://bucket/../x", "s3://bucket/a//b", "https://x/y",
                                 "s3://bucket/a b", "s3://bu"])  # fmt: skip
def test_a_bad_destination_is_refused_before_exporting(tmp_path, url):
    (tmp_path / "model.safetensors").write_bytes(b"\0")
    done = _export(tmp_path, {}, "--to", url)
    assert done.returncode == 2 and "--to" in done.stderr, done.stderr
    assert not (tmp_path / "exported").exists()
