"""argparse argument types shared by the eval scripts: each refuses a bad value saying what it accepts."""

from __future__ import annotations

import argparse
import math
from typing import Callable

# hf_deltalog.cache.MAX_MERGE_INTERVAL, repeated here: importing hf_deltalog imports triton, which must come after a
# CPU smoke run has set TRITON_INTERPRET (tests/test_eval_cli_args.py checks that the two agree).
MAX_MERGE_INTERVAL = 1024


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


def non_negative_int(text: str) -> int:
    """An integer of at least 0."""
    value = _parsed(text, int)
    if value is None or value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer of at least 0; got {text!r}")
    return value


def int_in(low: int, high: int, what: str = "") -> Callable[[str], int]:
    """An integer in ``[low, high]``; ``what`` names where the range comes from."""
    def parse(text: str) -> int:
        value = _parsed(text, int)
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer in [{low}, {high}]{what}; got {text!r}")
        return value

    return parse


def deltalog_merge_interval(text: str) -> int:
    """DeltaLogCache's ``merge_interval``: an integer in ``[1, MAX_MERGE_INTERVAL]``."""
    return int_in(1, MAX_MERGE_INTERVAL, " (DeltaLogCache's merge_interval)")(text)


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


def fraction(text: str) -> float:
    """A number above 0 and at most 1."""
    value = _parsed(text, float)
    if value is None or not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be a number above 0 and at most 1; got {text!r}")
    return value


if __name__ == "__main__":  # a module the eval scripts import, not a script: say so
    print(__doc__)
