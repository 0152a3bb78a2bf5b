"""The public-config corpus (tests/corpus/), as cw mounts it, read by the frameworks' own code.

The unit tests check what cw changed; these check that the result means the same to the
framework: TRL's own `trl <type>` parser takes every accepted TRL config and leaves only options
`accelerate launch` knows; Axolotl's own validator accepts every accepted Axolotl config; the key
lists cw ships (to refuse unknown keys without importing either) match the installed releases.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from training_helpers import OFFLINE_ENV, REPO

from cw_cli.localrun.runner import configmap_files, map_paths

sys.path.insert(0, str(REPO / "tests" / "unit"))
from test_public_config_corpus import ACCEPTED, _plan  # noqa: E402

pytestmark = pytest.mark.training
HERE = Path(__file__).resolve().parent
TRL_ENTRIES = [e for e in ACCEPTED if e["framework"] == "trl"]
AXOLOTL_ENTRIES = [e for e in ACCEPTED if e["framework"] == "axolotl"]


def _mounted_files(entry: dict, folder: Path) -> Path:
    """Write the run's ConfigMap as the pod sees /etc/cw (into ``folder``); return config.yaml."""
    plan = _plan(entry)
    config_map = next(m for m in plan.manifests if m["kind"] == "ConfigMap")
    job = plan.manifests[0]
    volume = next(v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "config")
    for relative, content in configmap_files(config_map, volume["configMap"].get("items")).items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(map_paths(content, {"/etc/cw": folder}), encoding="utf-8")
    return folder / "config.yaml"


@pytest.mark.parametrize("entry", TRL_ENTRIES, ids=[Path(e["file"]).stem for e in TRL_ENTRIES])
def test_trl_parses_the_mounted_config_and_leaves_only_accelerate_options(entry, tmp_path):
    from accelerate.commands.launch import launch_command_parser

    config = _mounted_files(entry, tmp_path)
    # The pod is an 8-GPU node; parse as if on CPU so bf16 checks do not need one here.
    data = yaml.safe_load(config.read_text()) | {"use_cpu": True, "fp16": False}
    config.write_text(yaml.safe_dump(data))
    parser = importlib.import_module(f"trl.scripts.{entry['type']}").make_parser()
    *_, from_config, _ = parser.parse_args_and_config(
        ["--config", str(config)], return_remaining_strings=True, separate_remaining_strings=True
    )
    from trl.cli.accelerate_config import resolve_accelerate_config_argument

    launch = resolve_accelerate_config_argument(list(from_config))
    launch_command_parser().parse_args([*launch, "train.py"])  # SystemExit on an unknown option


def test_the_trl_key_list_cw_ships_is_the_installed_trls():
    shipped = json.loads((REPO / "cw_cli" / "frameworks" / "trl" / "trl_keys.json").read_text())
    import importlib.metadata as md

    if md.version("trl") != shipped["trl"]:
        pytest.skip(f"TRL {md.version('trl')} installed, the list is for {shipped['trl']}: regenerate with tools/trl_keys.py")
    out = subprocess.run([sys.executable, str(REPO / "tools" / "trl_keys.py")], capture_output=True, text=True, check=True)
    generated = json.loads(out.stdout)
    for key in ("sft", "dpo", "grpo"):
        assert generated[key] == shipped[key], f"trl {key}: regenerate cw_cli/frameworks/trl/trl_keys.json"


@pytest.fixture(scope="module")
def axolotl_python() -> str:
    candidate = os.environ.get("CW_AXOLOTL_PYTHON") or sys.executable
    probe = subprocess.run([candidate, "-c", "import axolotl"], capture_output=True, env={**os.environ, **OFFLINE_ENV})
    if probe.returncode != 0:
        pytest.skip(f"axolotl is not installed for {candidate} (set CW_AXOLOTL_PYTHON)")
    return candidate


