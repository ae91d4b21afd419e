"""argparse argument types shared by the eval scripts: each refuses a bad value saying what it accepts."""

from __future__ import annotations

import argparse
import math
from typing import Callable


def _parsed(text: str, kind: type) -> float | int | None:
    try:
        return kind(text)
    except ValueError:
        return None


def positive_int(text: str) -> int:
    """An integer of at least 1."""
    value = _parsed(text, int)
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer of at least 1; got {text!r}")
    return value


def int_in(low: int, high: int, what: str = "") -> Callable[[str], int]:
    """An integer in ``[low, high]``; ``what`` names where the range comes from."""
    def parse(text: str) -> int:
        value = _parsed(text, int)
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer in [{low}, {high}]{what}; got {text!r}")
        return value

    return parse


def positive_float(text: str) -> float:
    """A finite number above 0."""
    value = _parsed(text, float)
    if value is None or not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0; got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number of at least 0."""
    value = _parsed(text, float)
    if value is None or not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a finite number of at least 0; got {text!r}")
    return value
