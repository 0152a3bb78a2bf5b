"""How cw's config models are built: with pydantic's plugin lookup off, and the blocks few configs
have (``eval:``, ``gate:``, the features' such as ``notify:``) only when a config has them.

Every command that reads a config builds :class:`~cw_cli.config.models.ClusterSpec`'s validator;
a nested model's schema is built into it, which for those three blocks cost 69 M instructions of a
dry run (8%) that almost no config uses. :class:`OnDemand` validates such a block with its own
model, imported and built the first time a config has the block; pydantic's errors keep their
place (``eval.tasks``), and the JSON Schema (`cw schema`) is the model's.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Annotated, Any, Optional

from pydantic import BaseModel, Field, GetCoreSchemaHandler, GetJsonSchemaHandler, create_model
from pydantic_core import core_schema

from cw_cli.features import features

#: pydantic's documented switch: "__all__" turns every plugin off.
_PLUGIN_SWITCH = "PYDANTIC_DISABLE_PLUGINS"
#: The module pydantic asks for its plugins each time it builds a validator. It imports
#: ``importlib.metadata`` (with email, zipfile and csv) at its top, even when the switch is off.
_PLUGIN_LOADER = "pydantic.plugin._loader"


def _no_plugins() -> tuple[()]:
    return ()


def build_without_plugin_lookup(*models: type[BaseModel]) -> None:
    """Build the models' validators with pydantic's plugin lookup off, unless the user set the switch.

    pydantic looks for plugins when it builds a validator, by reading the entry points of every
    installed package: 12 M instructions in a 42-package environment and 31 M in one of 131 (an ML
    one), on every command that reads a config, for a lookup cw's models have no use for. The
    switch is set only while they are built: other models in the process (a notebook's) still
    get their plugins.

    Even with the switch set, importing pydantic's plugin loader imports ``importlib.metadata``:
    52 M instructions, 6% of a dry run. Where nothing has imported the loader yet, a stand-in
    that answers "no plugins" takes its place while cw's models are built, and is removed after,
    so the next model built in the process imports the real loader and gets its plugins. Should
    a pydantic release ask the loader for anything else, the models are built again without the
    stand-in.
    """
    set_here = _PLUGIN_SWITCH not in os.environ
    os.environ.setdefault(_PLUGIN_SWITCH, "__all__")
    stand_in = set_here and _PLUGIN_LOADER not in sys.modules
    if stand_in:
        loader = types.ModuleType(_PLUGIN_LOADER, "cw's stand-in for pydantic's plugin loader while its models are built")
        loader.get_plugins = _no_plugins  # type: ignore[attr-defined]
        sys.modules[_PLUGIN_LOADER] = loader
    try:
        try:
            for model in models:
                model.model_rebuild()
        except ImportError:  # a pydantic that wants more of the loader than get_plugins
            if not stand_in:
                raise
            del sys.modules[_PLUGIN_LOADER]
            stand_in = False
            for model in models:
                model.model_rebuild(force=True)
    finally:
        if stand_in and sys.modules.get(_PLUGIN_LOADER) is loader:
            del sys.modules[_PLUGIN_LOADER]
        if set_here:
            del os.environ[_PLUGIN_SWITCH]


class OnDemand:
    """``Annotated[Any | None, OnDemand("cw_cli.config.evaluation", "EvalSpec")]``: a block
    validated by that model, which is imported and built on first use (None passes as None)."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name
        self._model: type[BaseModel] | None = None

    def model(self) -> type[BaseModel]:
        """The block's model, imported and built (without the plugin lookup) the first time."""
        if self._model is None:
            # __import__, not importlib.import_module: the C import path, which -X importtime reports.
            model = getattr(__import__(self.module, fromlist=[self.name]), self.name)
            build_without_plugin_lookup(model)
            self._model = model
        return self._model

    def validate(self, value: Any) -> Any:
        """The block as its model (its errors are pydantic's, under the block's name)."""
        if value is None:
            return None
        model = self.model()
        return value if isinstance(value, model) else model.model_validate(value)

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(self.validate)

    def __get_pydantic_json_schema__(self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        return {"anyOf": [handler(self.model().__pydantic_core_schema__), {"type": "null"}]}


def with_feature_blocks(base: type[BaseModel]) -> type[BaseModel]:
    """``base`` with one more field per feature (cw_cli/features): its block, validated on demand by
    the feature's own model and None when the config has none. A subclass of the same name (pydantic's
    documented way to add fields), so every method and validator of ``base`` applies."""
    blocks: dict[str, Any] = {}
    for feature in features():
        module, _, name = feature.spec.partition(":")
        annotation = Annotated[Optional[Any], OnDemand(module, name)]  # noqa: UP045 - null allowed, as written_forms reads it
        blocks[feature.block] = (annotation, Field(default=None, description=feature.description))
    return create_model(base.__name__, __base__=base, __module__=base.__module__, __doc__=base.__doc__, **blocks)
