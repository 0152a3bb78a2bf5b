"""Where :class:`ConfigWords` was: it is the frameworks' vocabulary and lives in
:mod:`cw_cli.frameworks.words` now; this name stays for plugins written against it."""

from __future__ import annotations

from cw_cli.frameworks.words import GENERIC_SHARDING, ConfigWords, cuda_oom_fix, shorter_run

__all__ = ["GENERIC_SHARDING", "ConfigWords", "cuda_oom_fix", "shorter_run"]
