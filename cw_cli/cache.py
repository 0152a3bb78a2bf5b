"""Where cw keeps what it can rebuild: built binaries, compiled templates, fetched model configs."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Root of cw's cache: env ``CW_CACHE_DIR``, else ``$XDG_CACHE_HOME/cw``, else ``~/.cache/cw``."""
    env = os.environ.get("CW_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "cw"
