"""Notifications (`notify:`): the cluster tells the user when a run succeeds, fails, stalls or
restarts, through Apprise URLs whose secret parts come from a Secret (docs/notifications.md).

- ``config.py``: the block's model, and the launch-time check of its URLs (imports Apprise).
- ``env.py``: the trainer's ``CW_NOTIFY`` settings and the Secret's keys.
- ``pod/cw_notify.py``: the pod side, beside cw's entrypoint (standard library only).
"""

from __future__ import annotations

from pathlib import Path

from cw_cli.features.contract import Feature

FEATURE = Feature(
    name="notify",
    block="notify",
    spec="cw_cli.features.notify.config:NotifySpec",
    description="Notifications the cluster sends (Slack, email, Discord, a webhook...: Apprise URLs) on success, "
    "failure, stall and restart: {urls: [...], secret: <Secret for the URLs' {KEY} parts>, events: [...]}.",
    pod_files={"cw_notify.py": Path(__file__).resolve().parent / "pod" / "cw_notify.py"},
    trainer_env="cw_cli.features.notify.env:notify_env",
    before_launch="cw_cli.features.notify.config:check_urls",
)
