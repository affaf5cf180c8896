"""The Policy protocol and the registry that maps names to factories.

A policy is a pure function of (signals, its own state, now): no I/O, no wall
clock, no globals. It returns a Decision that names the rule that fired and
the numbers that fired it, and its next state (a frozen dataclass).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from llmscale.errors import ConfigError
from llmscale.types import Decision, Signals

if TYPE_CHECKING:
    from llmscale.perf.profile import FactorScale

__all__ = [
    "POLICIES",
    "Policy",
    "PolicyContext",
    "PolicyInfo",
    "PolicyParamError",
    "create_policy",
    "names_a_signal",
    "policy_names",
    "register",
]

S = TypeVar("S")


class Policy(Protocol[S]):
    """Decides desired replicas. Pre: ``now_s`` never decreases between calls.

    A policy may also carry ``guard_overrides: Mapping[str, Any]`` — field
    values of :class:`llmscale.guards.GuardConfig` it needs (e.g. its
    documented cooldowns); the controller merges them over the defaults.
    """

    @property
    def name(self) -> str:
        """The registered name."""
        ...

    @property
    def tick_s(self) -> float:
        """How often the controller calls :meth:`decide`, seconds (e.g. HPA's 15 s sync period)."""
        ...

    def initial_state(self) -> S: ...

    def decide(self, signals: Signals, state: S, now_s: float) -> tuple[Decision, S]:
        """Return the decision at ``now_s`` and the next state; no side effects."""
        ...


@dataclass(frozen=True)
class PolicyContext:
    """What a policy may know about the deployment besides signals (model, GPU, SLOs, bounds)."""

    min_replicas: int = 1
    max_replicas: int = 100
    slo_ttft_s: float = 2.0
    slo_tpot_s: float = 0.1
    model: str = "llama-3-8b"
    gpu: str = "h100-80gb"
    tp: int = 1
    #: cold start of a new replica, seconds (pending + loading + warmup)
    cold_start_s: float = 90.0
    #: path of a calibration profile (``llmscale calibrate``) for the step-time model, or None
    calibration: str | None = None
    #: multipliers on the profile's factors from the live controller's online drift adjustment
    #: (``drift.adapt``; :mod:`llmscale.perf.drift`), or None: the profile as written
    perf_scale: FactorScale | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyInfo:
    name: str
    summary: str
    factory: Callable[[PolicyContext, Mapping[str, Any]], Policy[Any]]
    defaults: Mapping[str, Any]


POLICIES: dict[str, PolicyInfo] = {}


def register(
    name: str, summary: str, defaults: Mapping[str, Any]
) -> Callable[[Callable[[PolicyContext, Mapping[str, Any]], Policy[Any]]], Any]:
    """Class/function decorator adding a policy factory to :data:`POLICIES`."""

    def wrap(factory: Callable[[PolicyContext, Mapping[str, Any]], Policy[Any]]) -> Any:
        POLICIES[name] = PolicyInfo(name, summary, factory, dict(defaults))
        return factory

    return wrap


class PolicyParamError(ConfigError):
    """A policy parameter the policy cannot be built with; ``param`` names it (for a field path)."""

    def __init__(self, policy: str, param: str, message: str) -> None:
        super().__init__(f"policy {policy!r}: {param} = {message}")
        self.param = param


def names_a_signal(param: str) -> bool:
    """Whether parameter ``param`` names a signal of :data:`llmscale.signals.catalog.SIGNALS`.

    The convention every policy follows (``signal``, ``queue_signal``, ``p99_signal``, ...), so the
    registry checks each such value when the policy is built: a misspelt name would otherwise read
    as "no data" at every tick and the fleet would never scale (``queue_signal: queue_wiating``).
    ``tests/policies/test_policy_params.py`` checks that no policy names a signal under another name.
    """
    return param == "signal" or param.endswith("_signal")


def _check_param(policy: str, key: str, value: Any, default: Any) -> None:
    """Reject a value the factory would choke on or misread, naming ``key``.

    The default's type is the parameter's: a number for a number (finite: ``.inf`` or ``.nan`` in a
    YAML file is a typo, not a setting), true/false for a flag, a string for a string. A default of
    None marks an optional number (``static``'s ``replicas``, ``horizon_s``, ``gpu_budget``, ...):
    a number or null. ``tests/policies/test_policy_params.py`` pins these conventions.
    """
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise PolicyParamError(policy, key, f"{value!r}, must be true or false")
    elif isinstance(default, int | float) or (default is None and value is not None):
        if isinstance(value, bool) or not isinstance(value, int | float):
            what = "" if default is None else f" (default {default!r})"
            raise PolicyParamError(policy, key, f"{value!r}, must be a number{what}")
    elif isinstance(default, str) and not isinstance(value, str):
        raise PolicyParamError(policy, key, f"{value!r}, must be a string (default {default!r})")
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            finite = math.isfinite(float(value))
        except OverflowError:  # an integer beyond any float: YAML reads 1000...0 (400 digits) so
            finite = False
        if not finite:
            raise PolicyParamError(policy, key, f"{value!r:.40}, must be a finite number")
    if names_a_signal(key) and isinstance(value, str):
        from llmscale.signals.catalog import SIGNALS

        if value not in SIGNALS:
            close = difflib.get_close_matches(value, SIGNALS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise PolicyParamError(
                policy,
                key,
                f"{value!r} is not a signal{hint} (signals, as src/llmscale/signals/catalog.py "
                f"lists them: {', '.join(sorted(SIGNALS))})",
            )


def create_policy(name: str, ctx: PolicyContext, params: Mapping[str, Any] | None = None) -> Policy[Any]:
    """Build a registered policy; unknown names, unknown parameters and values of the wrong kind
    (a string for a number, a non-finite number, a signal name the catalogue does not have) raise
    ConfigError naming them (:class:`PolicyParamError` for a parameter's value)."""
    _load_builtin_policies()
    info = POLICIES.get(name)
    if info is None:
        known = ", ".join(sorted(POLICIES))
        raise ConfigError(f"unknown policy {name!r}; known policies: {known}")
    merged = dict(info.defaults)
    for key, value in (params or {}).items():
        if key not in info.defaults:
            raise ConfigError(
                f"policy {name!r} has no parameter {key!r}; parameters: {', '.join(sorted(info.defaults))}"
            )
        _check_param(name, key, value, info.defaults[key])
        merged[key] = value
    try:
        return info.factory(ctx, merged)
    except (TypeError, ValueError, ArithmeticError) as e:
        # A factory's float()/int() of a value the checks above let through (a default of None).
        raise ConfigError(f"policy {name!r}: cannot be built with {dict(params or {})}: {e}") from e


def _load_builtin_policies() -> None:
    """Import every module of this package once, for its @register side effect.

    Lazily, so importing llmscale stays cheap; a new policy module needs no edit here.
    """
    import importlib
    import pkgutil

    import llmscale.policies as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if not mod.name.startswith("_") and mod.name != "base":
            importlib.import_module(f"llmscale.policies.{mod.name}")


def policy_names() -> list[str]:
    _load_builtin_policies()
    return sorted(POLICIES)
