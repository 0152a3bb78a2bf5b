"""The pure parts of cw's pod-side fault tolerance (cw_fault.py, cw_entrypoint.py) and the fields
that reach the pods: the stall timeout and its floor, the ranks' agreement (a real gloo all-reduce
across two processes), which checkpoint is complete, the sitecustomize shim, the grace period and
stall timeout in the rendered Job and JobSet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from unit_helpers import container, env_map, plan_for, pod_spec, write_config

from cw_cli.errors import ConfigError

RUNTIME = Path(__file__).resolve().parents[2] / "cw_cli" / "runtime"
sys.path.insert(0, str(RUNTIME))
import cw_entrypoint  # noqa: E402
import cw_fault  # noqa: E402

SFT = {"model_name_or_path": "m", "dataset_name": "d"}


def test_the_stall_timeout_has_a_floor_and_follows_the_runs_own_steps():
    assert cw_fault.stall_timeout([], 30.0) == 600  # the default floor
    assert cw_fault.stall_timeout([2.0, 2.0, 3.0], 500.0, floor_s=1) == 15  # 5 x the slowest step
    # Before three steps the time to the first one (model loading included) stands in for a step.
    assert cw_fault.stall_timeout([2.0], 40.0, floor_s=1) == 200
    assert cw_fault.stall_timeout([2.0, 2.0, 3.0], 500.0, floor_s=60) == 60
    assert cw_fault.stall_timeout([2.0, 2.0, 3.0], 500.0, floor_s=60, explicit_s=12) == 12  # stall_timeout wins


@given(
    st.lists(st.floats(0.0, 1e5), max_size=20),
    st.floats(0.0, 1e5),
    st.floats(0.0, 1e4),
    st.floats(0.0, 1e5),
)
def test_the_derived_timeout_is_never_below_the_floor_nor_below_five_slowest_steps(intervals, first, floor, extra):
    timeout = cw_fault.stall_timeout(intervals, first, floor_s=floor)
    assert timeout >= floor
    if len(intervals) >= cw_fault.MIN_INTERVALS:
        assert timeout >= cw_fault.STALL_FACTOR * max(intervals)
        # a slower step never shortens the timeout
        assert cw_fault.stall_timeout([*intervals, extra], first, floor_s=floor) >= timeout


@given(st.lists(st.booleans(), min_size=1, max_size=64))
def test_the_ranks_stop_when_any_rank_was_asked(flags):
    assert cw_fault.agree(flags) == any(flags)


_AGREE = """
import os, sys
sys.path.insert(0, sys.argv[1])
import torch.distributed as dist
import cw_fault
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", rank=rank, world_size=2)
state = cw_fault._RankState.__new__(cw_fault._RankState)
state.folder = cw_fault.Path(sys.argv[2]) / f"r{rank}"
state.folder.mkdir(parents=True, exist_ok=True)
state.signalled, state.group, state.group_ready = False, None, False
if rank == int(sys.argv[3]):
    (state.folder / cw_fault.STOP_FILE).write_text("stop")
