"""The Policy protocol and the registry that maps names to factories.

A policy is a pure function of (signals, its own state, now): no I/O, no wall
clock, no globals. It returns a Decision that names the rule that fired and
the numbers that fired it, and its next state (a frozen dataclass).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from llmscale.deployment import Deployment
from llmscale.errors import ConfigError
from llmscale.policies.params import Param, PolicyParamError, check_param
from llmscale.types import Decision, Signals

__all__ = [
    "DEFAULT_POLICIES",
    "POLICIES",
    "ParamsCheck",
    "Policy",
    "PolicyInfo",
    "create_policy",
    "names_a_signal",
    "policy_names",
    "register",
    "select_policies",
    "validate_params",
]

S = TypeVar("S")

#: A policy's rules across its parameters (``queue_warn <= queue_critical``), over the parameters
#: merged over their defaults and each already checked alone; raises
#: :class:`~llmscale.policies.params.PolicyParamError` naming the parameter to change.
ParamsCheck = Callable[[Mapping[str, Any]], None]


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
class PolicyInfo:
    name: str
    summary: str
    factory: Callable[[Deployment, Mapping[str, Any]], Policy[Any]]
    #: every parameter, declared once: default, range, unit, help
    params: Mapping[str, Param]
    #: plans with the step-time model of the deployment's model on its GPUs (llmscale.perf), so a
    #: model, GPU or TP the catalogue does not know is a configuration error, not a tick error
    needs_step_model: bool = False
    #: the catalogue signals the policy reads by name (:data:`llmscale.signals.catalog.SIGNALS`);
    #: the ones a parameter names (``queue_signal: ...``) are added when it is built
    reads: tuple[str, ...] = ()
    #: the rules across parameters, declared with the parameters (``register(check=...)``)
    check: ParamsCheck | None = None
    #: what stops the policy with these (merged) parameters from reading data on a live fleet, or
    #: None: ``llmscale run`` refuses such a configuration at start instead of holding every tick
    live_check: Callable[[Mapping[str, Any]], str | None] | None = None

    def signals_read(self, params: Mapping[str, Any]) -> tuple[str, ...]:
        """The signals a policy built with ``params`` (merged over the defaults) reads, in order."""
        from llmscale.signals.catalog import SIGNALS

        def chooses_a_signal(key: str) -> bool:  # aibrix-apa's ``metric``: kv_usage_mean | queue_per_replica
            p = self.params.get(key)
            return p is not None and bool(p.choices) and all(c in SIGNALS for c in p.choices)

        named = (
            v for k, v in params.items() if (names_a_signal(k) or chooses_a_signal(k)) and isinstance(v, str)
        )
        return tuple(dict.fromkeys((*self.reads, *named)))

    @property
    def defaults(self) -> dict[str, Any]:
        """Each parameter's default value."""
        return {key: p.default for key, p in self.params.items()}

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` checked against the declarations (unknown names, types, ranges), merged over
        the defaults. Raises ConfigError naming ``policy.parameter``."""
        merged = self.defaults
        for key, value in params.items():
            param = self.params.get(key) if isinstance(key, str) else None
            if param is None:
                raise ConfigError(
                    f"policy {self.name!r} has no parameter {key!r}; "
                    f"parameters: {', '.join(sorted(self.params))}"
                )
            merged[key] = check_param(self.name, key, param, value)
        return merged


POLICIES: dict[str, PolicyInfo] = {}


def register(
    name: str,
    summary: str,
    params: Mapping[str, Param],
    *,
    needs_step_model: bool = False,
    reads: tuple[str, ...] = (),
    check: ParamsCheck | None = None,
    live_check: Callable[[Mapping[str, Any]], str | None] | None = None,
) -> Callable[[Callable[[Deployment, Mapping[str, Any]], Policy[Any]]], Any]:
    """Class/function decorator adding a policy factory to :data:`POLICIES`.

    ``params`` declares every parameter (see :class:`~llmscale.policies.params.Param`): usually
    ``params_of(Config)``, the declarations on the policy's config dataclass fields
    (:func:`~llmscale.policies.params.param`), plus a plain ``Param`` for one that is no field. The
    factory receives them merged over their defaults, each already checked against its range, and
    builds its config with :func:`~llmscale.policies.params.config_from`.
    ``reads`` declares the catalogue signals the policy reads by name; each is checked against
    the catalogue when the policy is built (``tests/policies/test_declared_reads.py`` checks that
    a policy module reads no signal by name that its policies do not declare).
    ``check`` declares the rules across parameters (:data:`ParamsCheck`), usually a classmethod of
    the config dataclass beside the declarations; :func:`validate_params` runs it, so the factory
    never sees parameters it breaks and the configuration check needs no policy built.
    ``live_check`` says why parameters that are valid for a backtest read nothing on a live fleet
    (a signal only the simulator computes); the live configuration check refuses them.
    """

    def wrap(factory: Callable[[Deployment, Mapping[str, Any]], Policy[Any]]) -> Any:
        POLICIES[name] = PolicyInfo(
            name, summary, factory, dict(params), needs_step_model, tuple(reads), check, live_check
        )
        return factory

    return wrap


def names_a_signal(param: str) -> bool:
    """Whether parameter ``param`` names a signal of :data:`llmscale.signals.catalog.SIGNALS`.

    The convention every policy follows (``signal``, ``queue_signal``, ``p99_signal``, ...), so the
    registry checks each such value when the policy is built: a misspelt name would otherwise read
    as "no data" at every tick and the fleet would never scale (``queue_signal: queue_wiating``).
    ``tests/policies/test_policy_params.py`` checks that no policy names a signal under another name.
    """
    return param == "signal" or param.endswith("_signal")


def _check_signal_name(policy: str, key: str, value: Any) -> None:
    """A parameter that names a signal must name one the catalogue has (did-you-mean on a typo)."""
    if names_a_signal(key) and isinstance(value, str):
        from llmscale.signals.catalog import SIGNALS

        if value not in SIGNALS:
            close = difflib.get_close_matches(value, SIGNALS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise PolicyParamError(
                f"{policy}.{key} = {value!r}: not a signal{hint} (signals, as "
                f"src/llmscale/signals/catalog.py lists them: {', '.join(sorted(SIGNALS))})",
                key,
            )


def _check_reads(info: PolicyInfo) -> None:
    """Every signal the policy declares it reads is one the catalogue has: a name it does not would
    read as "no data" at every tick, and the fleet would never scale."""
    from llmscale.signals.catalog import SIGNALS

    unknown = [s for s in info.reads if s not in SIGNALS]
    if unknown:
        close = {u: difflib.get_close_matches(u, SIGNALS, n=1) for u in unknown}
        hints = "".join(f"; did you mean {c[0]!r} for {u!r}?" for u, c in close.items() if c)
        raise ConfigError(
            f"policy {info.name!r} reads {', '.join(map(repr, unknown))}: not in the signal catalogue "
            f"(src/llmscale/signals/catalog.py){hints}"
        )


def validate_params(name: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``params`` of policy ``name`` checked against its declarations alone, merged over the defaults.

    Unknown names or parameters, wrong types (a string for a number), out-of-range values, NaN and
    infinity, signal names the catalogue does not have, declared reads it does not have, and the
    policy's rules across parameters (``register(check=...)``) raise ConfigError naming them
    (:class:`PolicyParamError`, with the parameter, for a parameter's value). No policy is built
    and nothing but the policy modules' declarations is imported: ``llmscale.config`` validates
    ``policy.params`` with this, and :func:`create_policy` runs it before the factory.
    """
    info = POLICIES.get(name)
    if info is None:
        # Only a name not registered yet loads the whole package: a backtest of ``static`` (whose
        # module the runner imports) skips importing the other policy modules and building their
        # ~70 dataclasses, 0.52e9 of the 3.80e9 instructions `run_policy` of benchmarks/sim_speed.py
        # cost under callgrind when Python compiles those modules' sources at import
        # (PYTHONDONTWRITEBYTECODE=1; benchmarks/sim_callgrind.py).
        _load_builtin_policies()
        info = POLICIES.get(name)
    if info is None:
        known = ", ".join(sorted(POLICIES))
        raise ConfigError(f"unknown policy {name!r}; known policies: {known}")
    merged = info.check_params(params or {})
    for key, value in merged.items():
        _check_signal_name(name, key, value)
    _check_reads(info)
    if info.check is not None:
        info.check(merged)
    return merged


def create_policy(name: str, ctx: Deployment, params: Mapping[str, Any] | None = None) -> Policy[Any]:
    """Build a registered policy from parameters :func:`validate_params` accepts (ConfigError
    otherwise, as it says)."""
    merged = validate_params(name, params)
    info = POLICIES[name]
    try:
        return info.factory(ctx, merged)
    except (TypeError, ValueError, ArithmeticError) as e:
        # A factory's float()/int() of a value the declarations let through (a default of None).
        raise ConfigError(f"policy {name!r}: cannot be built with {dict(params or {})}: {e}") from e


def _load_builtin_policies() -> None:
    """Import every module of this package once, for its @register side effect.

    Lazily, so importing llmscale stays cheap; a new policy module needs no edit here.
    """
    import importlib
    import pkgutil

    import llmscale.policies as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if not mod.name.startswith("_") and mod.name not in ("base", "params", "config_file"):
            importlib.import_module(f"llmscale.policies.{mod.name}")


def policy_names() -> list[str]:
    _load_builtin_policies()
    return sorted(POLICIES)


#: what a backtest runs when no policy is named: ours, the fixed-fleet baseline and the autoscalers
#: people run today (HPA, KEDA, Knative, AIBrix, Ray Serve, Dynamo, llm-d WVA); ``all`` names every
#: registered policy (:func:`select_policies`)
DEFAULT_POLICIES: tuple[str, ...] = (
    "slo",
    "static",
    "hpa-gpu-util",
    "keda-queue",
    "knative-kpa",
    "aibrix-apa",
    "ray-serve",
    "dynamo-sla",
    "wva-saturation",
)


def select_policies(names: list[str]) -> list[str]:
    """The policies ``names`` asks for, in its order without repeats: none for
    :data:`DEFAULT_POLICIES` (those registered), ``all`` for every registered policy.

    ConfigError names a name that is no policy (``'slo2' is not a policy; known: ...``).
    """
    known = set(policy_names())
    if "all" in names:
        return policy_names()
    if not names:
        return [p for p in DEFAULT_POLICIES if p in known]
    for n in names:
        if n not in known:
            raise ConfigError(f"{n!r} is not a policy; known: {', '.join(sorted(known))}, or 'all'")
    return list(dict.fromkeys(names))
