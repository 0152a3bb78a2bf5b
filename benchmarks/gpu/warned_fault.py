"""The cost of a fault on a real 1-GPU SFT, through cw's exact rendered trainer command.

Runs where the GPU is, from the files render_run.py wrote (benchmarks/gpu/rendered/), with the same
model, tokenizer and data as lora_train_export_try.py (Qwen2.5-0.5B's shape, random weights, LoRA,
60 steps of 16 x 1024 tokens, ``save_steps: 30``). For each fault:

1. the trainer container's command (``cw_entrypoint.py`` -> ``cw_fault`` supervisor -> ``trl sft``)
   runs in a fresh run folder; at step ``--at`` (between two saves) this script sends the signal
   to the command's first process only, as the kubelet signals a container's PID 1;
2. once it has exited, the same command is started again in the same folder (what the restarted
   pod runs), and this script waits for its first optimizer step.

Faults: ``sigterm`` (a warned fault: preemption, eviction, drain) with cw's fault tolerance on;
``sigterm-off`` the same with ``CW_FAULT_TOLERANCE=0`` (the command is exec'd as before: what a
warned fault cost without it); ``sigkill`` (unwarned: node loss). Figures per fault: seconds from
the signal to the exit, the exit code, the step of the checkpoint the relaunch resumed from,
steps lost (the step reached at the signal minus the resumed step), seconds from the relaunch to
its first step, and the sum (signal to the resumed first step, not counting the pod's
rescheduling and image pull, which this machine cannot show).

Usage (after lora_train_export_try.sh's pip step, or with SKIP_PIP): python3 warned_fault.py --work DIR
--out DIR [--tiny] [--faults sigterm,sigterm-off,sigkill] [--at 45]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import lora_train_export_try as bench  # noqa: E402  (same folder; the assets and the pod layout)

SIGNALS = {"sigterm": signal.SIGTERM, "sigterm-off": signal.SIGTERM, "sigkill": signal.SIGKILL}


def read_steps(path: Path) -> list[dict]:
    """The step log's lines so far (the bench hook appends one per optimizer step)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (read from /proc), which a container's end would take down too."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def end_container(pids: set[int]) -> None:
    """What the container runtime does once PID 1 has exited: kill every process left in it."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start(command: list[str], env: dict, cwd: Path, log: Path) -> tuple[subprocess.Popen, object]:
    handle = open(log, "w", encoding="utf-8")  # noqa: SIM115 - closed by the caller with the process
    return subprocess.Popen(command, env=env, cwd=cwd, stdout=handle, stderr=subprocess.STDOUT), handle


def wait_for_step(steps: Path, proc: subprocess.Popen, at_least: int, timeout_s: float) -> dict | None:
    """The first step-log line with step >= ``at_least`` (None if the process ended first)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = [s for s in read_steps(steps) if s["step"] >= at_least]
        if seen:
            return seen[0]
        if proc.poll() is not None:
            return None
        time.sleep(0.02)
    return None


def resumed_from(log: Path) -> int | None:
    """The checkpoint step cw_entrypoint resumed from, read off its own log line."""
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if "resuming from checkpoint" in line:
            return int(line.rstrip().rsplit("checkpoint-", 1)[1].split()[0].strip("/"))
    return None


def one_fault(fault: str, at: int, pod: dict, base_env: dict, out: Path, work: Path) -> dict:
    """Run, signal at step ``at``, relaunch, wait for the first resumed step; the figures."""
    etc, checkpoints = pod["etc"], pod["checkpoints"]
    trainer = pod["trainer"]
    run_dir = Path(bench.rewrite(trainer["workingDir"], etc, checkpoints))
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    command = [bench.rewrite(part, etc, checkpoints) for part in trainer["command"] + trainer.get("args", [])]
    steps = work / f"steps-{fault}.jsonl"
    steps.unlink(missing_ok=True)
    env = {**base_env, "CW_BENCH_STEP_LOG": str(steps)}
    if fault == "sigterm-off":
        env["CW_FAULT_TOLERANCE"] = "0"
    proc, handle = start(command, env, run_dir, out / f"{fault}-1.log")
    reached = wait_for_step(steps, proc, at, 900)
    if reached is None:
        handle.close()
        return {"fault": fault, "error": f"the run ended (exit {proc.poll()}) before step {at}"}
    inside = descendants(proc.pid)
    signalled = time.time()
    if fault == "sigkill":  # node loss: every process of the container at once
        end_container(inside | {proc.pid})
    else:
        proc.send_signal(SIGNALS[fault])
    code = proc.wait()
    exited = time.time()
    end_container(inside)
    handle.close()
    last_step = max(s["step"] for s in read_steps(steps))
    saved = sorted(p.name for p in Path(pod["config"]["output_dir"]).glob("checkpoint-*"))
    relaunched = time.time()
    proc, handle = start(command, env, run_dir, out / f"{fault}-2.log")
    first = None
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and first is None:
        later = [s for s in read_steps(steps) if s["time"] > relaunched]
        first = later[0] if later else None
        if first is None and proc.poll() is not None:
            break
        time.sleep(0.02)
    end_container(descendants(proc.pid) | {proc.pid})  # the resumed run has shown what it costs
    proc.wait()
    handle.close()
    resumed_step = resumed_from(out / f"{fault}-2.log")
    result = {
        "fault": fault, "signal_at_step": reached["step"], "last_step_before_exit": last_step,
        "signal_to_exit_s": round(exited - signalled, 2), "exit_code": code, "checkpoints_after_exit": saved,
        "resumed_from_step": resumed_step,
        "steps_lost": (last_step - resumed_step) if resumed_step is not None else last_step,
        "relaunch_to_first_step_s": round(first["time"] - relaunched, 2) if first else None,
        "first_step_after_relaunch": first["step"] if first else None,
    }  # fmt: skip
    if first:
        result["signal_to_resumed_first_step_s"] = round(result["signal_to_exit_s"] + result["relaunch_to_first_step_s"], 2)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--at", type=int, default=45, help="the step at which the signal is sent")
    parser.add_argument("--faults", default="sigterm,sigterm-off,sigkill")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    import torch

    assets = bench.build_assets(args.work, args.tiny, 64 if args.tiny else 2000, 40 if args.tiny else 1100)
    pod = bench.lay_out(args.work, assets, args.tiny)
    if args.tiny:  # enough steps to stop between two saves
        config_path = pod["etc"] / "config.yaml"
        import yaml

        pod["config"].update(max_steps=12, save_steps=6)
        config_path.write_text(yaml.safe_dump(pod["config"], sort_keys=False), encoding="utf-8")
    trainer = pod["trainer"]
    base_env = bench.pod_env(trainer, pod["etc"], pod["checkpoints"],
                             {"CW_BENCH_STATS": str(args.work / "stats.json"), "HF_HOME": str(args.work / "hf-home")})  # fmt: skip
    base_env["PYTHONPATH"] = os.pathsep.join([base_env["PYTHONPATH"], str(bench.HOOK)])
    figures = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
               "save_steps": pod["config"]["save_steps"], "max_steps": pod["config"]["max_steps"],
               "command": trainer["command"], "faults": []}  # fmt: skip
    for fault in args.faults.split(","):
        bench.say(f"fault {fault} at step {args.at}")
        result = one_fault(fault, args.at, pod, base_env, args.out, args.work)
        bench.say(json.dumps(result))
        figures["faults"].append(result)
        (args.out / "warned_fault.json").write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
