"""Part 6 of the framework contract: what the memory estimate and ``cw status`` take from it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from msgspec import Struct

from cw_cli.frameworks.descriptions import FailureHint
from cw_cli.frameworks.words import ConfigWords
from cw_cli.types import TrainingType

if TYPE_CHECKING:  # pydantic is heavy; `cw --help` must not import it
    from cw_cli.config.models import ClusterSpec
    from cw_cli.estimate.native_setup import RunSetup


class Advice:
    """The framework's training setup in neutral terms (for ``cw estimate`` and the check before a
    launch), how its config spells the settings cw advises on (``words``), and the failures its
    trainer's log shows (``failure_hints``). Without any of it a run still launches: unchecked,
    with advice in plain words.
    """

    #: How the native config spells what the estimate's suggestions and ``cw status``'s advice
    #: name (the micro batch, gradient checkpointing, LoRA...). None: the advice is in plain
    #: words, never in another framework's keys, and the estimate lists no config changes.
    words: ClassVar[ConfigWords | None] = None
    #: Module whose ``read_setup(training_type, native, cluster, base_dir, model_config)`` is
    #: :meth:`training_setup`, imported only when an estimate is made (a built-in's ``setup.py``).
    setup_module: ClassVar[str | None] = None

    def training_setup(
        self,
        native: Mapping[str, Any],
        training_type: TrainingType,
        cluster: ClusterSpec,
        base_dir: Path | None,
        model_config: Mapping[str, Any] | None,
    ) -> RunSetup | None:
        """The run's training setup in neutral terms, for the memory estimate (``cw estimate``
        and the check before a launch); None (the default) when the framework gives none, and
        then the run gets no estimate.

        Called only once the model's config.json is found, so it may import what it needs then.

        Args:
            native: The native config as loaded (defaults merged, old spellings translated).
            training_type: The training method.
            cluster: cw's fields: ``gpu`` per node and ``nodes`` (see
                :func:`cw_cli.frameworks.distributed.trainer_world`), ``services.server``.
            base_dir: The config's folder (files the config names), None when unknown.
            model_config: The model's config.json (for ``dtype: auto``, PEFT's default targets).

        Returns:
            The trainer's :class:`~cw_cli.estimate.memory.TrainingSetup` and the vLLM engine's
            :class:`~cw_cli.estimate.vllm.VllmSetup` with notes, as a
            :class:`~cw_cli.estimate.native_setup.RunSetup`; or None.
        """
        if self.setup_module is None:
            return None
        import importlib  # the reader, and what it imports, load only for an estimate

        reader = importlib.import_module(self.setup_module).read_setup
        return reader(training_type.value, native, cluster, base_dir, model_config)

    @property
    def describes_training(self) -> bool:
        """Whether the framework gives a training setup (``setup_module``, or its own ``training_setup``)."""
        return self.setup_module is not None or type(self).training_setup is not Advice.training_setup

    def failure_hints(self) -> tuple[FailureHint, ...]:
        """Failures the trainer's log may show that only this framework explains (none by default)."""
        return ()


class AdviceData(Struct, frozen=True, kw_only=True):
    """The data of an advice part, as a JSON file holds it (``{"words": {...}, "failure_hints": [...]}``)."""

    words: ConfigWords | None = None
    failure_hints: tuple[FailureHint, ...] = ()


class AdviceFromFile(Advice):
    """An advice part whose words and failure hints are data: a JSON file (``advice_file``) with a
    ``words`` object (:class:`~cw_cli.frameworks.words.ConfigWords`' fields) and a
    ``failure_hints`` list (:class:`~cw_cli.frameworks.descriptions.FailureHint`'s fields), read
    once when the class is defined. How the built-ins declare theirs (``<name>/advice.json``).
    """

    #: The JSON file; a subclass sets it (a missing or malformed file fails at import, naming it).
    advice_file: ClassVar[Path | None] = None
    _hints: ClassVar[tuple[FailureHint, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if vars(cls).get("advice_file") is not None:
            import msgspec.json  # msgspec is loaded already (the structs); its JSON decoder is small

            data = msgspec.json.decode(Path(str(cls.advice_file)).read_bytes(), type=AdviceData)
            cls.words, cls._hints = data.words, data.failure_hints

    def failure_hints(self) -> tuple[FailureHint, ...]:
        """The hints of ``advice_file``."""
        return self._hints
