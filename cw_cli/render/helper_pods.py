"""The helper pods of the after-training commands, rendered from templates like every other manifest:
the reader of `cw artifacts` / `cw download` (kubeconfigs/common/reader-pod.yaml.j2) and the vLLM
server of `cw serve` / `cw try` with its Service (serve-pod.yaml.j2, serve-service.yaml.j2).

Both meet Pod Security "restricted": a numeric non-root user, no capabilities, no privilege
escalation, the runtime's seccomp profile. The reader is a small Python image on any node without
a GPU; the server's vLLM command is derived from what the run left (a full model, or a LoRA adapter
served on its base model) and from the GPUs asked for.
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct, field

from cw_cli.errors import ConfigError
from cw_cli.frameworks.base import CHECKPOINT_MOUNT
from cw_cli.frameworks.trl import VLLM_IMAGE  # the server's image: the one cw runs for GRPO's generation
from cw_cli.labels import COMPONENT_LABEL, GPU_RESOURCE, READER, RUN_LABEL, SERVE
from cw_cli.render.plan import CONTAINER_SECURITY
from cw_cli.render.templates import render_manifest

#: The reader's image: the Python Software Foundation's Debian slim image, pinned to a patch
#: release. cw's pod-side scripts (cw_artifacts.py, cw_fetch.py) need only python3 and the
#: standard library; the image is about 45 MB compressed against the trainer's several GB, is
#: rebuilt for every Python and Debian security release, and has coreutils (`sleep`).
READER_IMAGE = "python:3.12.12-slim-bookworm"
#: The reader's user: nobody. It only reads, so files the trainer left world-readable (its default
#: umask 022) are enough.
READER_USER = 65534
#: The reader pod's longest life: it is deleted once read, and ends by itself after this.
READER_DEADLINE_S = 900
READER_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}

#: The non-root user the vLLM image ships (``vllm``, home /home/vllm, since vLLM's PR #40275):
#: a user the image's /etc/passwd knows, so torch's getpass.getuser() works and $HOME (the
#: Hugging Face, vLLM, Triton and Inductor caches) is writable.
VLLM_USER = 2000
SERVE_PORT = 8000
#: The longest context cw asks vLLM for when the model allows more: a 128k context's KV cache
#: alone can outgrow a GPU, and vLLM refuses to start when one sequence of max-model-len does
#: not fit.
MAX_MODEL_LEN_CAP = 32768
#: vLLM's accepted ``--max-lora-rank`` values (vllm/config/lora.py MaxLoRARanks).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
#: What the server pod asks for per GPU (at least one GPU's worth): vLLM's API server, tokenizer
#: and scheduler processes, and a safetensors shard in memory while the weights load.
SERVE_CPU_PER_GPU = 4
SERVE_MEMORY_GI_PER_GPU = 16
SERVE_SHM = "16Gi"
#: The servers `cw serve` / `cw try` start: vLLM (a GPU's), or transformers' own ``transformers
#: serve`` (OpenAI-compatible too) on CPU, in the run's own image: where a cluster's GPUs are
#: simulated (the test cluster), or asked for with ``--engine transformers``.
VLLM_ENGINE, TRANSFORMERS_ENGINE = "vllm", "transformers"
#: The label saying which server a serve pod runs (``cw try`` asks each in its own way).
ENGINE_LABEL = "cw-cli.dev/serve-engine"
#: transformers' server runs as nobody (any image: no user of its own is needed), with its caches
#: in /tmp, which every image has writable.
TRANSFORMERS_SERVE_ENV = [{"name": "HOME", "value": "/tmp"}, {"name": "HF_HOME", "value": "/tmp/hf-home"}]


def restricted_pod_security(user: int) -> dict[str, Any]:
    """The pod securityContext of a helper pod running as ``user`` (Pod Security "restricted")."""
    return {"runAsNonRoot": True, "runAsUser": user, "seccompProfile": {"type": "RuntimeDefault"}}


def _labels(run_labels: dict[str, str], component: str) -> dict[str, str]:
    kept = {k: v for k, v in run_labels.items() if not k.startswith("kueue.x-k8s.io/")}
    return {**kept, COMPONENT_LABEL: component}


class ReaderPlacement(Struct, frozen=True):
    """Where a reader may run. Default: any node (no GPU-node selector or tolerations).

    Attributes:
        node: The node that must run it: the one where a running pod has the run's
            ReadWriteOnce volume mounted (a second node could not attach it).
        tolerations: That pod's tolerations, so a tainted (GPU) node accepts the reader too.
    """

    node: str | None = None
    tolerations: list[dict[str, Any]] = field(default_factory=list)


def reader_name(run_name: str) -> str:
    """The reader pod's name (one per run)."""
    return f"{run_name}-{READER}"


