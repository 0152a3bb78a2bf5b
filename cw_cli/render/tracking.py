"""Experiment tracking wired from the run: one W&B run per cw run, resumed when the run is.

The W&B run id is the cw run name, so a relaunch under the same name (``--name``, after a
failure or a gang restart) continues the same W&B run instead of starting a new one; W&B accepts
ids of letters, digits and dashes, which every run name is. The run's own settings win: an id or
name the config pins, and any ``WANDB_*`` variable in the run's ``env`` (applied after these).
"""

from __future__ import annotations

from urllib.parse import quote

from cw_cli.frameworks.tracking import Tracking

#: Annotation of the run's owner (Job or JobSet) with the W&B run's page, read by ``cw status``.
#: Annotation with the folder TensorBoard's event files go to.
WANDB_HOST = "https://wandb.ai"


def tracking_env(run_name: str, tracking: Tracking, group: str | None = None) -> dict[str, str]:
    """Environment variables for the trainer that tie its W&B run to the cw run (and its sweep)."""
    if not tracking.wandb:
        return {}
    env = {"WANDB_RESUME": "allow"}  # resume the W&B run of that id if it exists, else create it
    if group:
        env["WANDB_RUN_GROUP"] = group  # a sweep's runs side by side in W&B
    if not tracking.wandb_run_id:
        env["WANDB_RUN_ID"] = run_name
    if not tracking.run_name:
        env["WANDB_NAME"] = run_name  # the Trainer's `run_name`, when set, names the W&B run instead
    return env


def tensorboard_dir(output_dir: str, tracking: Tracking, env: dict[str, str]) -> str | None:
    """Where the Hugging Face Trainer writes TensorBoard event files: ``TENSORBOARD_LOGGING_DIR``, else
    ``<output_dir>/runs``."""
    if not tracking.tensorboard:
        return None
    return env.get("TENSORBOARD_LOGGING_DIR") or f"{output_dir}/runs"


def wandb_url(run_name: str, tracking: Tracking, env: dict[str, str]) -> str | None:
    """The W&B run's page, when its entity and project are known from the config or ``env``.

    Args:
        run_name: The cw run name (the W&B run id unless the config pins one).
        tracking: What the config says.
        env: The run's literal environment (``WANDB_ENTITY``, ``WANDB_PROJECT``, ``WANDB_BASE_URL``,
            ``WANDB_RUN_ID`` there win over the config, as they do in the pod).
    """
    if not tracking.wandb:
        return None
    entity = env.get("WANDB_ENTITY") or tracking.wandb_entity
    project = env.get("WANDB_PROJECT") or tracking.wandb_project or tracking.wandb_project_default
    if not entity or not project:
        return None  # W&B picks the API key's default entity, which only the pod's login knows
    run_id = env.get("WANDB_RUN_ID") or tracking.wandb_run_id or run_name
    host = env.get("WANDB_BASE_URL", WANDB_HOST).rstrip("/")
    if host == "https://api.wandb.ai":  # the API's address; the pages are on wandb.ai
        host = WANDB_HOST
    return f"{host}/{quote(entity, safe='')}/{quote(project, safe='')}/runs/{quote(run_id, safe='')}"
