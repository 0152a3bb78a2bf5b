"""How the verifiers trainer runs: `vf-train @ config.toml` under accelerate (DeepSpeed ZeRO or
multi-GPU), after installing its pinned stack and the run's environment when needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cw_cli.config.eval_environments import module_of
from cw_cli.frameworks.base import CONFIG_MOUNT, Launch, RunContext, TrainingType
from cw_cli.frameworks.distributed import accelerate_args
from cw_cli.frameworks.verifiers.pins import CONFIG_NAME, PRIME_CLI, VERIFIERS_IMAGE, VERIFIERS_STACK


class VerifiersLaunch(Launch):
    """vf-train takes no checkpoint: cw's entrypoint names the newest complete one and
    cw_vf_resume.py (beside cw_fault.py) resumes RLTrainer from it (docs/fault-tolerance.md);
    a user script takes vf-train's own arguments."""

    script_reads_its_own_keys = False  # a script takes vf-train's own `@ config.toml` arguments

    def default_image(self, training_type: TrainingType) -> str:
        return VERIFIERS_IMAGE

    def setup_commands(self, config: dict[str, Any], context: RunContext) -> list[list[str]]:
        env_id = str(config["env"]["id"])
        if _module_name(env_id) in self._shipped_modules(context):
            return []
        return [environment_install(env_id)]

    @staticmethod
    def _shipped_modules(context: RunContext) -> set[str]:
        return {Path(name).stem for name in context.cluster.files if name.endswith(".py")}

    def pip_packages(self, config: dict[str, Any], context: RunContext) -> list[str]:
        # A user's image (`image:`) is taken as complete; the pinned default lacks verifiers.
        packages = [] if context.cluster.image else list(VERIFIERS_STACK)
        if self.setup_commands(config, context):
            packages.append(PRIME_CLI)
        return packages

    def launch_notes(self, config: dict[str, Any], context: RunContext) -> list[str]:
        why = _why_no_resume(config, context)
        if why is None:
            return []
        return [
            f"a restart of the trainer (preemption, stall, failure) will not resume: {why}; it starts again at step 0 "
            f"from `model` ({config.get('model')}). To go on from a checkpoint, set `model:` to it "
            f"(e.g. {context.output_dir}/checkpoint-<step>) and launch under another --name (docs/training.md, verifiers)"
        ]

    def trainer_command(self, config: dict[str, Any], context: RunContext) -> list[str]:
        return self._launch(config, context, ["-m", "verifiers.scripts.train"])

    def script_command(
        self, config: dict[str, Any], context: RunContext, script: str
    ) -> tuple[list[str], dict[str, Any]]:
        # A user script takes the same `@ config.toml` arguments as verifiers' own vf-train.
        return self._launch(config, context, [script]), config

    @staticmethod
    def _launch(config: dict[str, Any], context: RunContext, program: list[str]) -> list[str]:
        strategy = config["accelerate_config"]
        if strategy == "multi_gpu":
            launch = ["accelerate", "launch", *accelerate_args(context)]
        else:
            launch = [
                "accelerate",
                "launch",
                "--use_deepspeed",
                "--zero_stage",
                strategy.removeprefix("zero"),
                *accelerate_args(context, distributed_mode=False),
            ]
        return [*launch, *program, "@", f"{CONFIG_MOUNT}/{CONFIG_NAME}"]


def _module_name(env_id: str) -> str:
    """The module verifiers imports for an environment id (its own rule: last path part, '-' -> '_')."""
    return module_of(env_id)


def environment_install(env_id: str) -> list[str]:
    """As vf-rl does before vf-train: install the environment from its hub (needs network); the
    evaluation pod of an ``eval: {environments: [...]}`` block runs the same."""
    return ["prime", "env", "install", env_id, "--with", "pip"]


def _off(value: object) -> bool:
    return str(value).strip().lower() in ("0", "false", "no", "off")


def _why_no_resume(config: dict[str, Any], context: RunContext) -> str | None:
    """Why cw's resume of RLTrainer cannot work for this run, or None when it can."""
    env = context.cluster.env
    for name, what in (("CW_FAULT_TOLERANCE", "cw's patch of RLTrainer"), ("CW_AUTO_RESUME", "the resume")):
        if name in env and _off(env[name]):
            return f"`env: {name}: {env[name]}` turns off {what}"
    output_dir = config.get("trainer", {}).get("args", {}).get("output_dir")
    if output_dir not in (None, context.output_dir):
        return (f"`trainer.args.output_dir` is {output_dir}, not the run's folder {context.output_dir} where cw looks "
                "for checkpoints")
    return None