def reader_manifest(
    run_name: str, run_labels: dict[str, str], claim: str, placement: ReaderPlacement | None = None,
    namespace: str | None = None, image: str = READER_IMAGE,
) -> dict[str, Any]:  # fmt: skip
    """The reader pod: the run's claim read-only at the checkpoint mount, asleep until cw execs in it
    (``image``: the cluster's choice, where its kubeconfig context names one)."""
    placement = placement or ReaderPlacement()
    affinity: dict[str, Any] = {}
    if placement.node:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [placement.node]}]}
        affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    name = reader_name(run_name)
    values = {
        "name": name,
        "namespace": namespace,
        "labels": _labels(run_labels, READER),
        "roles": {READER: READER},
        "deadline_s": READER_DEADLINE_S,
        "pod_security": restricted_pod_security(READER_USER),
        "container_security": {**CONTAINER_SECURITY, "readOnlyRootFilesystem": True},
        "affinity": affinity,
        "tolerations": placement.tolerations,
        "image": image,
        "command": ["sleep", str(READER_DEADLINE_S)],
        "mount": CHECKPOINT_MOUNT,
        "resources": READER_RESOURCES,
        "claim": claim,
    }
    return render_manifest("common/reader-pod.yaml.j2", values, [], "Pod", name)


class ServedModel(Struct, frozen=True):
    """What is served, read off the run's volume (the ``model`` facts of cw_artifacts.py's listing).

    Attributes:
        path: The folder on the volume (a full model, or a LoRA adapter).
        adapter: Whether it is a LoRA adapter (adapter_config.json).
        base: An adapter's base model (its ``base_model_name_or_path``: a Hub id or a path).
        lora_rank: An adapter's rank ``r``.
        heads: The model's (or the base's, where cw could read it) attention heads.
        kv_heads: Its key/value heads (grouped-query attention), if it says.
        max_positions: Its ``max_position_embeddings``.
    """

    path: str
    adapter: bool = False
    base: str | None = None
    lora_rank: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    max_positions: int | None = None


def served_model(entry: dict[str, Any]) -> ServedModel:
    """A :class:`ServedModel` from one artifact of cw_artifacts.py's listing (path on the volume)."""
    facts = entry.get("model") or {}

    def number(key: str) -> int | None:
        value = facts.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    base = facts.get("base")
    path = str(entry["path"])
    return ServedModel(
        path=path if path.startswith("/") else f"{CHECKPOINT_MOUNT}/{path}",
        adapter=bool(entry.get("adapter")),
        base=base if isinstance(base, str) and base else None,
        lora_rank=number("lora_rank"),
        heads=number("heads"),
        kv_heads=number("kv_heads"),
        max_positions=number("max_positions"),
    )


def serve_parallelism(gpus: int, heads: int | None, kv_heads: int | None) -> tuple[int, int]:
    """(tensor parallel, data parallel) for ``gpus``: the largest tensor parallelism that divides
    the GPUs and the attention heads and splits the key/value heads as vLLM requires (divides them,
    or is a multiple of them); the other GPUs serve copies (data parallelism)."""
    if gpus <= 1:
        return 1, 1
    for tp in range(gpus, 0, -1):
        if gpus % tp or (heads and heads % tp):
            continue
        if kv_heads and (kv_heads % tp if tp <= kv_heads else tp % kv_heads):
            continue
        return tp, gpus // tp
    return 1, gpus


