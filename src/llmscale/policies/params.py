"""A policy parameter, declared once: its default, the range it may take, its unit and meaning.

A policy declares each parameter on its config dataclass, where the field's default is read:
``alpha: float = param(0.4, "(0, 1]", help="smoothing of the arrival rate per tick")``. The
declaration (:func:`param`) is the field's default *and* its :class:`Param`, so the default is
written once; :func:`params_of` collects a dataclass's declarations for
:func:`llmscale.policies.base.register`, and :func:`config_from` builds the dataclass from the
checked values. A parameter that is no field (a percentage the factory turns into a fraction, a
default taken from the deployment) is a plain :class:`Param` in the mapping the policy registers.

Each policy registers a mapping of name -> :class:`Param` (see :func:`llmscale.policies.base.register`);
the registry checks every value a user gives against it before the policy's factory sees it, so
``--policy-config`` and ``llmscale run``'s ``policy.params`` refuse a wrong type or an
out-of-range number with the parameter's name, and ``llmscale policies`` lists the ranges.

A range is written in interval notation over the numbers the parameter takes, e.g. ``"(0, 1]"``
(a share that must leave something), ``"[0, inf)"`` (any finite number from 0 up). An open end at
``inf`` means "finite": NaN and infinity are refused by every numeric parameter, since NaN compares
false with everything and a policy reading it decides silently wrong (``target_utilization: .nan``
divided every capacity by NaN and ``math.ceil`` raised).
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from llmscale.errors import ConfigError
from llmscale.ranges import Interval

__all__ = [
    "AMOUNT_RANGE",
    "COUNT_MAX",
    "DURATION_RANGE",
    "FACTOR_RANGE",
    "NONNEG_RANGE",
    "TICK_RANGE",
    "WINDOW_RANGE",
    "Param",
    "PolicyParamError",
    "check_param",
    "config_from",
    "param",
    "params_of",
]

#: The range of a parameter that sets how often a policy ticks, seconds: a tick shorter than
#: 0.1 s is no controller's (HPA syncs every 15 s, Knative every 2 s) and a 1e-9 s tick would
#: make an hour's replay 3.6e12 controller ticks; a tick longer than a day never acts.
TICK_RANGE: Final = "[0.1, 86400]"

# Every other range is bounded too. A parameter that is only ever "> 0" still has a size a
# policy can run with: the fuzzer of tests/policies/test_fuzz_policy_config.py ran every policy
# with values each declaration accepted, and tps_base 3.4e299 x sla_s 5.3e8 overflowed to inf,
# then int(inf) raised. So:

#: a duration a policy waits, holds, cools down or plans ahead, seconds: up to a week
DURATION_RANGE: Final = "[0, 604800]"
#: a window a policy averages over or divides by, seconds: positive, up to a week
WINDOW_RANGE: Final = "(0, 604800]"
#: an amount a signal is compared with or divided by (a queue length, a concurrency, a metric's
#: target, a score): 1e-6 (below it is zero in disguise, and a signal divided by 1e-300
#: overflows) to 1e9
AMOUNT_RANGE: Final = "[1e-6, 1e9]"
#: a non-negative amount (a tolerance, an activation threshold, a weight): 0 to 1e9
NONNEG_RANGE: Final = "[0, 1e9]"
#: a factor a replica count or a rate is multiplied by (scale rates, smoothing): 1e-6 to 1e6
FACTOR_RANGE: Final = "[1e-6, 1e6]"
#: a count of replicas, GPUs, steps or ticks given as a parameter: up to a million
COUNT_MAX: Final = 1_000_000

T = TypeVar("T")
C = TypeVar("C")

#: where :func:`param` keeps a field's declaration, in ``dataclasses.Field.metadata``
PARAM_METADATA_KEY: Final = "llmscale.param"

_KIND_WORDS: Final = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


@dataclass(frozen=True)
class Param:
    """One parameter of a policy.

    Attributes:
        default: The value when the user gives none; ``None`` means "derived from the deployment"
            (``help`` says from what) and makes the parameter nullable.
        range: Interval notation for numeric parameters (``"(0, 1]"``); None: any finite number.
        kind: ``float``, ``int``, ``bool`` or ``str``; inferred from ``default`` unless it is None.
        unit: For the listing, e.g. ``"s"`` or ``"%"`` (names carry units too: ``_s``, ``_pct``).
        help: One line for the listing.
        choices: The values a ``str`` parameter may take (empty: any string; the policy checks).
        nullable: Whether ``null`` is accepted (always when the default is None).
    """

    default: object
    range: str | None = None
    kind: type | None = None
    unit: str = ""
    help: str = ""
    choices: tuple[str, ...] = ()
    nullable: bool = False
    _interval: Interval | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kind = self.kind
        if kind is None:
            if self.default is None:
                raise ValueError("Param(None) needs kind=...: the default says nothing about the type")
            kind = type(self.default)
            object.__setattr__(self, "kind", kind)
        if kind not in _KIND_WORDS:
            raise ValueError(f"Param kind {kind!r} is not one of bool, int, float, str")
        if self.default is None:
            object.__setattr__(self, "nullable", True)
        if self.range is not None and kind not in (int, float):
            raise ValueError(f"Param range {self.range!r} on a {kind.__name__}: ranges are for numbers")
        # Without a range a number must still be finite: (-inf, inf).
        interval = Interval.parse(self.range if self.range is not None else "(-inf, inf)")
        object.__setattr__(self, "_interval", interval if kind in (int, float) else None)
        if self.default is not None:
            # A declaration whose own default it refuses is a bug of the declaration.
            problem = self.problem(self.default)
            if problem:
                raise ValueError(f"Param default {self.default!r}: {problem}")

    @property
    def interval(self) -> str:
        """The range as written, or the implied one (``"any number"``) for the listing."""
        if self.range is not None:
            return self.range
        if self.kind is str and self.choices:
            return " | ".join(self.choices)
        return ""

    def problem(self, value: object) -> str | None:
        """What is wrong with ``value`` for this parameter, or None when it is acceptable."""
        if value is None:
            return None if self.nullable else f"must be {self._wanted()}, not null"
        kind = self.kind
        if isinstance(value, bool):
            ok = kind is bool
        elif isinstance(value, numbers.Integral):
            ok = kind in (int, float)
        elif isinstance(value, numbers.Real):
            ok = kind is float
        else:
            ok = kind is str and isinstance(value, str)
        if not ok:
            return f"must be {self._wanted()}"
        if kind is str:
            if self.choices and value not in self.choices:
                return f"must be one of {', '.join(self.choices)}"
            return None
        if kind is bool:
            return None
        if value not in self._interval:  # type: ignore[operator]
            return f"must be a finite number in {self.range}" if self.range else "must be a finite number"
        return None

    def _wanted(self) -> str:
        word = _KIND_WORDS[self.kind]  # type: ignore[index]
        if self.range is not None:
            word += f" in {self.range}"
        return f"{word} or null" if self.nullable else word


class PolicyParamError(ConfigError):
    """A policy parameter's value the policy cannot be built with; ``param`` names it, so a config
    file's error can give the field path (``policy.params.<param>``)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


