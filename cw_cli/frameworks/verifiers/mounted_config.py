"""The verifiers config as the pods read it: vf-rl's TOML with the run's server, output folder
and GPU counts written in, checked against what cw manages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cw_cli.frameworks.base import MountedConfig, RunContext
from cw_cli.frameworks.distributed import total_processes
from cw_cli.frameworks.runtime_files import VF_RESUME_FILE, runtime_file
from cw_cli.frameworks.servers import server_sizing
from cw_cli.frameworks.verifiers.pins import CONFIG_NAME, SERVER_MANAGED_ARGS, VLLM_PORT, mapping_at

#: RLConfig fields cw sets to reach the run's server and volume.
TRAINER_MANAGED_ARGS = ("vllm_server_host", "vllm_server_port")

class VerifiersMountedConfig(MountedConfig):
    """``/etc/cw/config.toml``, what `vf-train @ config.toml` reads."""

    config_file_name = CONFIG_NAME
    output_keys = (("trainer", "args", "output_dir"),)

    def prepare_config(self, native: dict[str, Any], context: RunContext) -> dict[str, Any]:
        server = server_sizing(context, "server", VLLM_PORT)
        args = dict(mapping_at(native, "trainer", "args"))
        _check_batch(args, total_processes(context))
        ours = {"vllm_server_host": context.names["server"], "vllm_server_port": server.port}
        _check_managed(args, ours, "trainer.args", "is set by cw to the run's server")
        args.setdefault("output_dir", context.output_dir)
        args.setdefault("run_name", mapping_at(native, "trainer").get("run_name") or context.run_name)
        args.update(ours)
        server_args = dict(mapping_at(native, "inference", "args"))
        managed = {
            "model": native.get("model"),
            "host": "0.0.0.0",
            "port": server.port,
            "tensor_parallel_size": server.tensor_parallel,
            "data_parallel_size": server.data_parallel,
        }
        _check_managed(server_args, managed, "inference.args", "is set by cw from {}", SERVER_MANAGED_ARGS)
        config = {("env" if key == "environment" else key): value for key, value in native.items()}
        # vf-rl's own GPU counts, written from cw's sizing so the mounted file tells the truth;
        # the flags cw derives itself are left out of `inference.args` (same values, checked above).
        inference = {**mapping_at(native, "inference"), "gpus": server.gpus}
        if "args" in inference:
            inference["args"] = {k: v for k, v in server_args.items() if k not in managed}
        config["inference"] = inference
        config["trainer"] = {**mapping_at(native, "trainer"), "gpus": context.gpus, "args": args}
        return config

    def config_files(self, native: dict[str, Any], context: RunContext, base_dir: Path) -> dict[str, str]:
        # Beside cw_fault.py, which imports it when verifiers' trainer is imported: a restarted
        # trainer resumes from the newest complete checkpoint (docs/fault-tolerance.md).
        return {} if context.services_only else {VF_RESUME_FILE: runtime_file(VF_RESUME_FILE)}

    def serialize_config(self, config: dict[str, Any]) -> str:
        import tomli_w  # lazily: only verifiers runs need it

        try:
            return tomli_w.dumps(config)
        except (TypeError, ValueError) as exc:  # a value TOML has no form for (a set, bytes, a non-string key)
            raise ValueError(f"the config cannot be written as verifiers' TOML: {exc}") from None


def _check_managed(
    written: dict[str, Any], ours: dict[str, Any], section: str, why: str, where: dict[str, str] | None = None
) -> None:
    """A setting cw manages may be written only with the value cw uses."""
    for key, value in ours.items():
        if key in written and written[key] != value:
            reason = why.format((where or {}).get(key, ""))
            raise ValueError(f"`{section}.{key}: {written[key]}` {reason}, which gives {value}; remove it")


def _check_batch(args: dict[str, Any], processes: int) -> None:
    """RLConfig's own batch checks, made before the run instead of in the pod."""
    batch = args.get("batch_size", 512)
    micro = args.get("micro_batch_size", 8)
    rollouts = args.get("rollouts_per_example", 16)
    if isinstance(batch, int) and isinstance(micro, int) and micro > 0 and batch % (micro * processes):
        raise ValueError(
            f"`trainer.args.batch_size: {batch}` must be a multiple of micro_batch_size ({micro}) x "
            f"trainer processes ({processes}); try batch_size: {micro * processes * max(1, batch // (micro * processes))}"
        )
    if isinstance(rollouts, int) and rollouts < 2:
        raise ValueError("`trainer.args.rollouts_per_example` must be at least 2 (GRPO compares rollouts)")
