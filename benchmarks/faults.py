"""The fault campaign (issue 34): faults injected into real CPU trainings and into runs on the test cluster.

CPU part. A tiny random Llama (the training tests' own builder) trains with cw's exact rendered TRL
SFT command (``cw_cli.render.plan.build_plan``, the code of ``--dry-run``), run as the trainer pod
runs it: cw's local runner writes the ConfigMap's files and starts the container's command
(``python cw_entrypoint.py trl sft ...`` -> ``cw_fault`` supervisor -> the ranks). Faults follow one
another in one run folder, as a pod's restarts do: after each fault the same command starts again
on the same folder (what the restarted pod runs), and the next fault hits that restart. Faults,
at seeded-random steps:

* ``sigterm``: SIGTERM to the entrypoint only, as the kubelet signals a container's PID 1 (warned:
  preemption, eviction, drain). Goal: at most 1 step lost.
* ``sigkill``: SIGKILL to every process of the pod (unwarned: node loss, OOM). At most
  ``save_steps`` lost.
* ``sigkill-save``: SIGKILL while a checkpoint is being written: the save at the next save step
  is slowed by the training tests' hook (tests/training/fault_hooks, chained by cw's shim), whose
  sentinel file says the save has begun (the folder exists without ``.cw-complete``); the restart
  must skip that checkpoint.
* ``sigstop``: SIGSTOP to rank 1 of 2 gloo ranks (a hung rank): the supervisor's stall watch
  (``stall_timeout: 10``) dumps the stacks and exits 75; the restart resumes.

Measured per fault: recovered (the restart resumed from a complete checkpoint and logged a step
past it), steps lost (the last step every rank had finished at the fault minus the step resumed
from), seconds from the fault to the restart's first step (this machine restarts at once: a
cluster adds the pod's rescheduling and image pull), the exit code. Steps sleep
``CW_TEST_STEP_SLEEP`` (0.3 s) so a step is a well-defined moment. Plus one healthy 2-rank run with
2 s steps and the derived stall timeout's floor lowered to 1 s (``CW_STALL_FLOOR``): it must raise
no alarm; so must every launch that got no SIGSTOP.

Cluster part. cw's test cluster (``cw_cli.testcluster``: real API server, scheduler, controllers,
JobSet and Kueue, KWOK's fake 8-GPU nodes) and the real ``cw`` CLI launching runs. Faults:

* ``job-evict``: a 1-node run (a Job), its pod evicted through the Eviction API (policy/v1).
* ``job-drain``: a Job's node cordoned and its pods evicted (what ``kubectl drain`` does).
* ``job-preempt``: two low-priority queued runs fill the ClusterQueue; a high-priority one arrives;
  Kueue preempts one, which is admitted again when the high one ends (its pods then are new).
* ``job-delete``: a Job's pod deleted (``kubectl delete pod``).
* ``jobset-fail``: a 2-node run (a JobSet), rank 1's trainer exits 1 (KWOK's pod-fail stage).
* ``jobset-evict``: the same, rank 1 evicted through the Eviction API.
* ``jobset-delete``: the same, rank 1's pod deleted.
* ``jobset-drain``: the same, rank 1's node cordoned and its pods evicted.

Measured: recovered (new trainer pods created), seconds from the fault to the new pods'
``creationTimestamp`` (1 s resolution) and to this script seeing them (polling, 0.1 s), and
whether the Job (``status.failed``) or JobSet (``restartsCountTowardsMax``) counted the fault
against its limit. KWOK pods run no code: steps lost is n/a there.

The notification column (CPU): the run's ``notify:`` points Apprise's ``json://`` at a webhook on
127.0.0.1 (``http.server``); ``notified`` lists the messages received between the fault and the
restart's first step (``restarted`` from the restarted pod, ``stalled`` after a stall). A cw without
``cw_notify.py`` or the ``notify`` field reads ``n/a (not yet)``.

Usage:
    .venv/bin/python benchmarks/faults.py                        # 12 CPU + 8 cluster faults
    .venv/bin/python benchmarks/faults.py --cpu-faults 2 --cluster-faults 0 --json out.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TRAINING_TESTS = ROOT / "tests" / "training"
HOOKS = TRAINING_TESTS / "fault_hooks"
SFT_CONFIG = ROOT / "configs" / "trl-sft.yaml"
NOTIFY_MODULE = ROOT / "cw_cli" / "features" / "notify" / "pod" / "cw_notify.py"

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
SAVE_STEPS = 5
STEP_SLEEP = "0.3"
STALL_TIMEOUT = 10
CPU_OVERRIDES = {
    "use_cpu": True,
    "bf16": False,
    "report_to": "none",
    "logging_steps": 1,
    "save_strategy": "steps",
    "save_steps": SAVE_STEPS,
    "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 1,
    "dataloader_num_workers": 0,
    "seed": 0,
    "max_length": 64,
    "max_steps": 2000,
}
CPU_KINDS = ("sigterm", "sigkill", "sigkill-save", "sigstop")
CLUSTER_KINDS = ("job-evict", "job-drain", "job-preempt", "jobset-fail", "jobset-evict", "jobset-delete",
                 "job-delete", "jobset-drain")  # fmt: skip
WARNED = {"sigterm", "job-evict", "job-drain", "job-preempt", "jobset-evict", "jobset-drain"}
NOT_YET = "n/a (not yet)"
_RESUMED = re.compile(r"resuming from checkpoint \S*checkpoint-(\d+)")


@dataclass
class Row:
    """One fault and what it cost."""

    part: str
    fault: str
    warned: bool
    recovered: bool = False
    steps_lost: int | None = None
    to_next_s: float | None = None  # CPU: fault to the restart's first step; cluster: to the new pods (polling)
    to_created_s: float | None = None  # cluster: fault to the new pods' creationTimestamp
    counted: str = "n/a"
    notified: str = NOT_YET
    exit_code: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- CPU part


def _training_fixtures():
    """The training tests' conftest (the tiny model's tokenizer and config, the chat rows)."""
    sys.path.insert(0, str(TRAINING_TESTS))
    spec = importlib.util.spec_from_file_location("cw_training_fixtures", TRAINING_TESTS / "conftest.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_assets(folder: Path) -> tuple[Path, Path]:
    """A 2-layer random Llama with a word-level tokenizer, and a conversational SFT dataset."""
    import torch
    from transformers import GenerationConfig, LlamaForCausalLM

    fixtures = _training_fixtures()
    torch.manual_seed(0)
    model_dir, data_dir = folder / "policy", folder / "data-sft"
    tok = fixtures._build_tokenizer()
    model = LlamaForCausalLM(fixtures._llama_config(tok))
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    rows = [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
            for q, a in zip(fixtures._QUESTIONS * 4, fixtures._ANSWERS * 4)]  # fmt: skip
    data_dir.mkdir(parents=True)
    (data_dir / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return model_dir, data_dir


def render(run_name: str, sets: list[str], gpu: int) -> list[dict]:
    """The manifests ``cw trl sft configs/trl-sft.yaml --set ... --gpu N`` would apply."""
    from cw_cli.config.loader import load_run_config
    from cw_cli.config.options import LaunchOptions
    from cw_cli.frameworks.registry import FrameworkRegistry
    from cw_cli.render.plan import RunRequest, build_plan

    registry = FrameworkRegistry().load_all(include_plugins=False)
    loaded, ttype = registry.resolve_type("trl", "sft")
    cfg = load_run_config(SFT_CONFIG, loaded.framework, ttype, sets=sets, flags=LaunchOptions(gpu=gpu))
    return build_plan(RunRequest(framework=loaded, training_type=ttype, config=cfg, run_name=run_name)).manifests


class Launch:
    """One start of the trainer container's command (a pod's life), in a thread."""

    def __init__(
        self, manifests: list[dict], volume: Path, workdir: Path, env: dict[str, str], overrides: dict[str, Any] | None = None
    ) -> None:
        from cw_cli.localrun.runner import LocalRunner

        self.tmp = workdir / "tmp"
        self.tmp.mkdir(parents=True)
        extra = {**OFFLINE_ENV, "TMPDIR": str(self.tmp), "PYTHONPATH": str(HOOKS), "CW_TEST_STEP_SLEEP": STEP_SLEEP,
                 **env}  # fmt: skip
        self.runner = LocalRunner(manifests, volume, workdir=workdir, config_overrides={**CPU_OVERRIDES, **(overrides or {})},
                                  extra_env=extra,
                                  cpu_only=True)  # fmt: skip
        self.lines: list[str] = []
        self.code: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.code = self.runner.run(self.lines.append)

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    def ranks(self) -> list[dict]:
        found = []
        for path in self.tmp.glob("cw-ft-*/ranks/rank-*.json"):
            try:
                found.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                pass  # being replaced
        return found

    def step(self, ranks: int) -> int:
        """The last step every rank has finished (-1 before all have stepped)."""
        found = self.ranks()
        return min((r["step"] for r in found), default=-1) if len(found) >= ranks else -1

    def resumed_from(self) -> int:
        match = _RESUMED.search(self.log)
        return int(match.group(1)) if match else 0

    def wait_for(self, condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if not self.thread.is_alive():
                raise RuntimeError(f"the trainer ended (exit {self.code}) before {what}:\n{self.log[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}:\n{self.log[-3000:]}")
            time.sleep(0.02)

    def join(self, timeout: float = 300) -> int | None:
        self.thread.join(timeout)
        return self.code

    def kill_everything(self) -> None:
        """SIGKILL to every process of the pod: the entrypoint's group and the command's."""
        assert self.runner.process is not None
        groups = {self.runner.process.pid}
        for rank in self.ranks():
            try:
                groups.add(os.getpgid(rank["pid"]))
            except ProcessLookupError:
                pass
        for group in groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _stall_alarms(launch: Launch) -> int:
    return launch.log.count("stalled since")


def run_chain(kinds: list[str], ranks: int, work: Path, model: Path, data: Path, rng: random.Random,
              notify: dict[str, Any] | None, say) -> tuple[list[Row], int]:  # fmt: skip
    """Faults one after another in one run folder; returns the rows and the false stall alarms."""
    name = f"faults-{ranks}r"
    sets = [f"model_name_or_path={model}", f"dataset_name={data}", f"stall_timeout={STALL_TIMEOUT}"]
    try:
        manifests = render(name, sets + (notify["sets"] if notify else []), gpu=0 if ranks == 1 else ranks)
    except Exception as exc:  # noqa: BLE001 - a cw without the `notify` field: the column says so
        if not notify:
            raise
        say(f"no notifications: {str(exc).splitlines()[0]}")
        notify = None
        manifests = render(name, sets, gpu=0 if ranks == 1 else ranks)
    volume = work / f"volume-{ranks}r"
    run_dir = volume / name
    rows: list[Row] = []
    false_alarms = 0
    fault_at: float | None = None
    for index in range(len(kinds) + 1):
        kind = kinds[index] if index < len(kinds) else None
        env: dict[str, str] = {}
        save_at = None
        if kind == "sigkill-save":
            # The restart's next save step (resumes are at multiples of save_steps, or 0).
            resumed_guess = rows[-1].detail.get("checkpoint", 0) if rows else 0
            save_at = resumed_guess + SAVE_STEPS * rng.randint(1, 2)
            env = {"CW_TEST_SLOW_SAVE_AT": str(save_at), "CW_TEST_SENTINEL": str(work / f"saving-{index}"),
                   "CW_TEST_SLOW_SAVE_POINT": rng.choice(["rng", "after_state"])}  # fmt: skip
        launch = Launch(manifests, volume, work / f"{name}-launch-{index}", env)
        started = time.monotonic()
        resumed = None
        launch.wait_for(lambda run=launch: run.step(ranks) >= 0 and run.step(ranks) > run.resumed_from(), 600,
                        "the first step")  # fmt: skip
        first_step_at = time.monotonic()
        resumed = launch.resumed_from()
        if rows:  # the previous fault's restart: did it recover, what did it cost?
            prev = rows[-1]
            prev.recovered = resumed == prev.detail.get("checkpoint", 0) and (
                resumed == 0 or (run_dir / f"checkpoint-{resumed}" / ".cw-complete").is_file()
            )
            prev.steps_lost = max(0, prev.detail["step_at_fault"] - resumed)
            prev.detail["resumed_from"] = resumed
            assert fault_at is not None
            prev.to_next_s = round(first_step_at - fault_at, 1)
            if notify:
                prev.notified = notify["check"](fault_at)
            say(
                f"  {prev.fault}: resumed from step {resumed}, {prev.steps_lost} step(s) lost, first step "
                f"{prev.to_next_s}s after the fault (launch to first step {first_step_at - started:.1f}s); notified: {prev.notified}"
            )
        if kind is None:
            launch.kill_everything()
            launch.join()
            false_alarms += _stall_alarms(launch)
            break
        row = Row("cpu", kind, kind in WARNED, detail={"ranks": ranks, "save_steps": SAVE_STEPS})
        if kind == "sigkill-save":
            sentinel = Path(env["CW_TEST_SENTINEL"])
            launch.wait_for(sentinel.exists, 300, f"the save of checkpoint-{save_at}")
            folder = run_dir / f"checkpoint-{save_at}"
            row.detail.update(save_step=save_at, save_point=env["CW_TEST_SLOW_SAVE_POINT"],
                              folder_without_marker=folder.is_dir() and not (folder / ".cw-complete").exists())  # fmt: skip
            step = launch.step(ranks)
            fault_at = time.monotonic()
            launch.kill_everything()
        else:
            target = resumed + rng.randint(1, 2 * SAVE_STEPS)
            launch.wait_for(lambda run=launch, at=target: run.step(ranks) >= at, 300, f"step {target}")
            step = launch.step(ranks)
            fault_at = time.monotonic()
            if kind == "sigterm":
                os.kill(launch.runner.process.pid, signal.SIGTERM)  # type: ignore[union-attr]
            elif kind == "sigkill":
                launch.kill_everything()
            else:  # sigstop: rank 1 hangs
                victim = next(r for r in launch.ranks() if r["rank"] == ranks - 1)
                os.kill(victim["pid"], signal.SIGSTOP)
        row.exit_code = launch.join(600)
        if row.exit_code is None:
            launch.kill_everything()
            launch.join()
        row.detail["step_at_fault"] = step
        if kind != "sigstop":
            false_alarms += _stall_alarms(launch)
        # The checkpoint the restart must resume from: the newest one every rank completed.
        complete = [int(p.parent.name.split("-")[1]) for p in run_dir.glob("checkpoint-*/.cw-complete")]
        row.detail["checkpoint"] = max(complete, default=0)
        if kind == "sigstop":
            stall = json.loads((run_dir / ".cw" / "stall.json").read_text())
            row.detail["stall"] = {k: stall[k] for k in ("timeout_s", "last_step", "ranks", "exit_code")}
        say(f"fault {kind} at step {step} ({ranks} rank(s)): exit {row.exit_code}, newest complete checkpoint {row.detail['checkpoint']}")
        rows.append(row)
    shutil.rmtree(volume, ignore_errors=True)
    return rows, false_alarms


def healthy_run(work: Path, model: Path, data: Path, say) -> dict[str, Any]:
    """2 ranks, 2 s steps, the derived timeout's floor at 1 s: the timeout must follow the steps."""
    manifests = render("healthy", [f"model_name_or_path={model}", f"dataset_name={data}"], gpu=2)
    overrides = {"CW_STALL_FLOOR": "1", "CW_TEST_STEP_SLEEP": "2"}
    started = time.monotonic()
    launch = Launch(manifests, work / "volume-healthy", work / "healthy", overrides, {"max_steps": 8, "save_steps": 4})
    code = launch.join(900)
    alarms = _stall_alarms(launch) + int((work / "volume-healthy" / "healthy" / ".cw" / "stall.json").exists())
    result = {"exit_code": code, "steps": 8, "step_s": 2, "stall_floor_s": 1, "false_alarms": alarms,
              "seconds": round(time.monotonic() - started, 1)}  # fmt: skip
    say(f"healthy run (8 steps of 2 s, floor 1 s): exit {code}, {alarms} stall alarm(s)")
    return result


