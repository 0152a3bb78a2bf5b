"""Part 5 of the framework contract: the servers the trainer needs."""

from __future__ import annotations

from typing import Any

from cw_cli.frameworks.descriptions import RunContext, ServiceDef


class Services:
    """Long-running servers (a vLLM generation server, a reward model) the trainer talks to.

    Each :class:`~cw_cli.frameworks.descriptions.ServiceDef` becomes a Deployment and a Service
    that must be Ready before the trainer starts; ``--services`` deploys them alone.
    :func:`cw_cli.frameworks.servers.server_sizing` reads the user's ``services.<role>``.
    """

    def services(self, native: dict[str, Any], context: RunContext) -> list[ServiceDef]:
        """Services this type needs before the trainer can start (none by default).

        Raises:
            ValueError: A setting cannot work in this run (shown as a config error, exit code 2).
        """
        return []
