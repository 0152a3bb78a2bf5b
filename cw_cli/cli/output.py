"""Where the CLI writes: results to stdout, progress and errors to stderr."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


@lru_cache(maxsize=1)
def err() -> Console:
    """Console for progress, warnings and errors (stderr)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


@lru_cache(maxsize=1)
def out() -> Console:
    """Console for results (stdout)."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)
