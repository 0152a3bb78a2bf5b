"""Part 2 of the framework contract: reading and checking the user's native config."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from cw_cli.frameworks.descriptions import DatasetNeed
from cw_cli.frameworks.tracking import Tracking, from_trainer_args
from cw_cli.types import TrainingType


class NativeConfig:
    """How the framework's own config reads before anything is rendered: its defaults, the keys it
    needs, its checks, old spellings, the sizes it states, the data it reads and the secrets and
    trackers it uses. Every hook has a default; override what your framework says more about.
    """

    #: Top-level native keys that count per step (batch sizes, accumulation steps): each must be
    #: a whole number of at least 1 (a negative batch size launched a run that fails at once).
    count_keys: ClassVar[tuple[str, ...]] = ()
    name: ClassVar[str]  # the identity part's, named in messages

    def native_defaults(self, training_type: TrainingType) -> dict[str, Any]:
        """Native config values used when the user's file does not set them."""
        return {}

    def known_native_keys(self) -> frozenset[str]:
        """Native keys that look like cw fields but are legitimate (skips "did you mean" there)."""
        return frozenset()

    def claims_native_keys(self, data: dict[str, Any]) -> set[str]:
        """Top-level keys that are the framework's own although cw has a field of that name.

        verifiers' vf-rl config has an ``env`` section (``id``, ``args``); cw's ``env`` is
        environment variables. A framework claims such a key when its value has its own shape.
        """
        return set()

    def upgrade_config(self, native: dict[str, Any], training_type: TrainingType) -> tuple[dict[str, Any], list[str]]:
        """Translate keys that older releases of the framework spelled differently.

        Returns:
            (the config to use, one note per translated key). The default changes nothing.
        """
        return native, []

    def required_keys(self, training_type: TrainingType) -> list[tuple[str, ...]]:
        """Native keys that must be present; each entry lists alternatives (any one suffices)."""
        return []

    def validate_config(self, native: dict[str, Any], training_type: TrainingType) -> list[str]:
        """Check the native config; return one message per problem (empty when valid).

        The default checks ``required_keys``, ``count_keys`` and NUL characters; override to add
        more and call super().
        """
        problems = []
        for alternatives in self.required_keys(training_type):
            if not any(key in native for key in alternatives):
                wanted = " or ".join(f"`{key}`" for key in alternatives)
                problems.append(f"missing {wanted} (required by `{self.name} {training_type.value}`)")
        for key in self.count_keys:
            problem = _count_problem(native.get(key))
            if problem is not None:
                problems.append(f"`{key}: {_short(native[key])}` {problem}")
        where = _nul_at(native)
        if where is not None:  # it would reach a server's or trainer's arguments, which cannot hold one
            problems.append(f"`{where}` holds a NUL character (\\x00), which no argument or config value may hold; remove it")
        return problems

    def native_resources(
        self, native: dict[str, Any], training_type: TrainingType, base_dir: Path
    ) -> dict[tuple[str, ...], tuple[int, str]]:
        """What the native config itself says about sizing, as cw fields.

        Args:
            native: The native config, defaults merged.
            training_type: The training method.
            base_dir: Folder of the config file (for files it names, e.g. an accelerate config).

        Returns:
            cw field path (``("gpu",)``, ``("services", "server", "gpu")``) -> (value, the native
            key that says so, for messages). cw uses a value when the user set no cw field for
            it; a flag that disagrees wins with a note; a cw field in the file that disagrees is
            an error.
        """
        return {}

    def dataset_needs(self, native: dict[str, Any], training_type: TrainingType) -> list[DatasetNeed]:
        """The columns the training type reads from each dataset the config names.

        cw checks them before launch where it can read the data here (a local file, the local
        Hugging Face cache). The default declares nothing, so a plugin is never refused for data
        it did not describe; declare only forms the framework is known to refuse.

        Args:
            native: The native config as the user wrote it (defaults merged).
            training_type: The training method.
        """
        return []

    def secrets_needed(self, native: dict[str, Any]) -> dict[str, str]:
        """Environment variables the config needs from a Secret (name -> the setting that needs it)."""
        needed: dict[str, str] = {}
        if self.pushes_to_hub(native):
            needed["HF_TOKEN"] = "push_to_hub: true"
        if self.tracking(native).wandb:
            needed["WANDB_API_KEY"] = self.wandb_setting(native)
        return needed

    def pushes_to_hub(self, native: dict[str, Any]) -> bool:
        """Whether the config uploads its results to the Hugging Face Hub (``push_to_hub: true``)."""
        return native.get("push_to_hub") is True

    def tracking(self, native: dict[str, Any]) -> Tracking:
        """Experiment trackers the config reports to (the Hugging Face Trainer's ``report_to``)."""
        return from_trainer_args(native)

    def wandb_setting(self, native: dict[str, Any]) -> str:
        """The setting that turns W&B on, as the user wrote it (for messages)."""
        return f"report_to: {native.get('report_to')}"

    def trained_environment(self, native: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """The verifiers environment the run trains on (its id, and the arguments its
        ``load_environment`` takes), which an ``eval:`` block naming neither tasks nor environments
        scores with vf-eval; None where the framework trains on none."""
        return None


def _count_problem(value: Any) -> str | None:
    """Why a batch size or step count is unusable (None when fine or unset: the default)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            return "must be a whole number, at least 1"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "must be a whole number, at least 1"
    if isinstance(value, float) and not value.is_integer():
        return "must be a whole number, at least 1"
    return None if value >= 1 else "must be at least 1"


def _short(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _nul_at(value: Any, path: str = "", depth: int = 0) -> str | None:
    """The dotted path of the first string (value or key) holding a NUL, or None.

    Bounded: a loaded config is at most 64 levels deep (the loader refuses deeper).
    """
    if depth > 100:
        return None
    if isinstance(value, str):
        return (path or "(the config)") if "\0" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and "\0" in key:
                return here.replace("\0", "\\x00")
            found = _nul_at(item, here, depth + 1)
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _nul_at(item, f"{path}[{index}]", depth + 1)
            if found is not None:
                return found
    return None
