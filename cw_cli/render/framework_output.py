"""What the framework makes of a run's native config (the mounted config, files, services and
packages), the ConfigMap's files, and the checks of the run's mode and volume."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from msgspec import Struct

from cw_cli import features
from cw_cli.config.models import NO_VOLUME
from cw_cli.errors import ConfigError
from cw_cli.frameworks.base import BaseTrainingFramework, RunContext, ServiceDef
from cw_cli.frameworks.runtime_files import (
    CODE_FILE,
    ENTRYPOINT_FILE,
    FAULT_FILE,
    KEEPER_FILE,
    PIP_FILE,
    POD_API_FILE,
    PROGRESS_FILE,
    runtime_file,
)
from cw_cli.render.dataset_check import check_datasets
from cw_cli.render.outputs import place_outputs
from cw_cli.render.shipped_files import (
    ShippedFile,
    check_size,
    referenced_modules,
    ship_referenced,
    text_file,
    user_files,
)
from cw_cli.render.user_code import CODE_ARCHIVE, script_in_pod, shipped_code

if TYPE_CHECKING:
    from cw_cli.render.plan import RunRequest
    from cw_cli.render.workload import Workload


def volume_choice(request: RunRequest, framework: BaseTrainingFramework) -> list[str]:
    """Refuse a run whose outputs would silently die with its pod; warn when the user chose that."""
    cluster = request.config.cluster
    if cluster.keeps_outputs or request.local or request.services_only:
        return []
    if cluster.checkpoint_volume == NO_VOLUME:
        return [
            "`checkpoint_volume: none`: checkpoints and the final model are written to the pod's own disk and are "
            "LOST when the pod ends; nothing resumes after a failure"
        ]
    if framework.pushes_to_hub(request.config.native):
        return [
            "no `checkpoint_volume`: only what the trainer pushes to the Hugging Face Hub is kept; intermediate "
            "checkpoints are lost with the pod and a failed run cannot resume"
        ]
    raise ConfigError(
        [
            f"{request.config.path}: `checkpoint_volume` is not set, so the run's checkpoints and final model would "
            "be lost when its pod ends"
        ],
        hint="set `checkpoint_volume: <PersistentVolumeClaim>` (outputs go to /checkpoints/<run>), or "
        "`checkpoint_volume: none` to accept losing them (e.g. --set checkpoint_volume=none)",
    )


#: cw's pod-side files a run's ConfigMap may carry: a user's file may not take their names.
RUNTIME_KEYS = (PIP_FILE, ENTRYPOINT_FILE, FAULT_FILE, PROGRESS_FILE, KEEPER_FILE, POD_API_FILE, CODE_FILE, CODE_ARCHIVE,
                *features.pod_file_keys())


class FrameworkOutput(Struct):
    """What the framework makes of the run's native config: the files, services and packages."""

    prepared: dict[str, Any]
    config_text: str
    files: list[ShippedFile]
    services: list[ServiceDef]
    requirements: list[str]
    notices: list[str]
    #: The trainer's command when it runs the user's own script (`script:`); None: the framework's.
    script_command: list[str] | None = None


