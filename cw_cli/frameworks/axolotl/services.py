"""Axolotl's server: `axolotl vllm-serve` as GRPO's generation server in server mode."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from cw_cli.frameworks.axolotl.pins import AXOLOTL_IMAGE, VLLM_PORT, axolotl_bool
from cw_cli.frameworks.base import CONFIG_FILE, RunContext, ServiceDef, Services, TrainingType
from cw_cli.frameworks.servers import server_sizing


def wants_vllm_server(native: Mapping[str, Any], services: Collection[str]) -> bool:
    """Whether an Axolotl GRPO config generates with a separate `axolotl vllm-serve` server (the
    launch's rule, which the memory estimate follows too).

    Axolotl's own rule (``GRPOVllmValidationMixin.check_vllm_mode_set``, 0.19): with
    ``trl.use_vllm`` true and no ``trl.vllm_mode``, the mode is ``server``; it then forwards both
    to TRL. So a server for ``use_vllm`` true unless ``vllm_mode: colocate``, or for a
    ``services.server`` of cw's config; never against ``use_vllm: false`` or ``vllm_mode: colocate``.
    """
    trl: dict[str, Any] = native["trl"] if isinstance(native.get("trl"), dict) else {}
    use_vllm, mode = axolotl_bool(trl.get("use_vllm")), trl.get("vllm_mode")
    if use_vllm is False or mode == "colocate":
        return False
    return (use_vllm is True and mode in (None, "server")) or "server" in services


def uses_generation_server(native: dict[str, Any], context: RunContext) -> bool:
    """Whether this run gets `axolotl vllm-serve` (GRPO that wants a server)."""
    return context.training_type is TrainingType.GRPO and wants_vllm_server(native, context.cluster.services)


class AxolotlServices(Services):
    """`axolotl vllm-serve` reads the same mounted config as the trainer."""

    def services(self, native: dict[str, Any], context: RunContext) -> list[ServiceDef]:
        if not uses_generation_server(native, context):
            return []
        server = server_sizing(context, "server", VLLM_PORT)
        image = context.cluster.image or AXOLOTL_IMAGE
        return [server.service(image, ["axolotl", "vllm-serve", CONFIG_FILE], "/health/")]
