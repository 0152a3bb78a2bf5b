"""The trainer's environment for `notify:`: the URLs with their placeholders, and the Secret's keys.

``CW_NOTIFY`` (JSON) tells ``cw_notify.py`` the run's name, the URLs as the config writes them
(``{KEY}`` placeholders, no secret value) and the events; each key the URLs use is read from the
Secret into ``CW_NOTIFY_SECRET_<n>`` by the kubelet (``secretKeyRef``, on the trainer container
only). A missing key is ``optional``: the pod starts anyway and that target is skipped (a
notification never keeps a run from starting); the Secret itself is checked at launch, as every
Secret a run names.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cw_cli.features.notify.config import NotifySpec

NOTIFY_ENV = "CW_NOTIFY"  # cw_notify.NOTIFY_ENV
SECRET_VARIABLE = "CW_NOTIFY_SECRET_{index}"


def notify_env(spec: NotifySpec | None, run_name: str) -> list[dict[str, Any]]:
    """The trainer container's ``env`` entries for ``spec`` (none without `notify`)."""
    if spec is None:
        return []
    keys = {key: SECRET_VARIABLE.format(index=index) for index, key in enumerate(spec.keys())}
    settings = {"run": run_name, "urls": list(spec.urls), "events": list(spec.events), "keys": keys}
    env: list[dict[str, Any]] = [{"name": NOTIFY_ENV, "value": json.dumps(settings, sort_keys=True)}]
    for key, variable in keys.items():
        ref = {"name": spec.secret, "key": key, "optional": True}
        env.append({"name": variable, "valueFrom": {"secretKeyRef": ref}})
    return env
