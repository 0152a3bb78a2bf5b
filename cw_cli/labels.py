"""The names cw writes on objects and reads back: label and annotation keys, roles, resources.

One module owns them, so the renderer that writes a label and the inspector that selects by it
cannot drift apart. Ground level: imports nothing of cw.
"""

from __future__ import annotations

# Kubernetes' recommended labels, on every object of a run.
NAME_LABEL = "app.kubernetes.io/name"  # the framework
INSTANCE_LABEL = "app.kubernetes.io/instance"  # the run
COMPONENT_LABEL = "app.kubernetes.io/component"  # the role
PART_OF_LABEL = "app.kubernetes.io/part-of"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
VERSION_LABEL = "app.kubernetes.io/version"
#: The value of MANAGED_BY_LABEL on everything cw creates.
MANAGED_BY = "cw"
PART_OF = "cw"

# cw's own labels and annotations.
RUN_LABEL = "cw-cli.dev/run"
TYPE_LABEL = "cw-cli.dev/training-type"
SWEEP_LABEL = "cw-cli.dev/sweep"
#: A pipeline's runs and keeper carry its name; each run its stage (`cw pipeline`, `cw list` groups them).
PIPELINE_LABEL = "cw-cli.dev/pipeline"
STAGE_LABEL = "cw-cli.dev/pipeline-stage"
LIFETIME_ANNOTATION = "cw-cli.dev/lifetime-seconds"
WANDB_URL_ANNOTATION = "cw-cli.dev/wandb-url"
TENSORBOARD_ANNOTATION = "cw-cli.dev/tensorboard-dir"
#: On a run's ConfigMap: the kinds of the run's objects (``Job,NetworkPolicy``), so `cw status`
#: reads those kinds only instead of listing every kind a run may have.
KINDS_ANNOTATION = "cw-cli.dev/kinds"

# Other projects' keys cw writes or reads.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
GPU_RESOURCE = "nvidia.com/gpu"
#: Label JobSet puts on its child Jobs and their pods.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"

# Roles (the component label) of a run's pods.
TRAINER = "trainer"
SERVER = "server"
REWARD = "reward"
#: Roles of the servers a multi-service run may have, in the order cw starts them.
SERVER_ROLES = (SERVER, REWARD)
ROLES = (TRAINER, *SERVER_ROLES)
#: `cw export`'s pod: part of the run (its logs: `cw logs RUN --role export`), not a server.
EXPORT = "export"
#: `cw artifacts`' short-lived pod that reads the run's volume.
READER = "reader"
#: `cw serve` / `cw try`: a vLLM server on the run's model, with a lifetime.
SERVE = "serve"
#: An evaluation pod: scores one model of the run with lm-evaluation-harness (docs/evaluation.md).
EVAL = "eval"
#: Roles `cw logs --role` reads.
LOG_ROLES = (*ROLES, EXPORT, SERVE, EVAL)
#: The keeper's objects (ServiceAccount, Role, RoleBinding) that let a run's servers stop themselves.
KEEPER = "keeper"
#: The memory estimate's roles: the trainer (:data:`TRAINER`) and the vLLM engine.
VLLM = "vllm"


#: Suffix of each object of a run after the run's name (`<run>-config`, `<run>-trainer`, ...).
OBJECT_SUFFIXES = ("config", TRAINER, "nodes", SERVER, REWARD, KEEPER, "network")


def object_names(run_name: str) -> dict[str, str]:
    """Name of each object of a run, by suffix: the renderer writes them, `cw status` reads some by name."""
    return {suffix: f"{run_name}-{suffix}" for suffix in OBJECT_SUFFIXES}


def managed_selector() -> str:
    """Label selector of every object cw manages."""
    return f"{MANAGED_BY_LABEL}={MANAGED_BY}"