class DeploymentFitError(PolicyParamError):
    """Parameters valid on their own that this deployment cannot serve (a planning request shape
    larger than the model's KV cache holds): a rule of the deployment, not of the parameters, so
    only building the policy for the deployment finds it."""


def check_param(policy: str, name: str, param: Param, value: object) -> object:
    """``value`` if ``param`` accepts it (an integral number becomes a float for a float parameter),
    else ConfigError naming ``policy.name`` and the value: ``slo.target_utilization = 0: must be
    a finite number in (0, 1]``."""
    problem = param.problem(value)
    if problem is not None:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise PolicyParamError(f"{policy}.{name} = {shown}: {problem}", name)
    if param.kind is float and value is not None:
        return float(value)  # type: ignore[arg-type]
    if param.kind is int and value is not None:
        return int(value)  # type: ignore[call-overload]
    return value


def param(
    default: T,
    range: str | None = None,
    *,
    kind: type | None = None,
    unit: str = "",
    help: str = "",
    choices: tuple[str, ...] = (),
) -> T:
    """A config dataclass field that is a policy parameter: its default and its declaration at once.

    ``tick_s: float = param(15.0, TICK_RANGE, unit="s")`` gives the field the default 15.0 and keeps
    ``Param(15.0, TICK_RANGE, unit="s")`` in the field's metadata, where :func:`params_of` finds it;
    the arguments are :class:`Param`'s. A declaration whose default its own range refuses raises
    ValueError when the module is imported (``param(0.0, "(0, 1]")``).
    """
    declared = Param(default, range, kind, unit, help, choices)
    return field(default=default, metadata={PARAM_METADATA_KEY: declared})


def params_of(config: type, *, prefix: str = "") -> dict[str, Param]:
    """The parameters declared on ``config``'s fields with :func:`param`, in field order
    (fields without a declaration, e.g. the deployment's ``min_replicas``, are left out).

    ``prefix`` names them for a config nested in a policy's: slo registers ``StandbyConfig``'s
    ``memory_s`` as ``standby_memory_s`` (``params_of(StandbyConfig, prefix="standby_")``).
    """
    return {
        prefix + f.name: f.metadata[PARAM_METADATA_KEY]
        for f in dataclasses.fields(config)
        if PARAM_METADATA_KEY in f.metadata
    }


def config_from(config: type[C], params: Mapping[str, Any], /, *, prefix: str = "", **rest: Any) -> C:
    """``config`` built from the checked ``params`` that are its declared fields (named with
    ``prefix``, as :func:`params_of` registered them), and ``rest``: the fields the deployment gives
    (``min_replicas=ctx.min_replicas``) and values the factory derives, which win over a parameter
    of the same name (``client_timeout_s`` from the deployment when the parameter is null).
    Parameters that are no field of ``config`` are the factory's to use."""
    own = params_of(config)
    values = {k: params[prefix + k] for k in own if prefix + k in params and k not in rest}
    return config(**values, **rest)
