"""The export gate of a config (``gate:``): how much worse than the base model a checkpoint may
score before `cw export` refuses it.

Its own module (config/models.py holds only the field). The evaluation writes the scores the gate
compares (docs/evaluation.md); the launch records the gate on the run's owner, so `cw export` of
the run applies it without the config file.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class GateSpec(BaseModel):
    """``gate: {metric: gsm8k/exact_match, max_drop: 0.02}`` (the metric defaults to ``eval.metric``)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    metric: str | None = Field(
        default=None,
        pattern=r"^[^/\s]{1,100}/[^\s]{1,100}$",
        description="The task/metric of the evaluation's scores the gate compares, e.g. gsm8k/exact_match; default: "
        "the `eval:` block's metric.",
    )
    max_drop: float = Field(
        default=0.0,
        ge=0,
        le=1e9,
        allow_inf_nan=False,
        description="How much lower (or higher, where lower is better) than the base model's score a checkpoint's "
        "may be and still be exported; absolute, in the metric's units.",
    )
    higher_is_better: bool | None = Field(
        default=None, description="Whether a higher value of the metric is better; default: the `eval:` block's, else true."
    )
