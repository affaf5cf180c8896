"""Intervals written as people write them (``"(0, 1]"``, ``"[0, inf)"``), and membership that refuses NaN.

One reading of the notation for every range llmscale declares: a policy parameter
(:class:`llmscale.policies.params.Param`) and a command-line option (:mod:`llmscale.edge`).
An open end at ``inf`` means "finite": ``x < inf`` is false for infinity, and NaN is inside
no interval (it compares false with every bound), so a NaN that would otherwise pass a
``not x < 0`` check silently is refused.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass

__all__ = ["Interval", "finite_number", "shown_value"]

_NOTATION = re.compile(r"^\s*([\[(])\s*([^,\s]+)\s*,\s*([^,\s]+)\s*([\])])\s*$")


def finite_number(value: object) -> float | None:
    """``value`` as a float when it is a finite number (not a bool), else None.

    What a parsed JSON or YAML number may hold: JSON integers have no size limit, and
    ``math.isfinite(10**400)`` raises OverflowError instead of answering False, which turned a
    400-digit factor in a calibration profile into a traceback (tests/fuzz/test_decision_log_values.py).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        f = float(value)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def shown_value(value: object, limit: int = 40) -> str:
    """``value`` for a one-line message: its repr, a 400-digit integer cut to its first digits."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:12]}... ({len(text)} characters)"


def _bound(text: str) -> float:
    if text in ("inf", "+inf"):
        return math.inf
    if text == "-inf":
        return -math.inf
    return float(text)


@dataclass(frozen=True)
class Interval:
    """A real interval; ``str()`` gives back the notation it was parsed from."""

    lo: float
    hi: float
    lo_closed: bool
    hi_closed: bool
    text: str

    @classmethod
    def parse(cls, text: str) -> Interval:
        """``"(0, 1]"`` -> Interval(0, 1, open, closed). ValueError on anything else."""
        m = _NOTATION.match(text)
        if m is None:
            raise ValueError(f"{text!r} is not an interval such as '(0, 1]' or '[0, inf)'")
        lo, hi = _bound(m.group(2)), _bound(m.group(3))
        if math.isnan(lo) or math.isnan(hi) or lo > hi:
            raise ValueError(f"{text!r} is not an interval: its ends are out of order")
        return cls(lo, hi, m.group(1) == "[", m.group(4) == "]", text.strip())

    def __contains__(self, x: object) -> bool:
        if not isinstance(x, numbers.Real) or isinstance(x, bool):
            return False
        try:
            x = float(x)
        except OverflowError:  # an int beyond 1.8e308 is infinite for every purpose here
            return False
        above = self.lo <= x if self.lo_closed else self.lo < x
        below = x <= self.hi if self.hi_closed else x < self.hi
        return above and below

    def __str__(self) -> str:
        return self.text