print(int(state.agreed_stop()), flush=True)
dist.destroy_process_group()
"""


@pytest.mark.parametrize("asking", [1, -1])
def test_two_gloo_ranks_agree_on_the_stop_when_one_was_asked(tmp_path, asking):
    """Rank 1 alone finds the stop file: both ranks stop (all-reduce MAX); nobody asked: nobody stops."""
    port = 29500 + os.getpid() % 1000 + (asking + 1)
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "CUDA_VISIBLE_DEVICES": ""}
    procs = [
        subprocess.Popen([sys.executable, "-c", _AGREE, str(RUNTIME), str(tmp_path), str(asking)],
                         env={**env, "RANK": str(rank)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        for rank in (0, 1)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert [out.strip() for out, _ in outputs] == (["1", "1"] if asking >= 0 else ["0", "0"])


def _checkpoint(root: Path, step: int, state: bool = True, marker: bool = False) -> Path:
    folder = root / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    if state:
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    if marker:
        (folder / cw_fault.COMPLETE_MARKER).write_text("{}")
    return folder


def test_a_checkpoint_without_cws_marker_is_skipped_once_the_folder_has_marked_ones(tmp_path):
    assert cw_entrypoint.COMPLETE_MARKER == cw_fault.COMPLETE_MARKER
    two = _checkpoint(tmp_path, 2, marker=True)
    _checkpoint(tmp_path, 4)  # trainer_state.json written, the other ranks not done: no marker
    _checkpoint(tmp_path, 6, state=False)
    assert cw_entrypoint.latest_checkpoint(tmp_path) == two


def test_checkpoints_written_without_cw_fault_are_judged_by_trainer_state_as_before(tmp_path):
    _checkpoint(tmp_path, 2)
    four = _checkpoint(tmp_path, 4)
    _checkpoint(tmp_path, 6, state=False)
    assert cw_entrypoint.latest_checkpoint(tmp_path) == four


def test_the_shim_activates_cw_fault_and_still_runs_the_images_own_sitecustomize(tmp_path):
    shim, image = tmp_path / "shim", tmp_path / "image"
    shim.mkdir()
    image.mkdir()
    (shim / "sitecustomize.py").write_text(cw_fault.SHIM)
    (image / "sitecustomize.py").write_text("import builtins\nbuiltins.IMAGE_SITECUSTOMIZE = True\n")
    probe = "import builtins, sys; print(getattr(builtins, 'IMAGE_SITECUSTOMIZE', False), type(sys.meta_path[0]).__name__)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), str(RUNTIME), str(image)])}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["True", "_Finder"], done.stdout + done.stderr


def test_a_trainer_pod_gets_the_grace_period_and_no_stall_timeout_by_default(tmp_path):
    plan = plan_for("trl", "sft", write_config(tmp_path, SFT))
    job = plan.manifests[0]
    assert pod_spec(job)["terminationGracePeriodSeconds"] == 300
    assert "CW_STALL_TIMEOUT" not in env_map(container(job, "trainer"))


def test_grace_period_and_stall_timeout_reach_the_job_and_the_jobsets_pods(tmp_path):
    config = write_config(tmp_path, {**SFT, "grace_period": 900, "stall_timeout": 1200})
    job = plan_for("trl", "sft", config).manifests[0]
    assert pod_spec(job)["terminationGracePeriodSeconds"] == 900
    assert env_map(container(job, "trainer"))["CW_STALL_TIMEOUT"] == "1200"
    jobset = plan_for("trl", "sft", config, nodes=2, jobset_available=True).manifests[0]
    trainer = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "trainer")["template"]["spec"]
    assert trainer["template"]["spec"]["terminationGracePeriodSeconds"] == 900
    assert env_map(trainer["template"]["spec"]["containers"][0])["CW_STALL_TIMEOUT"] == "1200"


@pytest.mark.parametrize(
    ("field", "value"),
    [("grace_period", 0), ("grace_period", True), ("stall_timeout", 5), ("stall_timeout", "soon")],
)
def test_bad_grace_period_or_stall_timeout_is_refused_naming_the_field(tmp_path, field, value):
    with pytest.raises(ConfigError) as error:
        plan_for("trl", "sft", write_config(tmp_path, {**SFT, field: value}))
    assert field in str(error.value) + " ".join(getattr(error.value, "issues", []) or [])


def test_export_and_artifacts_follow_the_same_complete_checkpoint_rule(tmp_path):
    import cw_artifacts
    import cw_export

    assert cw_export.COMPLETE_MARKER == cw_artifacts.COMPLETE_MARKER == cw_fault.COMPLETE_MARKER
    _checkpoint(tmp_path, 2, marker=True)
    _checkpoint(tmp_path, 4)  # cut short after trainer_state.json
    assert [step for step, _ in cw_export.complete_checkpoints(tmp_path)] == [2]
    listed = {a["step"]: a["complete"] for a in cw_artifacts.list_artifacts(str(tmp_path))["artifacts"]}
    assert listed == {2: True, 4: False}
    (tmp_path / "checkpoint-2" / cw_fault.COMPLETE_MARKER).unlink()  # a run without cw_fault: as before
    assert [step for step, _ in cw_export.complete_checkpoints(tmp_path)] == [2, 4]


def test_the_supervisor_passes_the_commands_exit_code_and_works_without_a_writable_tmp(tmp_path, monkeypatch):
    import tempfile

    real = tempfile.mkdtemp

    def no_tmp(suffix=None, prefix=None, dir=None):  # noqa: A002 - tempfile's own name
        if dir is None:
            raise PermissionError(13, "read-only file system", "/tmp")
        return real(suffix, prefix, dir)

    monkeypatch.setattr(tempfile, "mkdtemp", no_tmp)
    assert cw_fault.supervise([sys.executable, "-c", "raise SystemExit(7)"], tmp_path / "run") == 7
    assert cw_fault.supervise([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
                              tmp_path / "run") == 137  # fmt: skip
    assert not (tmp_path / "run" / ".cw" / "stall.json").exists()


def test_a_stalled_rank_that_never_armed_its_stack_file_still_gets_a_stacks_entry(tmp_path):
    """A heartbeating process with no stacks file (it hung before faulthandler was armed) must not
    crash the supervisor's dump: the stall is still recorded, with a line saying no stacks came."""
    ft_dir, run_dir = tmp_path / "ft", tmp_path / "run"
    (ft_dir / "stacks").mkdir(parents=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGUSR2, signal.SIG_IGN); time.sleep(60)"])
    try:
        target = cw_fault._dump_stacks(ft_dir, run_dir, [{"rank": 0, "pid": sleeper.pid}], "20261127T000000Z")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert (target / "rank-0.txt").read_text().startswith("(no stacks written")


