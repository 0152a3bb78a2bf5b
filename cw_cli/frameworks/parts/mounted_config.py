"""Part 3 of the framework contract: the config and files the pods read."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from cw_cli.frameworks.descriptions import RunContext


class MountedConfig:
    """What the run's ConfigMap holds: the native config as the pods read it (mounted at
    ``/etc/cw/<config_file_name>``), in the framework's file format, with the extra files it
    needs; and which native keys name folders to keep or files and modules to ship.
    """

    #: ConfigMap key of the mounted native config (``/etc/cw/<name>``).
    config_file_name: ClassVar[str] = "config.yaml"
    #: Native keys (paths into the config) naming folders the trainer writes; cw keeps them on
    #: the checkpoint volume.
    output_keys: ClassVar[tuple[tuple[str, ...], ...]] = (("output_dir",),)
    #: Native keys whose value may name a local file or folder to ship with the run (``*`` is
    #: every item of a list), e.g. ``("datasets", "*", "path")``.
    file_keys: ClassVar[tuple[tuple[str, ...], ...]] = ()
    #: Native keys whose values are dotted import paths (``rewards.accuracy``); a module of that
    #: name next to the config is shipped and importable in the pods.
    module_keys: ClassVar[tuple[tuple[str, ...], ...]] = ()

    def prepare_config(self, native: dict[str, Any], context: RunContext) -> dict[str, Any]:
        """Return the native config as mounted in the pods (e.g. with cw's output folder added).

        Raises:
            ValueError: A setting cannot work in this run (shown as a config error, exit code 2).
        """
        return dict(native)

    def serialize_config(self, config: dict[str, Any]) -> str:
        """The mounted config's text (YAML by default; override for another format).

        Args:
            config: The result of ``prepare_config``.

        Raises:
            ValueError: A value has no form in the file's format.
        """
        import yaml  # lazily: only rendering needs it

        # allow_unicode stays off: PyYAML would write line breaks (NEL, U+2028) raw and lose them.
        # libyaml: ~10x faster, the same data (tests/unit/test_libyaml_dump_reads_back_the_same.py)
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        return yaml.dump(config, Dumper=dumper, sort_keys=False)

    def config_files(self, native: dict[str, Any], context: RunContext, base_dir: Path) -> dict[str, str]:
        """Extra files for the ConfigMap besides the config (name -> text).

        Args:
            native: The native config as the user wrote it.
            context: The run being described.
            base_dir: Folder of the user's config file, for relative paths.
        """
        return {}
