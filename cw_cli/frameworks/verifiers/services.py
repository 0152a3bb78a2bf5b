"""verifiers' server: `vf-vllm`, behind a headless Service with the weight-sync port."""

from __future__ import annotations

import json
from typing import Any

from msgspec.structs import replace

from cw_cli.frameworks.base import RunContext, ServiceDef, Services
from cw_cli.frameworks.servers import server_sizing
from cw_cli.frameworks.verifiers.pins import SERVER_MANAGED_ARGS, VERIFIERS_IMAGE, VLLM_PORT, WEIGHT_SYNC_PORT, mapping_at


def server_flags(args: dict[str, Any]) -> list[str]:
    """``inference.args`` as vf-vllm flags, the way verifiers' own ``vf-rl`` converts them.

    ``enforce_eager: true`` -> ``--enforce-eager``; false omits the flag; a mapping becomes JSON
    (vLLM's form for options such as ``--hf-overrides``); anything else ``--key value``.
    """
    flags: list[str] = []
    for key, value in args.items():
        flag = "--" + str(key).replace("_", "-")
        if isinstance(value, bool):
            flags += [flag] if value else []
        elif isinstance(value, dict):
            flags += [flag, json.dumps(value)]
        else:
            flags += [flag, str(value)]
    return flags


class VerifiersServices(Services):
    """`vf-vllm` with the user's `inference.args`; cw sizes and places it."""

    def services(self, native: dict[str, Any], context: RunContext) -> list[ServiceDef]:
        server = server_sizing(context, "server", VLLM_PORT)
        managed = set(SERVER_MANAGED_ARGS)
        own_args = {k: v for k, v in mapping_at(native, "inference", "args").items() if k not in managed}
        command = ["vf-vllm", "--model", str(native["model"]), *server_flags(own_args), *server.parallel_args()]
        definition = server.service(context.cluster.image or VERIFIERS_IMAGE, command, "/health")
        return [replace(definition, extra_ports={"weight-sync": WEIGHT_SYNC_PORT}, headless=True)]
