"""The search space of ``llmscale tune``, derived from a policy's declared parameters.

Each parameter is declared once (:class:`~llmscale.policies.params.Param`: default, range, unit,
help); the tuner reads that declaration and writes no second list of ranges. The declared range
says what a policy *accepts*, which is usually far wider than what is worth searching (``drain_s``
accepts up to a week), so the search window is the default's neighbourhood clipped to it:

* a positive number: a factor :data:`SPAN` either side of the default, on a log scale, clipped to
  the declared range (``slo.target_utilization`` 0.95 in ``[0.01, 1]`` -> ``[0.2375, 1]``;
  ``slo.drain_s`` 30 s -> ``[7.5, 120]``); an integer likewise, rounded inwards (``trend_ticks``
  8 -> ``[2, 32]``);
* a boolean: both values;
* a string with declared choices: each choice;
* not searched unless named with a window: a number whose default is 0 or negative (no scale to
  take a factor of: ``slo.burst_z``), one derived from the deployment (default None), and a
  free string (a signal's name). ``--param burst_z=0:3`` searches it over ``[0, 3]``, checked
  against the declared range.

``--param NAME`` (repeatable) restricts the search to the parameters named; ``NAME=LO:HI`` also
sets the window. A window is refused when an end is outside the declared range, naming both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from llmscale.errors import ConfigError
from llmscale.policies.params import Param
from llmscale.ranges import Interval

if TYPE_CHECKING:
    from llmscale.policies.base import PolicyInfo

__all__ = ["SPAN", "SearchParam", "parse_param_options", "search_space"]

#: How far the default window reaches either side of a positive default: x/÷4. Wide enough to move
#: ``slo.target_utilization`` anywhere from a quarter of a replica's SLO capacity up to all of it,
#: and a 15 s tick between 3.75 s and a minute; narrow enough that 40 trials of a 9-parameter
#: space still sample the region the policy was designed for.
SPAN: Final = 4.0


@dataclass(frozen=True)
class SearchParam:
    """One searched parameter: ``kind`` float/int over ``[low, high]`` (``log``: sampled on a log
    scale), or a categorical over ``choices`` (booleans and strings)."""

    name: str
    kind: type
    default: Any
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    choices: tuple[Any, ...] = ()
    unit: str = ""
    help: str = ""

    def describe(self) -> str:
        """``[7.5, 120] s, log`` or ``{True, False}``, for the listing and the report."""
        if self.choices:
            return "{" + ", ".join(str(c) for c in self.choices) + "}"
        unit = f" {self.unit}" if self.unit else ""
        return f"[{_num(self.low)}, {_num(self.high)}]{unit}{', log' if self.log else ''}"

    def contains(self, value: Any) -> bool:
        """Whether ``value`` lies in the searched window (the defaults' trial asks it)."""
        if self.choices:
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        return self.low <= value <= self.high and (self.kind is not int or float(value).is_integer())

    def distribution(self) -> Any:
        """The Optuna distribution of this parameter (Optuna imported lazily)."""
        import optuna

        if self.choices:
            return optuna.distributions.CategoricalDistribution(list(self.choices))
        if self.kind is int:
            return optuna.distributions.IntDistribution(int(self.low), int(self.high), log=self.log)
        return optuna.distributions.FloatDistribution(self.low, self.high, log=self.log)


def _num(x: float) -> str:
    return f"{x:g}"


def parse_param_options(values: Sequence[str]) -> dict[str, tuple[float, float] | None]:
    """``["alpha", "burst_z=0:3"]`` -> ``{"alpha": None, "burst_z": (0.0, 3.0)}``; ConfigError on a
    malformed option, naming it."""
    out: dict[str, tuple[float, float] | None] = {}
    for raw in values:
        for item in (s.strip() for s in raw.split(",")):
            if not item:
                continue
            name, sep, window = item.partition("=")
            name = name.strip()
            if not name:
                raise ConfigError(f"--param {item!r}: expected NAME or NAME=LO:HI")
            if not sep:
                out[name] = None
                continue
            lo_s, colon, hi_s = window.partition(":")
            try:
                if not colon:
                    raise ValueError
                lo, hi = float(lo_s), float(hi_s)
            except ValueError:
                raise ConfigError(f"--param {item!r}: expected NAME=LO:HI with two numbers") from None
            if not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
                raise ConfigError(f"--param {item!r}: LO must be finite and below HI")
            out[name] = (lo, hi)
    return out


def _default_window(param: Param) -> tuple[float, float, bool] | None:
    """``(low, high, log)`` around a positive default, clipped to the declared range; None when the
    default gives no scale (0, negative, None)."""
    d = param.default
    if isinstance(d, bool) or not isinstance(d, int | float) or d <= 0:
        return None
    low, high = d / SPAN, d * SPAN
    interval = Interval.parse(param.range or "(-inf, inf)")
    low = max(low, interval.lo)
    high = min(high, interval.hi)
    # An open end is not a value the parameter takes: step just inside it.
    if low == interval.lo and not interval.lo_closed:
        low = math.nextafter(low, math.inf)
    if high == interval.hi and not interval.hi_closed:
        high = math.nextafter(high, -math.inf)
    if param.kind is int:
        low, high = math.ceil(low), math.floor(high)
    if not low < high:
        return None
    # The log scale needs a positive low end; clipping keeps it so (interval.lo < d / SPAN or it
    # is the declared positive lower bound, which the default is within).
    return float(low), float(high), low > 0


def _explicit_window(
    policy: str, name: str, param: Param, window: tuple[float, float]
) -> tuple[float, float, bool]:
    lo, hi = window
    for end in (lo, hi):
        problem = param.problem(int(end) if param.kind is int and float(end).is_integer() else end)
        if problem is not None:
            raise ConfigError(
                f"--param {name}={_num(lo)}:{_num(hi)}: {policy}.{name} = {_num(end)} {problem}"
            )
    if param.kind is int and not (float(lo).is_integer() and float(hi).is_integer()):
        raise ConfigError(f"--param {name}={_num(lo)}:{_num(hi)}: {policy}.{name} is an integer")
    return lo, hi, lo > 0 and hi / lo >= 10.0


def search_space(
    info: PolicyInfo, chosen: Mapping[str, tuple[float, float] | None] | None = None
) -> list[SearchParam]:
    """The searched parameters of policy ``info``: every one with a derivable window, or only those
    in ``chosen`` (``--param``), each with the window given there or derived. ConfigError names an
    unknown parameter, or one that needs a window and has none."""
    params = info.params
    for name in chosen or {}:
        if name not in params:
            raise ConfigError(
                f"--param {name}: policy {info.name!r} has no parameter {name!r}; "
                f"parameters: {', '.join(sorted(params))}"
            )
    names = list(chosen) if chosen else list(params)
    out: list[SearchParam] = []
    for name in names:
        param = params[name]
        window = (chosen or {}).get(name)
        assert param.kind is not None  # Param.__post_init__ infers it
        common = SearchParam(name, param.kind, param.default, unit=param.unit, help=param.help)
        if param.kind is bool:
            out.append(replace(common, choices=(True, False)))
            continue
        if param.kind is str:
            if param.choices:
                out.append(replace(common, choices=tuple(param.choices)))
            elif chosen:
                raise ConfigError(
                    f"--param {name}: {info.name}.{name} is a free string, which is not searched"
                )
            continue
        bounds = _explicit_window(info.name, name, param, window) if window else _default_window(param)
        if bounds is None:
            if chosen:
                raise ConfigError(
                    f"--param {name}: {info.name}.{name} has no default to search around "
                    f"(default {param.default!r}); give a window: --param {name}=LO:HI "
                    f"within {param.range or 'any finite number'}"
                )
            continue
        low, high, log = bounds
        out.append(replace(common, low=low, high=high, log=log))
    if not out:
        raise ConfigError(
            f"policy {info.name!r} has no parameter to search; name some with --param NAME=LO:HI"
        )
    return out