def _lora_rank(rank: int | None, run_name: str) -> int:
    wanted = rank or 16
    for allowed in VLLM_LORA_RANKS:
        if allowed >= wanted:
            return allowed
    raise ConfigError([f"run {run_name!r}: its LoRA adapter has rank {wanted}, above vLLM's largest, {VLLM_LORA_RANKS[-1]}"],
                      hint=f"serve it merged: cw export {run_name} --merge --wait, then "
                           f"cw serve {run_name} --checkpoint export:final-merged")  # fmt: skip


def _base_of(model: ServedModel, run_name: str) -> str:
    base = model.base
    if not base:
        raise ConfigError([f"run {run_name!r}: the adapter {model.path}/adapter_config.json names no base_model_name_or_path"],
                          hint=f"serve it merged: cw export {run_name} --merge --wait, then "
                               f"cw serve {run_name} --checkpoint export:final-merged")  # fmt: skip
    if base.startswith("/") and not base.startswith(CHECKPOINT_MOUNT + "/"):
        raise ConfigError([f"run {run_name!r}: the adapter's base model {base} is a folder of the trainer's pod, "
                           "not on the run's volume nor on the Hub: the server cannot load it"],
                          hint=f"serve it merged: cw export {run_name} --merge --wait, then "
                               f"cw serve {run_name} --checkpoint export:final-merged")  # fmt: skip
    return base


def vllm_command(run_name: str, model: ServedModel, gpus: int) -> list[str]:
    """The server's command: vLLM on the model (or on an adapter's base with the adapter as a LoRA
    module named after the run), so requests for model ``run_name`` get the trained weights.

    Raises:
        ConfigError: An adapter whose base cannot be loaded by the server, or whose rank vLLM refuses.
    """
    if model.adapter:
        weights = _base_of(model, run_name)
        served = ["--enable-lora", "--lora-modules", f"{run_name}={model.path}",
                  "--max-lora-rank", str(_lora_rank(model.lora_rank, run_name))]  # fmt: skip
    else:
        weights, served = model.path, ["--served-model-name", run_name]
    command = ["vllm", "serve", weights, *served, "--host", "0.0.0.0", "--port", str(SERVE_PORT)]
    tp, dp = serve_parallelism(gpus, model.heads, model.kv_heads)
    if tp > 1:
        command += ["--tensor-parallel-size", str(tp)]
    if dp > 1:
        command += ["--data-parallel-size", str(dp)]
    if model.max_positions:
        command += ["--max-model-len", str(min(model.max_positions, MAX_MODEL_LEN_CAP))]
    return command


#: transformers' server loads full models only: an adapter is merged into its base first (peft, in
#: the run's image), into the container's own /tmp. Arguments: the adapter folder, the destination.
MERGE_ADAPTER_SCRIPT = """\
import os, sys
from peft import AutoPeftModelForCausalLM
from transformers import AutoTokenizer
adapter, merged = sys.argv[1], sys.argv[2]
model = AutoPeftModelForCausalLM.from_pretrained(adapter)
base = model.peft_config["default"].base_model_name_or_path
model.merge_and_unload().save_pretrained(merged)
has_tokenizer = os.path.isfile(os.path.join(adapter, "tokenizer_config.json"))
AutoTokenizer.from_pretrained(adapter if has_tokenizer else base).save_pretrained(merged)
print("[cw-serve] merged the adapter into its base", base, flush=True)
"""
MERGED_FOLDER = "/tmp/cw-merged"


def transformers_command(model: ServedModel) -> list[str]:
    """transformers' own server, pinned to the model (an adapter merged into its base first);
    requests name no model. Folders are arguments of the shell, never part of its script."""
    serve = f"exec transformers serve \"$1\" --host 0.0.0.0 --port {SERVE_PORT}"
    if not model.adapter:
        return ["sh", "-c", serve, "serve", model.path]
    merge_then_serve = f'python3 -c "$0" "$2" "$1" && {serve}'
    return ["sh", "-c", merge_then_serve, MERGE_ADAPTER_SCRIPT, MERGED_FOLDER, model.path]