def framework_output(request: RunRequest, context: RunContext) -> FrameworkOutput:
    """The framework's mounted config, its files and the user's, its services and packages."""
    framework = request.framework.framework
    cluster = request.config.cluster
    path = request.config.path
    try:
        native, moved = place_outputs(request.config.native, framework.output_keys, context.output_dir)
        native, referenced, shipped_notes = ship_referenced(native, framework.file_keys, path.parent, in_place=request.local)
        # The data's columns against what the type reads; a script of the user's reads it its own way.
        own_reader = request.services_only or cluster.script is not None
        needs = [] if own_reader else framework.dataset_needs(request.config.native, request.training_type)
        data_notes = check_datasets(needs, path.parent)
        prepared = framework.prepare_config(native, context)
        script_command, prepared = _own_script(framework, prepared, context)
        config_text = framework.serialize_config(prepared)
        launch_notes = [] if request.services_only else framework.launch_notes(prepared, context)
        user_shipped = user_files(path.parent, cluster.files)
        code, code_notes = shipped_code(cluster, path.parent)
        modules, module_notes = referenced_modules(
            native, framework.module_keys, path.parent, {f.key for f in user_shipped}
        )
        framework_files = framework.config_files(native, context, path.parent)
        services = framework.services(native, context)
        requirements = [*framework.pip_packages(prepared, context), *cluster.pip]
    except (ValueError, KeyError) as exc:
        raise ConfigError([f"{path}: {exc}"]) from None
    user_shipped += modules
    taken = sorted({f.key for f in user_shipped} & {framework.config_file_name, *framework_files, *RUNTIME_KEYS})
    if taken:
        raise ConfigError(
            [f"{path}: `files`: {', '.join(taken)} would replace a file cw mounts in /etc/cw"],
            hint="rename your file",
        )
    files = [
        text_file(framework.config_file_name, config_text),
        *user_shipped,
        *code,
        *(text_file(key, text) for key, text in framework_files.items()),
        *referenced,
    ]
    notices = [*moved, *shipped_notes, *data_notes, *module_notes, *code_notes, *launch_notes]
    return FrameworkOutput(prepared, config_text, files, services, requirements, notices, script_command)


def _own_script(
    framework: BaseTrainingFramework, prepared: dict[str, Any], context: RunContext
) -> tuple[list[str] | None, dict[str, Any]]:
    """The trainer's command for the run's own script and the config as mounted for it
    (None and the config unchanged without `script:`).

    Raises:
        ValueError: The framework runs no script of the user's.
    """
    script = script_in_pod(context.cluster)
    if script is None:
        return None, prepared
    ran = framework.script_command(prepared, context, script)
    if ran is None:
        raise ValueError(
            f"`script`: `{framework.name}` runs its own command and has no way to run yours; use `code` alone "
            "(your modules are importable in the pods), or `cw trl <type>` with `script`"
        )
    return ran


def configmap_files(request: RunRequest, output: FrameworkOutput, workload: Workload) -> list[ShippedFile]:
    """The ConfigMap's files: the framework's and the user's, plus cw's pod-side files the run uses."""
    runtime = []
    if output.requirements:
        runtime.append(PIP_FILE)
    if not request.services_only:
        runtime += [ENTRYPOINT_FILE, FAULT_FILE, PROGRESS_FILE]  # the entrypoint's supervisor, its progress line (issue 34)
    if output.services and workload.strategy.server_keeper:  # a JobSet stops its servers itself
        runtime += [KEEPER_FILE, POD_API_FILE]
    if request.config.cluster.code is not None and not request.services_only:
        runtime.append(CODE_FILE)
    files = [*output.files, *(text_file(key, runtime_file(key)) for key in runtime)]
    if not request.services_only:  # the features' pod-side files, beside the entrypoint (cw_notify.py)
        files += [text_file(key, text) for key, text in features.pod_files(request.config.cluster).items()]
    if request.config.cluster.eval is not None and not request.services_only:
        from cw_cli.render.evaluation import run_eval_file  # cw-eval.json: what `cw eval RUN` evaluates with

        files.append(run_eval_file(request.config))
    try:
        check_size(files, request.config.path)
    except ValueError as exc:
        raise ConfigError([f"{request.config.path}: {exc}"]) from None
    return files


def check_modes(request: RunRequest, services: list[ServiceDef]) -> None:
    """--services and --ttl only where they make sense."""
    if request.services_only and not services:
        raise ConfigError(
            [f"`{request.framework.name} {request.training_type.value}` has no services to deploy"],
            hint="drop --services, or use a multi-service type such as grpo",
        )
    if request.services_only and not request.services_lifetime_s:
        raise ConfigError(
            ["--services starts servers without a trainer, so nothing would ever stop them and free their GPUs"],
            hint="give them a lifetime, e.g. --ttl 6h (they scale to zero then; `cw delete` removes them sooner)",
        )
    if request.services_lifetime_s and not request.services_only:
        raise ConfigError(
            ["--ttl is for --services: with a trainer, the servers stop when the trainer Job ends"],
            hint="drop --ttl, or add --services",
        )
