"""Kubernetes resource quantities ("500Gi", "32", "1.5") and durations ("6h"), validated before anything is sent."""

from __future__ import annotations

import math
import re

from cw_cli.errors import ConfigError

_QUANTITY = re.compile(
    r"(?P<number>\d+(\.\d+)?|\.\d+)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE](?P<exponent>\d+))?"
)

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
#: Longer than any real quantity; bounds the work (and the error message) for hostile values.
_MAX_LENGTH = 40
#: ``1e18`` is the largest decimal suffix (E); a bigger exponent is no real quantity, and
#: ``10 ** int(exponent)`` on a huge one would run for minutes.
_MAX_EXPONENT = 18
#: Kubernetes keeps a quantity in an int64; nothing real comes near it.
MAX_QUANTITY = float(2**63 - 1)
#: The smallest CPU Kubernetes accepts (precision finer than 1m is refused).
MIN_CPU = 1e-3
#: Less memory than this cannot start a process; ``1m`` (a thousandth of a byte) is a typo for ``1Mi``.
MIN_MEMORY = float(2**20)


def parse_quantity(value: str | int | float) -> float:
    """Return the numeric value of a Kubernetes quantity.

    Args:
        value: A quantity such as ``"64Gi"``, ``"500m"``, ``32`` or ``"1.5"``.

    Returns:
        The value in base units (bytes, cores).

    Raises:
        ValueError: The value is not a positive Kubernetes quantity, or is beyond what
            Kubernetes holds (an exponent over 18, more than 2**63).
    """
    text = str(value).strip()
    shown = text if len(text) <= _MAX_LENGTH else text[:_MAX_LENGTH] + "..."
    match = _QUANTITY.fullmatch(text) if len(text) <= _MAX_LENGTH else None
    if not match:
        raise ValueError(f"{shown!r} is not a Kubernetes quantity (examples: 32, 500m, 64Gi, 1Ti)")
    number = float(match["number"])
    suffix = match["suffix"] or ""
    if match["exponent"] is not None:
        exponent = int(match["exponent"])  # at most _MAX_LENGTH digits: cheap
        if exponent > _MAX_EXPONENT:
            raise ValueError(f"{shown!r}: the exponent is over {_MAX_EXPONENT}; no resource is that large")
        result = number * 10.0**exponent
    elif suffix in _BINARY:
        result = number * _BINARY[suffix]
    else:
        result = number * _DECIMAL[suffix]
    if result <= 0:
        raise ValueError(f"{shown!r} must be greater than zero")
    if not math.isfinite(result) or result > MAX_QUANTITY:
        raise ValueError(f"{shown!r} is larger than Kubernetes can hold (2^63)")
    return result


def normalize_quantity(value: str | int | float, minimum: float = 0.0, what: str = "") -> str:
    """Validate a quantity and return it as the string Kubernetes expects.

    Args:
        value: The quantity as the user wrote it.
        minimum: The smallest sensible value in base units (:data:`MIN_CPU`, :data:`MIN_MEMORY`).
        what: ``"cpu"`` or ``"memory"``, to explain a value under ``minimum``.

    Raises:
        ValueError: Not a quantity, or below ``minimum``.
    """
    amount = parse_quantity(value)
    text = str(value).strip()
    if amount < minimum:
        if what == "memory":
            typo = " (`m` means a thousandth; mebibytes are `Mi`)" if text.endswith("m") else ""
            raise ValueError(
                f"{text!r} is {amount:g} bytes{typo}; memory below 1Mi makes no sense, e.g. write 512Mi or 64Gi"
            )
        raise ValueError(f"{text!r} is below {minimum:g}, the smallest {what or 'amount'} Kubernetes accepts (1m)")
    return text


#: Compiled on first use (by ``re``'s own cache): most commands take no duration.
_DURATION = r"(\d+(?:\.\d+)?)([smhd]?)"
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "": 3600}


#: The longest duration cw takes (a server's lifetime, a wait): a year. Longer is a typo, and
#: beyond it the value no longer fits the clocks and API fields it ends up in.
MAX_DURATION_S = 365 * 86400


def parse_duration(text: str, option: str) -> int:
    """``90m``, ``6h``, ``2d``, ``45s`` (a bare number is hours) -> whole seconds, 1 to a year.

    Raises:
        ConfigError: Not such a duration, or longer than :data:`MAX_DURATION_S`.
    """

    match = re.fullmatch(_DURATION, text.strip()[:40])
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)] if match else 0.0
    if not seconds >= 1:
        raise ConfigError([f"{option} {text[:40]!r}: expected a duration such as 90m, 6h or 2d"])
    if seconds > MAX_DURATION_S:
        raise ConfigError([f"{option} {text[:40]!r} is longer than a year (365d), the most cw takes"],
                          hint=f"give a shorter one, e.g. {option} 30d")  # fmt: skip
    return int(seconds)