def serve_resources(gpus: int, trainer_requests: dict[str, Any] | None = None) -> dict[str, Any]:
    """The server's requests and limits: CPU and memory per GPU (at most what the run's trainer
    asked for: render/helper_sizing.py), memory limited to its request."""
    from cw_cli.render.helper_sizing import fit_to_trainer

    share = max(gpus, 1)
    cpu, memory = fit_to_trainer(str(SERVE_CPU_PER_GPU * share), f"{SERVE_MEMORY_GI_PER_GPU * share}Gi", trainer_requests or {})
    requests: dict[str, Any] = {"cpu": cpu, "memory": memory}
    limits: dict[str, Any] = {"memory": memory}
    if gpus:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = gpus
    return {"requests": requests, "limits": limits}


class ServeSpec(Struct, frozen=True):
    """What `cw serve` starts, with the facts taken over from the run's trainer.

    Attributes:
        run_name: The run (the served model's name).
        run_labels: The run's labels (the component is set to ``serve``).
        claim: The run's checkpoint volume claim.
        model: What is served.
        lifetime_s: The server's lifetime (its activeDeadlineSeconds).
        gpus: GPUs of the server.
        node_selector: Where the trainer may run (GPU nodes).
        tolerations: The trainer's tolerations.
        env: The trainer's Hub entries (HF_TOKEN, HF_ENDPOINT): an adapter's base may come from the Hub.
        engine: :data:`VLLM_ENGINE` or :data:`TRANSFORMERS_ENGINE`.
        image: The trainer's image (transformers' server runs there: it has the model's libraries).
        trainer_requests: What the trainer container asked for (the server asks for no more).
    """

    run_name: str
    run_labels: dict[str, str]
    claim: str
    model: ServedModel
    lifetime_s: int
    gpus: int
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    env: list[dict[str, Any]] = field(default_factory=list)
    engine: str = VLLM_ENGINE
    image: str = ""
    trainer_requests: dict[str, Any] = field(default_factory=dict)


def serve_name(run_name: str) -> str:
    """The server pod's and its Service's name."""
    return f"{run_name}-{SERVE}"


def server_manifests(spec: ServeSpec, namespace: str | None = None) -> list[dict[str, Any]]:
    """The server pod (ended by the kubelet after its lifetime) and its Service.

    Raises:
        ConfigError: What :func:`vllm_command` refuses.
    """
    name = serve_name(spec.run_name)
    labels = {**_labels(spec.run_labels, SERVE), ENGINE_LABEL: spec.engine}
    common = {"name": name, "namespace": namespace, "labels": labels, "port": SERVE_PORT}
    on_cpu = spec.engine == TRANSFORMERS_ENGINE
    pod_values = {
        **common,
        "roles": {SERVE: SERVE},
        "lifetime_s": spec.lifetime_s,
        "pod_security": restricted_pod_security(READER_USER if on_cpu else VLLM_USER),
        "container_security": CONTAINER_SECURITY,
        "node_selector": spec.node_selector,
        "tolerations": spec.tolerations,
        "image": spec.image if on_cpu else VLLM_IMAGE,
        "command": transformers_command(spec.model) if on_cpu else vllm_command(spec.run_name, spec.model, spec.gpus),
        "env": [*spec.env, *TRANSFORMERS_SERVE_ENV] if on_cpu else spec.env,
        "resources": serve_resources(spec.gpus, spec.trainer_requests),
        "mount": CHECKPOINT_MOUNT,
        "claim": spec.claim,
        "shm_size": SERVE_SHM,
    }
    pod = render_manifest("common/serve-pod.yaml.j2", pod_values, [], "Pod", name)
    selector = {COMPONENT_LABEL: SERVE, RUN_LABEL: spec.run_name}
    service = render_manifest("common/serve-service.yaml.j2", {**common, "selector": selector}, [], "Service", name)
    return [pod, service]


def manifests_yaml(manifests: list[dict[str, Any]]) -> str:
    """Helper manifests as multi-document YAML (``--dry-run``'s output), as a plan prints its own."""
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return str(yaml.dump_all(manifests, Dumper=dumper, sort_keys=False, default_flow_style=False, width=1000))
