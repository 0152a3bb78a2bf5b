"""Sizing and describing a run's servers from the config's `services:` block, shared by frameworks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct

from cw_cli.frameworks.base import RunContext, ServiceDef

if TYPE_CHECKING:
    from cw_cli.config.models import ServiceResources


class ServerSizing(Struct, frozen=True):
    """GPUs, parallelism and port of one server, with defaults applied.

    Attributes:
        role: ``server`` or ``reward``.
        gpus: GPUs of the server pod (default 1).
        tensor_parallel: vLLM tensor parallelism (default 1).
        port: Port it listens on.
        spec: The user's settings for it, if any.
    """

    role: str
    gpus: int
    tensor_parallel: int
    port: int
    spec: ServiceResources | None

    @property
    def data_parallel(self) -> int:
        """vLLM data parallelism: the GPUs not used by tensor parallelism."""
        return max(1, self.gpus // self.tensor_parallel)

    def parallel_args(self) -> list[str]:
        """``--tensor-parallel-size T --data-parallel-size D --host 0.0.0.0 --port P``."""
        return [
            "--tensor-parallel-size",
            str(self.tensor_parallel),
            "--data-parallel-size",
            str(self.data_parallel),
            "--host",
            "0.0.0.0",
            "--port",
            str(self.port),
        ]

    def service(self, image: str, command: list[str], health_path: str, env: dict[str, str] | None = None) -> ServiceDef:
        """The ServiceDef of this server; the user's image and extra ``args`` win."""
        spec = self.spec
        return ServiceDef(
            role=self.role,
            image=(spec.image if spec and spec.image else image),
            command=[*command, *(spec.args if spec else [])],
            port=self.port,
            gpus=self.gpus,
            cpu=spec.cpu if spec else None,
            memory=spec.memory if spec else None,
            health_path=health_path,
            env=env or {},
        )


def server_sizing(context: RunContext, role: str, default_port: int) -> ServerSizing:
    """Read the ``services.<role>`` settings of a run, with defaults."""
    spec = context.cluster.services.get(role)  # type: ignore[call-overload]
    return ServerSizing(
        role=role,
        gpus=spec.gpu if spec and spec.gpu is not None else 1,
        tensor_parallel=spec.tensor_parallel_size if spec and spec.tensor_parallel_size else 1,
        port=(spec.port if spec else None) or default_port,
        spec=spec,
    )