def cpu_part(
    count: int, rng: random.Random, work: Path, say, healthy: bool = True, only: tuple[str, ...] = CPU_KINDS
) -> tuple[list[Row], dict[str, Any]]:
    kinds = [only[i % len(only)] for i in range(count)]
    rng.shuffle(kinds)
    say(f"CPU: building the tiny model; faults {kinds}")
    model, data = build_assets(work / "assets")
    notify = notify_receiver(work)
    one = [k for k in kinds if k != "sigstop"]
    two = [k for k in kinds if k == "sigstop"]
    rows: list[Row] = []
    false_alarms = 0
    for chain, ranks in ((one, 1), (two, 2)):
        if chain:
            chain_rows, alarms = run_chain(chain, ranks, work, model, data, rng, notify, say)
            rows += chain_rows
            false_alarms += alarms
    slow = healthy_run(work, model, data, say) if healthy else None
    if slow:
        false_alarms += slow["false_alarms"]
    if notify:
        notify["stop"]()
    return rows, {"false_stall_alarms": false_alarms, "healthy_run": slow}


def notify_receiver(work: Path) -> dict[str, Any] | None:
    """A webhook on 127.0.0.1 (http.server) for the trainer's notifications (``notify:`` with
    Apprise's ``json://``), when this cw has them (cw_notify.py); None otherwise."""
    if not NOTIFY_MODULE.is_file():
        return None
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    got: list[tuple[float, dict]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                got.append((time.monotonic(), json.loads(body)))
            except ValueError:
                got.append((time.monotonic(), {"raw": body.decode("utf-8", "replace")}))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"json://127.0.0.1:{server.server_address[1]}/cw"

    def check(since: float, until: float | None = None) -> str:
        """The events received after the fault (before the next one), e.g. ``yes: restarted (+2.1s)``."""
        seen = [(at, body) for at, body in got if at >= since and (until is None or at < until)]
        if not seen:
            return "no"
        events = []
        for at, body in seen:
            title = str(body.get("title") or body.get("raw") or "")
            event = next((e for e in ("succeeded", "failed", "stalled", "restarted") if e in title), title[:40])
            events.append(f"{event} (+{at - since:.1f}s)")
        return "yes: " + ", ".join(events)

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return {"sets": [f"notify={json.dumps({'urls': [url]})}"], "check": check, "stop": stop, "got": got}


# --------------------------------------------------------------------------- cluster part

RUN_CONFIG = {
    "model_name_or_path": "Qwen/Qwen2.5-0.5B",
    "dataset_name": "trl-lib/Capybara",
    "max_steps": 10,
    "cpu": "4",
    "memory": "16Gi",
    "checkpoint_volume": "none",  # KWOK pods write nothing
    "max_restarts": 3,
}
KUEUE = ("kueue.x-k8s.io", "v1beta2")
JOBSET = ("jobset.x-k8s.io", "v1alpha2")
RUNNING_FOR = "600s"  # KWOK completes a trainer pod this long after it runs: the faults come first


def _stamp(text: Any) -> datetime:
    return text if isinstance(text, datetime) else datetime.fromisoformat(str(text).replace("Z", "+00:00"))


class TestCluster:
    """cw's test cluster with JobSet and Kueue, a namespace with the LocalQueue ``cw``, the cw CLI."""

    def __init__(self, work: Path, say, kubeconfig: Path | None = None) -> None:
        from kubernetes import client
        from kubernetes import config as kconfig

        from cw_cli import testcluster
        from cw_cli.testcluster.kueue import local_queue

        self.state, self.work, self.say = work / "cluster-state", work, say
        self.own = kubeconfig is None  # else: an already running test cluster with JobSet and Kueue
        self.kubeconfig = kubeconfig or work / "kubeconfig"
        if self.own:
            started = time.monotonic()
            testcluster.up(state_dir=self.state, kubeconfig=self.kubeconfig, gpu_nodes=2, cpu_nodes=1, kueue=True,
                           set_current_context=False, owner_pid=os.getpid())  # fmt: skip
            say(f"test cluster with JobSet and Kueue up in {time.monotonic() - started:.0f}s")
        self.api = kconfig.new_client_from_config(config_file=str(self.kubeconfig), context=testcluster.CONTEXT)
        self.client = client
        self.core, self.batch = client.CoreV1Api(self.api), client.BatchV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.ns = f"cw-faults-{secrets.token_hex(3)}"
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=self.ns)))
        self.poll(lambda: self._exists(lambda: self.core.read_namespaced_service_account("default", self.ns)), 60,
                  "the namespace's default ServiceAccount")  # fmt: skip
        self.custom.create_namespaced_custom_object(*KUEUE, self.ns, "localqueues", local_queue(self.ns))
        self.env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        self.env.pop("CW_TEST_KUBECONFIG", None)

    def down(self) -> None:
        from cw_cli import testcluster

        if not self.own:  # a shared cluster: leave it as it was
            self.core.delete_namespace(self.ns, propagation_policy="Background")
        self.api.close()
        if self.own:
            testcluster.down(state_dir=self.state)

    @staticmethod
    def _exists(read) -> bool:
        from kubernetes.client.rest import ApiException

        try:
            read()
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    @staticmethod
    def poll(predicate, timeout: float, what: str, interval: float = 0.1):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(interval)
        raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")

    def cw(self, name: str, extra: dict[str, Any], *flags: str) -> None:
        """``cw trl sft CONFIG --name NAME ...`` with the real CLI, as a user runs it."""
        import yaml

        config = self.work / f"{name}.yaml"
        config.write_text(yaml.safe_dump({**RUN_CONFIG, **extra}), encoding="utf-8")
        args = [sys.executable, "-m", "cw_cli", "trl", "sft", str(config), "--gpu", "8", "--name", name, *flags,
                "-n", self.ns, "--context", "cw-test"]  # fmt: skip
        done = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise RuntimeError(f"cw trl sft {name} failed ({done.returncode}): {done.stderr[-2000:]}")

    def trainers(self, run: str) -> list:
        selector = f"cw-cli.dev/run={run},app.kubernetes.io/component=trainer"
        return [p for p in self.core.list_namespaced_pod(self.ns, label_selector=selector).items
                if p.metadata.deletion_timestamp is None]  # fmt: skip

    def running(self, run: str, count: int, exclude: set[str] = frozenset()) -> list:  # type: ignore[assignment]
        pods = [p for p in self.trainers(run) if p.status.phase == "Running" and p.metadata.name not in exclude]
        return pods if len(pods) >= count else []

    def evict(self, pod) -> None:
        c = self.client
        body = c.V1Eviction(metadata=c.V1ObjectMeta(name=pod.metadata.name, namespace=self.ns))
        self.core.create_namespaced_pod_eviction(pod.metadata.name, self.ns, body)

    def drain(self, node: str) -> None:
        """``kubectl drain``: cordon the node, then evict its pods through the Eviction API."""
        self.core.patch_node(node, {"spec": {"unschedulable": True}})
        for pod in self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items:
            if pod.metadata.namespace == self.ns and pod.metadata.deletion_timestamp is None:
                self.evict(pod)

    def uncordon(self, node: str) -> None:
        self.core.patch_node(node, {"spec": {"unschedulable": False}})

    def jobset(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(*JOBSET, self.ns, "jobsets", name)

    def workload(self, job: str) -> dict | None:
        items = self.custom.list_namespaced_custom_object(*KUEUE, self.ns, "workloads")["items"]
        return next((w for w in items if w["metadata"]["ownerReferences"][0]["name"] == job), None)

    def remove(self, run: str, jobset: bool) -> None:
        """Delete the run's Job or JobSet and wait until its pods are gone (their GPUs free)."""
        from kubernetes.client.rest import ApiException

        try:
            if jobset:
                self.custom.delete_namespaced_custom_object(*JOBSET, self.ns, "jobsets", run,
                                                            propagation_policy="Foreground")  # fmt: skip
            else:
                self.batch.delete_namespaced_job(f"{run}-trainer", self.ns, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise
        selector = f"cw-cli.dev/run={run}"

        def gone() -> bool:
            pods = self.core.list_namespaced_pod(self.ns, label_selector=selector).items
            for pod in pods:  # KWOK honours the grace period of a deleted pod: skip it
                if pod.metadata.deletion_timestamp is None or pod.status.phase == "Running":
                    try:
                        self.core.delete_namespaced_pod(pod.metadata.name, self.ns, grace_period_seconds=0)
                    except ApiException as exc:
                        if exc.status != 404:
                            raise
            return not pods

        self.poll(gone, 120, f"the pods of {run} to be gone", interval=0.5)


def _new_pods(tc: TestCluster, run: str, old: set[str], count: int, fault_wall: datetime, fault_mono: float,
              victim: str, timeout: float = 180) -> tuple[float, float, float | None]:  # fmt: skip
    """Wait for ``count`` new trainer pods. Returns the seconds from the fault to seeing them (polling),
    to their earliest creationTimestamp, and to the faulted pod's end (gone or failed; None: not seen)."""
    ended: list[float] = []

    def new_ones():
        pods = tc.core.list_namespaced_pod(tc.ns, label_selector=f"cw-cli.dev/run={run},app.kubernetes.io/component=trainer").items
        mine = next((p for p in pods if p.metadata.name == victim), None)
        if not ended and (mine is None or mine.status.phase in ("Failed", "Succeeded")):
            ended.append(round(time.monotonic() - fault_mono, 1))
        found = [p for p in pods if p.metadata.name not in old and p.metadata.deletion_timestamp is None]
        return found if len(found) >= count else None

    pods = tc.poll(new_ones, timeout, f"{count} new trainer pod(s) of {run}")
    seen = time.monotonic() - fault_mono
    created = min(_stamp(p.metadata.creation_timestamp) for p in pods)
    # creationTimestamp has 1 s resolution (truncated): the fault's wall time is truncated the same way.
    to_created = (created - fault_wall.replace(microsecond=0)).total_seconds()
    return round(seen, 1), to_created, (ended[0] if ended else None)


def cluster_fault(tc: TestCluster, kind: str, index: int) -> Row:
    row = Row("cluster", kind, kind in WARNED, notified="n/a (KWOK)")
    run = f"{kind}-{index}"
    gang = kind.startswith("jobset")
    ranks = 2 if gang else 1
    if kind == "job-preempt":
        return _preemption(tc, run, row)
    tc.cw(run, {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": RUNNING_FOR}},
          *(["--nodes", "2"] if gang else []))  # fmt: skip
    before = tc.poll(lambda: tc.running(run, ranks), 120, f"{run}'s trainer pod(s) to run")
    rank = {(p.metadata.annotations or {}).get("batch.kubernetes.io/job-completion-index"): p for p in before}
    victim = rank.get(str(ranks - 1)) or before[0]
    node = victim.spec.node_name
    old = {p.metadata.name for p in before}
    fault_wall, fault_mono = datetime.now(timezone.utc), time.monotonic()
    action = kind.split("-", 1)[1]
    if action == "evict":
        tc.evict(victim)
    elif action == "drain":
        tc.drain(node)
    elif action == "delete":
        tc.core.delete_namespaced_pod(victim.metadata.name, tc.ns)
    else:  # fail: the trainer exits 1 (KWOK's pod-fail stage reads the exit code)
        tc.core.patch_namespaced_pod(victim.metadata.name, tc.ns, {"metadata": {"annotations": {
            "kwok.cw/exit-code": "1", "pod-complete.stage.kwok.x-k8s.io/delay": "1s"}}})  # fmt: skip
    try:
        row.to_next_s, row.to_created_s, ended = _new_pods(tc, run, old, ranks, fault_wall, fault_mono, victim.metadata.name)
        row.detail["faulted_pod_ended_s"] = ended
        if action == "drain":
            tc.uncordon(node)  # a drained node comes back (a 2-node gang needs both nodes to run again)
        tc.poll(lambda: tc.running(run, ranks, exclude=old), 120, f"{run}'s new pod(s) to run")
        row.recovered = True
    except RuntimeError as exc:
        row.detail["error"] = str(exc)
    finally:
        if action == "drain":
            tc.uncordon(node)
    if gang:
        status = tc.jobset(run).get("status") or {}
        row.counted = "yes" if status.get("restartsCountTowardsMax") else "no"
        row.detail.update(restarts=status.get("restarts", 0), restarts_counted=status.get("restartsCountTowardsMax", 0))
    else:
        job = tc.batch.read_namespaced_job(f"{run}-trainer", tc.ns)
        row.counted = "yes" if job.status.failed else "no"
        row.detail.update(job_failed=job.status.failed or 0, backoff_limit=job.spec.backoff_limit)
    row.detail["node"] = node
    tc.remove(run, gang)
    return row


def _preemption(tc: TestCluster, run: str, row: Row) -> Row:
    """Two low-priority queued runs fill the ClusterQueue's 16 GPUs; a high-priority one arrives."""
    c = tc.client
    scheduling = c.SchedulingV1Api(tc.api)
    low, high = f"{tc.ns}-low", f"{tc.ns}-high"
    for name, value in ((low, 100), (high, 1000)):
        if not tc._exists(lambda n=name: scheduling.read_priority_class(n)):
            scheduling.create_priority_class(c.V1PriorityClass(metadata=c.V1ObjectMeta(name=name), value=value))
    holders = [f"{run}-a", f"{run}-b"]
    for name in holders:
        tc.cw(name, {"queue": "cw", "priority_class": low,
                     "annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": RUNNING_FOR}})  # fmt: skip
    before = {}
    for name in holders:
        before[name] = {p.metadata.name for p in tc.poll(lambda n=name: tc.running(n, 1), 120, f"{name} to run")}
    fault_wall, fault_mono = datetime.now(timezone.utc), time.monotonic()
    tc.cw(f"{run}-high", {"queue": "cw", "priority_class": high,
                          "annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "5s"}})  # fmt: skip

    def preempted() -> str | None:
        for name in holders:
            conditions = ((tc.workload(f"{name}-trainer") or {}).get("status") or {}).get("conditions") or []
            if any(x["type"] == "Preempted" and x["status"] == "True" for x in conditions):
                return name
        return None

    try:
        victim = tc.poll(preempted, 120, "Kueue to preempt a low-priority run")
        row.detail["preempted_after_s"] = round(time.monotonic() - fault_mono, 1)
        gone = next(iter(before[victim]))
        row.to_next_s, row.to_created_s, ended = _new_pods(tc, victim, before[victim], 1, fault_wall, fault_mono, gone)
        row.detail["faulted_pod_ended_s"] = ended
        tc.poll(lambda: tc.running(victim, 1, exclude=before[victim]), 120, f"{victim}'s new pod to run")
        row.recovered = True
        job = tc.batch.read_namespaced_job(f"{victim}-trainer", tc.ns)
        row.counted = "yes" if job.status.failed else "no"
        row.detail.update(victim=victim, job_failed=job.status.failed or 0, backoff_limit=job.spec.backoff_limit,
                          note="new pods after the high-priority run (5 s) ended and the victim was admitted again")  # fmt: skip
    except RuntimeError as exc:
        row.detail["error"] = str(exc)
    for name in (*holders, f"{run}-high"):
        tc.remove(name, False)
    for name in (low, high):
        scheduling.delete_priority_class(name)
    return row


def cluster_part(
    count: int, rng: random.Random, work: Path, say, kubeconfig: Path | None = None, only: tuple[str, ...] = CLUSTER_KINDS
) -> list[Row]:
    kinds = [only[i % len(only)] for i in range(count)]
    rng.shuffle(kinds)
    say(f"cluster: faults {kinds}")
    tc = TestCluster(work, say, kubeconfig)
    rows = []
    try:
        for index, kind in enumerate(kinds):
            row = cluster_fault(tc, kind, index)
            say(
                f"fault {kind}: recovered {_cell(row.recovered)}, new pods {_cell(row.to_next_s)}s after it "
                f"(creationTimestamp {_cell(row.to_created_s)}s), counted {row.counted} {row.detail}"
            )
            rows.append(row)
    finally:
        tc.down()
    return rows


# --------------------------------------------------------------------------- report


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def table(rows: list[Row]) -> str:
    head = ["#", "part", "fault", "warned", "recovered", "steps lost", "s to next step / new pods",
            "s to creationTimestamp", "counted", "notified", "exit"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, r in enumerate(rows, 1):
        cells = [i, r.part, r.fault, r.warned, r.recovered, r.steps_lost, r.to_next_s, r.to_created_s, r.counted,
                 r.notified, r.exit_code]  # fmt: skip
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def summary(rows: list[Row], false_alarms: int) -> dict[str, Any]:
    warned = [r.steps_lost for r in rows if r.warned and r.steps_lost is not None]
    unwarned = [r.steps_lost for r in rows if not r.warned and r.steps_lost is not None]
    return {"recovered": sum(r.recovered for r in rows), "faults": len(rows),
            "max_steps_lost_warned": max(warned, default=None), "max_steps_lost_unwarned": max(unwarned, default=None),
            "save_steps": SAVE_STEPS, "false_stall_alarms": false_alarms}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-faults", type=int, default=12)
    parser.add_argument("--cluster-faults", type=int, default=8)
    parser.add_argument("--seed", type=int, default=34)
    parser.add_argument("--json", type=Path, default=None, help="write the rows and the summary here")
    parser.add_argument("--cpu-kinds", default=",".join(CPU_KINDS), help="the CPU faults to cycle through")
    parser.add_argument("--cluster-kinds", default=",".join(CLUSTER_KINDS), help="the cluster faults to cycle through")
    parser.add_argument("--no-healthy-run", action="store_true", help="skip the healthy slow run (false stall alarms)")
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="a running test cluster with JobSet and Kueue (context cw-test) instead of starting one",
    )
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    args = parser.parse_args(argv)
    cpu_kinds, cluster_kinds = tuple(args.cpu_kinds.split(",")), tuple(args.cluster_kinds.split(","))
    unknown = sorted((set(cpu_kinds) - set(CPU_KINDS)) | (set(cluster_kinds) - set(CLUSTER_KINDS)))
    if unknown:
        parser.error(f"unknown fault kind(s) {unknown}: the CPU ones are {CPU_KINDS}, the cluster ones {CLUSTER_KINDS}")
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="cw-faults-")) if args.work is None else args.work
    work.mkdir(parents=True, exist_ok=True)

    def say(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    started = time.monotonic()
    rows: list[Row] = []
    extra: dict[str, Any] = {}
    try:
        if args.cpu_faults:
            cpu_rows, extra = cpu_part(args.cpu_faults, rng, work, say, not args.no_healthy_run, cpu_kinds)
            rows += cpu_rows
        if args.cluster_faults:
            rows += cluster_part(args.cluster_faults, rng, work, say, args.kubeconfig, cluster_kinds)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    result = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "seed": args.seed,
              "seconds": round(time.monotonic() - started, 1), "summary": summary(rows, extra.get("false_stall_alarms", 0)),
              "healthy_run": extra.get("healthy_run"), "rows": [asdict(r) for r in rows]}  # fmt: skip
    print(table(rows))
    s = result["summary"]
    print(f"recovered {s['recovered']}/{s['faults']}, max steps lost: warned {_cell(s['max_steps_lost_warned'])}, "
          f"unwarned {_cell(s['max_steps_lost_unwarned'])} (save_steps {SAVE_STEPS}), false stall alarms "
          f"{s['false_stall_alarms']}, {result['seconds']:.0f} s")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0 if s["recovered"] == s["faults"] else 1


if __name__ == "__main__":
    sys.exit(main())
