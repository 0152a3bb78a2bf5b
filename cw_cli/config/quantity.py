"""Kubernetes resource quantities ("500Gi", "32", "1.5") and durations ("6h"), validated before anything is sent."""

from __future__ import annotations

import re

_QUANTITY = re.compile(r"^(?P<number>\d+(\.\d+)?|\.\d+)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE]\d+)?$")

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}


def parse_quantity(value: str | int | float) -> float:
    """Return the numeric value of a Kubernetes quantity.

    Args:
        value: A quantity such as ``"64Gi"``, ``"500m"``, ``32`` or ``"1.5"``.

    Returns:
        The value in base units (bytes, cores).

    Raises:
        ValueError: The value is not a positive Kubernetes quantity.
    """
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (examples: 32, 500m, 64Gi, 1Ti)")
    number = float(match["number"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        result = number * _BINARY[suffix]
    elif suffix[:1] in ("e", "E"):
        result = number * 10 ** int(suffix[1:])
    else:
        result = number * _DECIMAL[suffix]
    if result <= 0:
        raise ValueError(f"{value!r} must be greater than zero")
    return result


def normalize_quantity(value: str | int | float) -> str:
    """Validate a quantity and return it as the string Kubernetes expects."""
    parse_quantity(value)
    return str(value).strip()


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "": 3600}


def parse_duration(text: str, option: str) -> int:
    """``90m``, ``6h``, ``2d``, ``45s`` (a bare number is hours) -> whole seconds, at least 1.

    Raises:
        ConfigError: Not such a duration.
    """
    match = _DURATION.match(text.strip())
    seconds = int(float(match.group(1)) * _UNIT_SECONDS[match.group(2)]) if match else 0
    if seconds < 1:
        from cw_cli.errors import ConfigError

        raise ConfigError([f"{option} {text!r}: expected a duration such as 90m, 6h or 2d"])
    return seconds
