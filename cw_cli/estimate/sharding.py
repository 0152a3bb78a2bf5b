"""Sharding and offload from DeepSpeed, Accelerate and FSDP settings, for the memory estimate.

Reads a DeepSpeed config (a dict, or the JSON file a config names), an Accelerate config (a
profile name, or a YAML/JSON file) and FSDP settings into one :class:`Sharding`. A file that
is not here (one inside the framework's image) is read from its name where that is possible,
with a note; nothing here raises for a config it cannot read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from msgspec import Struct
from msgspec.structs import replace

from cw_cli.estimate.values import as_mapping, truthy


class Sharding(Struct, frozen=True):
    """What DeepSpeed / FSDP / Accelerate settings say about sharding and offload.

    Attributes:
        zero_stage: DeepSpeed's ZeRO stage (None without DeepSpeed).
        fsdp: Whether FSDP shards the model (as a full shard).
        offload_optimizer: Whether the optimizer states live on the CPU (or NVMe).
        offload_params: Whether the parameters live on the CPU (or NVMe).
        activation_checkpointing: FSDP checkpoints each layer itself
            (``fsdp_activation_checkpointing``), in place of the Trainer's gradient checkpointing.
        tensor_parallel: Accelerate's ``parallelism_config_tp_size``.
        context_parallel: Accelerate's ``parallelism_config_cp_size``.
        shard_group: Ranks one FSDP shard spans when the config says (``dp_shard_size`` x
            ``cp_size`` under Accelerate's ParallelismConfig), else None.
    """

    zero_stage: int | None = None
    fsdp: bool = False
    offload_optimizer: bool = False
    offload_params: bool = False
    activation_checkpointing: bool = False
    tensor_parallel: int = 1
    context_parallel: int = 1
    shard_group: int | None = None

    def setup_fields(self) -> dict[str, Any]:
        """The fields :class:`~cw_cli.estimate.memory.TrainingSetup` has under the same names."""
        fields = {name: getattr(self, name) for name in self.__struct_fields__}
        del fields["activation_checkpointing"]  # the setup's gradient_checkpointing says it
        return fields


def _read_structured(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return json.loads(text)
    import yaml  # lazily: only a named file needs it

    return yaml.safe_load(text)


def _local_file(value: str, base_dir: Path | None) -> Path | None:
    path = Path(value).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return path if path.is_file() else None


def _offloaded(section: Any) -> bool:
    device = as_mapping(section).get("device")
    return isinstance(device, str) and device.lower() in ("cpu", "nvme")


def deepspeed_sharding(value: Any, base_dir: Path | None, notes: list[str],
                       bundled: Mapping[str, Sharding] | None = None) -> Sharding | None:
    """ZeRO stage and offload from a DeepSpeed config: a dict, or a JSON file the config names.

    A file that is not here (e.g. one inside the framework's image) is read from its name when
    ``bundled`` knows it or the name says ``zero<N>`` / ``cpuoffload``, with a note.
    """
    data: Any = value if isinstance(value, Mapping) else None
    if isinstance(value, str):
        path = _local_file(value, base_dir)
        if path is not None:
            try:
                data = _read_structured(path)
            except (OSError, ValueError) as exc:
                notes.append(f"could not read the DeepSpeed config {value} ({exc}); counted without DeepSpeed")
                return None
        else:
            name = Path(value).name
            guess = (bundled or {}).get(name) or _sharding_from_name(name)
            if guess is None:
                notes.append(f"the DeepSpeed config {value} is not here and its name says no ZeRO stage; "
                             "counted without DeepSpeed")
                return None
            notes.append(f"the DeepSpeed config {value} is not here; ZeRO-{guess.zero_stage} read from its name"
                         + (" (with CPU offload)" if guess.offload_optimizer or guess.offload_params else ""))
            return guess
    zero = as_mapping(as_mapping(data).get("zero_optimization"))
    stage = zero.get("stage", 0)
    if not isinstance(stage, int) or isinstance(stage, bool):
        notes.append(f"DeepSpeed `zero_optimization.stage: {stage}` is not a number; counted as stage 0")
        stage = 0
    return Sharding(zero_stage=stage, offload_optimizer=_offloaded(zero.get("offload_optimizer")),
                     offload_params=_offloaded(zero.get("offload_param")))  # fmt: skip


def _sharding_from_name(name: str) -> Sharding | None:
    """``zero3_bf16_cpuoffload_all.json`` -> ZeRO-3, optimizer and parameters offloaded."""
    lower = name.lower()
    stage = re.search(r"zero(\d)", lower)
    if not stage:
        return None
    offload = "cpuoffload" in lower
    return Sharding(zero_stage=int(stage.group(1)), offload_optimizer=offload and "cpuoffload_params" not in lower,
                     offload_params=offload)


def accelerate_sharding(value: Any, base_dir: Path | None, notes: list[str],
                        profiles: Mapping[str, Any] | None = None) -> Sharding | None:
    """Sharding from an Accelerate config: a profile name, or a YAML/JSON file the config names."""
    if not isinstance(value, str) or not value:
        return None
    if profiles is not None and value in profiles:
        kind = profiles[value]
        if kind == "fsdp":
            return Sharding(fsdp=True)
        return Sharding(zero_stage=kind) if isinstance(kind, int) else Sharding()
    path = _local_file(value, base_dir)
    if path is None:
        notes.append(f"the Accelerate config {value} is not here; counted without DeepSpeed or FSDP")
        return None
    try:
        data = as_mapping(_read_structured(path))
    except (OSError, ValueError) as exc:
        notes.append(f"could not read the Accelerate config {value} ({exc}); counted without DeepSpeed or FSDP")
        return None
    kind = str(data.get("distributed_type", "")).upper()
    if kind == "DEEPSPEED":
        ds = as_mapping(data.get("deepspeed_config"))
        if isinstance(ds.get("deepspeed_config_file"), str):
            folder = path.parent
            return deepspeed_sharding(ds["deepspeed_config_file"], folder, notes)
        stage = ds.get("zero_stage", 2)
        return Sharding(
            zero_stage=stage if isinstance(stage, int) and not isinstance(stage, bool) else 2,
            offload_optimizer=str(ds.get("offload_optimizer_device", "none")).lower() in ("cpu", "nvme"),
            offload_params=str(ds.get("offload_param_device", "none")).lower() in ("cpu", "nvme"),
        )
    parallel = parallelism(as_mapping(data.get("parallelism_config")))
    if kind == "FSDP":
        found = fsdp_sharding(as_mapping(data.get("fsdp_config")), notes, source=value) or Sharding()
        return replace(found, **parallel)
    return replace(Sharding(), **parallel)


def parallelism(config: Mapping[str, Any], prefix: str = "parallelism_config_") -> dict[str, Any]:
    """Tensor / context parallel sizes and the FSDP shard group from Accelerate's ParallelismConfig
    (an Accelerate config's ``parallelism_config`` section, or the same keys given to
    ``accelerate launch``, as a TRL config may).

    Accelerate shards FSDP over its ``dp_shard_cp`` mesh (``dp_shard_size`` x ``cp_size``);
    ``dp_replicate_size`` replicates those shards (HSDP).
    """
    def size(name: str) -> int | None:
        value = config.get(prefix + name)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None

    tp, shard = size("tp_size"), size("dp_shard_size")
    # context parallelism (ring attention) and sequence parallelism (DeepSpeed's Ulysses / ALST)
    # both split every sequence's tokens over their ranks
    cp = (size("cp_size") or 1) * (size("sp_size") or 1)
    found: dict[str, Any] = {}
    if tp:
        found["tensor_parallel"] = tp
    if cp > 1:
        found["context_parallel"] = cp
    if shard:
        found["shard_group"] = shard * cp
    return found


def fsdp_sharding(config: Mapping[str, Any], notes: list[str], source: str) -> Sharding | None:
    """Sharding from FSDP settings: any strategy but ``NO_SHARD`` is counted as a full shard.

    Reads Accelerate's ``fsdp_*`` keys or the plain ones; a note says when a strategy (or FSDP2
    without ``reshard_after_forward``) is counted as a full shard although it is not one.

    Args:
        config: The FSDP settings.
        notes: Gets what was assumed.
        source: Where the settings come from, for the notes.
    """
    strategy = str(config.get("fsdp_sharding_strategy", config.get("sharding_strategy", "FULL_SHARD"))).upper()
    if strategy in ("NO_SHARD", "3"):
        return Sharding()
    if strategy not in ("FULL_SHARD", "1"):
        notes.append(f"FSDP {strategy.lower()} ({source}) is counted as a full shard")
    reshard = config.get("fsdp_reshard_after_forward", config.get("reshard_after_forward"))
    if reshard is False:
        notes.append(f"FSDP2 without reshard_after_forward ({source}) is counted as a full shard")
    offload = truthy(config.get("fsdp_offload_params", config.get("offload_params", False)))
    checkpointing = truthy(config.get("fsdp_activation_checkpointing", config.get("activation_checkpointing", False)))
    return Sharding(fsdp=True, offload_optimizer=offload, offload_params=offload, activation_checkpointing=checkpointing)