def test_two_armed_copies_of_the_hook_patch_the_trainer_once_without_recursing(tmp_path):
    """Two copies of cw_fault armed in one process (two shims on the path, as a benchmark's own
    sitecustomize chain made it) found each other endlessly: RecursionError at `import trl`."""
    package = tmp_path / "site" / "transformers"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "trainer.py").write_text("class Trainer:\n    def __init__(self):\n        self.made = True\n")
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "cw_fault_copy.py").write_text((Path(cw_fault.__file__)).read_text())
    script = (
        "import sys\n"
        f"sys.path[:0] = [{str(tmp_path / 'site')!r}, {str(copy)!r}, {str(Path(cw_fault.__file__).parent)!r}]\n"
        "import cw_fault, cw_fault_copy\n"
        "cw_fault.activate(); cw_fault_copy.activate(); cw_fault.activate()\n"
        "import transformers.trainer as t\n"
        "print(sum(getattr(f, 'cw_fault_hook', False) for f in sys.meta_path), t.Trainer.__init__._cw_patched, t.Trainer().made)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "True", "True"]


_HANGS_LOADING = """
import time
def load_the_model_forever():
    end = time.monotonic() + 60  # "forever" for the test: code that does not watch ends it with 0
    while time.monotonic() < end:
        time.sleep(0.1)
load_the_model_forever()
"""


def test_a_hang_before_the_first_step_is_caught_with_a_startup_timeout(tmp_path, monkeypatch):
    """A command that never reaches its first step (a hang in loading or NCCL set-up) is stalled
    once `startup_timeout` runs out: every Python process of it that the shim armed writes its
    stacks (here the hung frame), stall.json and the status line are written, and the pod exits 75."""
    monkeypatch.setenv(cw_fault.STARTUP_TIMEOUT_ENV, "3")
    run = tmp_path / "run"
    code = cw_fault.supervise([sys.executable, "-c", _HANGS_LOADING], run, poll_s=0.2)
    assert code == cw_fault.STALL_EXIT
    report = json.loads((run / ".cw" / "stall.json").read_text())
    assert report["last_step"] == 0 and report["timeout_s"] == 3.0 and report["ranks"] == []
    (stacks,) = (run / report["stacks"]).glob("pid-*.txt")
    assert "load_the_model_forever" in stacks.read_text()


def test_before_the_first_step_nothing_is_watched_by_default(tmp_path, monkeypatch):
    """Loading and data preparation take from seconds to hours: without `startup_timeout` a slow
    start is no stall, however far beyond the stall floor it goes."""
    monkeypatch.delenv(cw_fault.STARTUP_TIMEOUT_ENV, raising=False)
    monkeypatch.setenv(cw_fault.STALL_TIMEOUT_ENV, "1")
    monkeypatch.setenv("CW_STALL_FLOOR", "1")
    code = cw_fault.supervise([sys.executable, "-c", "import time; time.sleep(3)"], tmp_path / "run", poll_s=0.2)
    assert code == 0 and not (tmp_path / "run" / ".cw" / "stall.json").exists()


def test_the_startup_timeout_reaches_the_trainer_and_is_checked(tmp_path):
    job = plan_for("trl", "sft", write_config(tmp_path, {**SFT, "startup_timeout": 3600})).manifests[0]
    assert env_map(container(job, "trainer"))["CW_STARTUP_TIMEOUT"] == "3600"
    assert "CW_STARTUP_TIMEOUT" not in env_map(container(plan_for("trl", "sft", write_config(tmp_path, SFT)).manifests[0], "trainer"))
    jobset = plan_for("trl", "sft", write_config(tmp_path, {**SFT, "startup_timeout": 3600}), nodes=2, jobset_available=True)
    trainer = next(r for r in jobset.manifests[0]["spec"]["replicatedJobs"] if r["name"] == "trainer")["template"]["spec"]
    assert env_map(trainer["template"]["spec"]["containers"][0])["CW_STARTUP_TIMEOUT"] == "3600"
    with pytest.raises(ConfigError) as error:
        plan_for("trl", "sft", write_config(tmp_path, {**SFT, "startup_timeout": 1}))
    assert "startup_timeout" in str(error.value) + " ".join(getattr(error.value, "issues", []) or [])


def _axolotls_choice(output_dir: Path) -> str | None:
    """The checkpoint Axolotl resumes from by itself: the highest ``checkpoint-<N>``, complete or
    not (axolotl 0.19 ``utils/train.py`` ``determine_last_checkpoint``)."""
    found = [p for p in output_dir.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()]
    return max(found, key=lambda p: int(p.name.split("-")[-1])).name if found else None


def test_a_save_cut_short_is_moved_out_of_a_self_resuming_frameworks_way(tmp_path):
    _checkpoint(tmp_path, 2, marker=True)
    _checkpoint(tmp_path, 4, marker=True)
    _checkpoint(tmp_path, 6)  # SIGKILL after trainer_state.json, before every rank finished
    _checkpoint(tmp_path, 8, state=False)  # SIGKILL early in the save
    assert _axolotls_choice(tmp_path) == "checkpoint-8"
    assert cw_entrypoint.set_aside_incomplete(tmp_path) == ["checkpoint-6", "checkpoint-8"]
    assert _axolotls_choice(tmp_path) == "checkpoint-4"
    assert sorted(p.name.rsplit("-", 1)[0] for p in (tmp_path / ".cw" / "incomplete").iterdir()) == ["checkpoint-6", "checkpoint-8"]
    assert cw_entrypoint.set_aside_incomplete(tmp_path) == []  # nothing more to move


def test_without_cws_markers_only_an_unreadable_save_is_moved(tmp_path):
    _checkpoint(tmp_path, 2)
    _checkpoint(tmp_path, 4)  # a run saved without cw_fault: trainer_state.json decides, as before
    _checkpoint(tmp_path, 6, state=False)
    assert cw_entrypoint.set_aside_incomplete(tmp_path) == ["checkpoint-6"]
    assert _axolotls_choice(tmp_path) == "checkpoint-4"


def test_the_entrypoint_clears_the_way_before_a_self_resuming_framework_starts(tmp_path):
    _checkpoint(tmp_path, 2, marker=True)
    _checkpoint(tmp_path, 4)
    listing = "import os; print(sorted(n for n in os.listdir('.') if n.startswith('checkpoint-')))"
    env = {**os.environ, "CW_FAULT_TOLERANCE": "0"}
    env.pop(cw_entrypoint.IDENTITY_ENV, None)
    done = subprocess.run([sys.executable, str(RUNTIME / "cw_entrypoint.py"), "--no-resume", "--", sys.executable, "-c", listing],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['checkpoint-2']"
    assert "incomplete checkpoint-4 moved to .cw/incomplete/" in done.stderr


def test_what_the_trainer_wrote_is_shared_with_the_volumes_other_users(tmp_path):
    """A 0600 file (transformers writes its shards through mkstemp) becomes readable by the reader
    pod's user; folders searchable; a symbolic link and its target's mode are left alone."""
    import os
    import stat

    shard = tmp_path / "checkpoint-20" / "model.safetensors"
    shard.parent.mkdir()
    shard.write_bytes(b"x")
    shard.chmod(0o600)
    shard.parent.chmod(0o700)
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.write_text("secret")
    outside.chmod(0o600)
    (tmp_path / "link").symlink_to(outside)
    cw_fault.share_with_readers(tmp_path)
    assert stat.S_IMODE(shard.stat().st_mode) == 0o644
    assert stat.S_IMODE(shard.parent.stat().st_mode) == 0o755
    assert stat.S_IMODE(os.stat(outside).st_mode) == 0o600