def test_axolotl_gives_cws_rendering_the_verdict_it_gives_the_file_as_written(axolotl_python, tmp_path):
    """Same world size, same answer: cw's changes (output folder, shipped paths, vLLM block) never
    turn a config Axolotl accepts into one it refuses. A published example Axolotl itself refuses
    (the SimPO one sets warmup_ratio, which Axolotl's SimPO trainer rejects) is refused either way."""
    argv, origin = [], {}
    for index, entry in enumerate(AXOLOTL_ENTRIES):
        plan = _plan(entry)
        trainer = plan.manifests[0]["spec"]["template"]["spec"]["containers"][0]
        gpus = int(trainer["resources"]["limits"].get("nvidia.com/gpu", 1))
        rendered = _mounted_files(entry, tmp_path / str(index))
        as_written = REPO / "tests" / "corpus" / entry["file"]
        argv += ["--gpus", str(gpus), str(as_written), str(rendered)]
        origin[str(as_written)], origin[str(rendered)] = (entry["file"], "written"), (entry["file"], "rendered")
    out = subprocess.run([axolotl_python, str(HERE / "validate_axolotl.py"), *argv], capture_output=True, text=True,
                         timeout=900, env={**os.environ, **OFFLINE_ENV}, cwd=REPO / "tests" / "corpus" / "configs")  # fmt: skip
    results = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(origin), f"validator crashed ({out.returncode}):\n{out.stderr[-4000:]}"
    verdicts: dict[str, dict[str, object]] = {}
    for result in results:
        name, form = origin[result["path"]]
        verdicts.setdefault(name, {})[form] = result["ok"] or result["error"].split("\n")[0]
    changed = {name: v for name, v in verdicts.items() if (v["written"] is True) != (v["rendered"] is True)}
    assert not changed, f"cw changed Axolotl's verdict: {json.dumps(changed, indent=1)}"
    accepted = [name for name, v in verdicts.items() if v["rendered"] is True]
    print(f"\naxolotl verdicts: {json.dumps(verdicts, indent=1)}")
    assert len(accepted) >= len(verdicts) - 2, verdicts


def test_the_axolotl_key_list_cw_ships_is_axolotls_schema(axolotl_python):
    out = subprocess.run([axolotl_python, str(REPO / "tools" / "axolotl_keys.py")], capture_output=True, text=True,
                         timeout=600, env={**os.environ, **OFFLINE_ENV})  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    shipped = (REPO / "cw_cli" / "frameworks" / "axolotl" / "axolotl_keys.txt").read_text()
    assert out.stdout == shipped, "regenerate cw_cli/frameworks/axolotl/axolotl_keys.txt with tools/axolotl_keys.py"


VERIFIERS_ENTRIES = [e for e in ACCEPTED if e["framework"] == "verifiers"]


def test_verifiers_reads_every_published_vf_rl_config_as_cw_mounts_it(tmp_path):
    """verifiers' own files (wordle.toml, gsm8k.toml, ...) as cw mounts them: RLConfig takes
    `trainer.args` (cw's output folder and server included) and vLLM's parser takes the server's
    vf-vllm arguments, with the GPU split of the file."""
    python = os.environ.get("CW_VERIFIERS_PYTHON") or sys.executable
    if subprocess.run([python, "-c", "import verifiers"], capture_output=True).returncode != 0:
        pytest.skip(f"verifiers is not installed for {python} (set CW_VERIFIERS_PYTHON)")
    runs = []
    for index, entry in enumerate(VERIFIERS_ENTRIES):
        plan = _plan(entry)
        folder = tmp_path / str(index)
        config = _mounted_files(entry, folder).with_name("config.toml")
        deployment = next(m for m in plan.manifests if m["kind"] == "Deployment")
        command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
        runs.append({"config": str(config), "server": command[command.index("vf-vllm") + 1 :], "entry": entry})
    listing = tmp_path / "runs.json"
    listing.write_text(json.dumps([{k: v for k, v in run.items() if k != "entry"} for run in runs]))
    out = subprocess.run([python, str(HERE / "validate_verifiers_configs.py"), str(listing)], capture_output=True,
                         text=True, timeout=900, env={**os.environ, **OFFLINE_ENV})  # fmt: skip
    results = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(runs), f"validator crashed ({out.returncode}):\n{out.stderr[-4000:]}"
    for run, result in zip(runs, results):
        name = run["entry"]["file"]
        assert result["ok"], f"verifiers refuses {name} as mounted: {result['error']}"
        assert result["rl_config"]["output_dir"].startswith("/checkpoints/"), name
        assert result["rl_config"]["vllm_server_host"].endswith("-server"), name
        server = result["server"]
        assert server["parsed"] or "vLLM not importable" in server["why"], server
        if server["parsed"]:
            gpus = run["entry"]["facts"]["gpus"]["inference"]
            args = server["args"]
            assert args["tensor_parallel_size"] * args["data_parallel_size"] == gpus, (name, args)
