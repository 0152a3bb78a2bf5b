"""What a native config says about experiment tracking (W&B, TensorBoard, MLflow).

Each framework names it differently: TRL and verifiers through the Hugging Face Trainer's
``report_to`` (verifiers under ``trainer.args``), Axolotl through ``wandb_*`` keys. This module
turns those into one :class:`Tracking` that the renderer wires into the pods.
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct

#: The Hugging Face Trainer's ``report_to: all`` means every installed integration; in the
#: framework images that includes W&B and TensorBoard.
_ALL = "all"


class Tracking(Struct, frozen=True):
    """Experiment trackers a run reports to, and what the config pins of them.

    Attributes:
        wandb: The trainer logs to Weights & Biases.
        tensorboard: The trainer writes TensorBoard event files (under its output folder).
        mlflow: The trainer logs to MLflow (``MLFLOW_TRACKING_URI`` comes from the run's ``env``).
        wandb_project: Project the config names, if any.
        wandb_entity: Entity (user or team) the config names, if any.
        wandb_run_id: Run id the config pins, if any (cw then leaves the id alone).
        run_name: The trainer's own run name setting, if any (it wins over cw's).
        wandb_project_default: Project the integration uses when none is set.
    """

    wandb: bool = False
    tensorboard: bool = False
    mlflow: bool = False
    wandb_project: str | None = None
    wandb_entity: str | None = None
    wandb_run_id: str | None = None
    run_name: str | None = None
    wandb_project_default: str | None = "huggingface"


def reported_to(report_to: Any) -> set[str]:
    """Integrations named by a Hugging Face ``report_to`` value (a string or a list)."""
    if isinstance(report_to, str):
        names = {report_to.strip().lower()}
    elif isinstance(report_to, (list, tuple)):
        names = {str(item).strip().lower() for item in report_to}
    else:
        return set()
    if _ALL in names:
        names |= {"wandb", "tensorboard"}
    return names - {"none", _ALL}


def from_trainer_args(args: dict[str, Any]) -> Tracking:
    """Tracking of a config whose trainer arguments are Hugging Face ``TrainingArguments``."""
    names = reported_to(args.get("report_to"))
    run_name = args.get("run_name")
    return Tracking(
        wandb="wandb" in names,
        tensorboard="tensorboard" in names,
        mlflow="mlflow" in names,
        run_name=str(run_name) if run_name else None,
    )
