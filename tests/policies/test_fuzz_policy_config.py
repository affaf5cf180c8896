"""Malformed ``--policy-config`` files: the loader answers with checked parameters or a ConfigError.

Generated documents mix known and misspelt policy names, declared and unknown parameters,
guard settings, and values of every YAML type (NaN, infinities, huge integers, strings where
numbers belong, lists, mappings, null, booleans), plus files that are not YAML mappings at all.
Properties:

* only :class:`ConfigError` escapes, and its message starts with the file's name;
* a single ``policy: {parameter: value}`` entry is refused exactly when the declaration
  (type, range) refuses the value (an oracle written here), and the error names the key path;
* what the declarations and the rules declared across parameters accept builds (no factory
  refuses it), and the policy then decides on generated signals without raising: the
  values a declaration accepts are values a policy can run with (``target_utilization: 0``
  used to pass and divide by zero at the first tick).

Example counts are bounded so the file runs in seconds.
"""

from __future__ import annotations

import math
import numbers
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmscale.deployment import Deployment
from llmscale.errors import ConfigError
from llmscale.guards import GUARD_FIELDS, GuardConfig, GuardState, apply_guards
from llmscale.policies.base import POLICIES, create_policy, names_a_signal, policy_names, validate_params
from llmscale.policies.config_file import GUARDS_KEY, load_policy_config
from llmscale.policies.params import DeploymentFitError, Param, PolicyParamError
from llmscale.ranges import Interval
from llmscale.signals.catalog import SIGNALS
from llmscale.types import FleetView, Signals, SignalValue

_DEEP = int(os.environ.get("LLMSCALE_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=_DEEP or 150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=not _DEEP,
    database=None,
)

NAMES = policy_names()

scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=10),
    st.sampled_from([0, 0.0, -1, 1, 1e-300, 1e300, 2**63, "0.5", "abc", ".nan", "", 15, 0.95]),
)
value = st.recursive(
    scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=5,
)


def in_declared(param: Param, v: object) -> bool:
    """The oracle: does the declaration accept ``v``? (YAML types: bool, int, float, str, None.)"""
    if v is None:
        return param.default is None or param.nullable
    if isinstance(v, bool):
        return param.kind is bool
    if param.kind is str:
        return isinstance(v, str) and (not param.choices or v in param.choices)
    if param.kind is int and not isinstance(v, int):
        return False
    if param.kind is float and not isinstance(v, int | float):
        return False
    if param.kind not in (int, float):
        return False
    try:
        x = float(v)  # type: ignore[arg-type]
    except OverflowError:
        return False
    return math.isfinite(x) and x in Interval.parse(param.range or "(-inf, inf)")


def _write(tmp: str, doc: object, raw: str | None = None) -> Path:
    path = Path(tmp) / "policies.yaml"
    path.write_text(raw if raw is not None else yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return path


def _load(path: Path) -> dict[str, dict[str, Any]] | ConfigError:
    try:
        return load_policy_config(path)
    except ConfigError as e:
        assert str(e).startswith(f"{path}:"), str(e)
        return e


@FUZZ
@given(data=st.data())
def test_one_parameter_is_refused_exactly_when_its_declaration_refuses_it(data) -> None:
    name = data.draw(st.sampled_from(NAMES), label="policy")
    params = POLICIES[name].params
    key = data.draw(st.sampled_from(sorted(params)), label="parameter")
    param = params[key]
    # Values near the declared range as well as anything else.
    near = st.sampled_from([param.default, 0, -1, 0.5, 1, 1.5, 100, 86400, 86401, 0.1, 0.09, 1e-9, 1e9])
    v = data.draw(st.one_of(near, scalar), label="value")
    with tempfile.TemporaryDirectory() as tmp:
        outcome = _load(_write(tmp, {name: {key: v}}))
    if not in_declared(param, v):
        assert isinstance(outcome, ConfigError), (v, outcome)
        assert f"{name}.{key}" in str(outcome), str(outcome)
    elif names_a_signal(key) and isinstance(v, str) and v not in SIGNALS:
        assert isinstance(outcome, ConfigError), (v, outcome)
        assert f"{name}.{key} = " in str(outcome) and "not a signal" in str(outcome), str(outcome)
    elif (rule := _refused_by_a_rule(name, key, v)) is not None:
        # A value its own declaration accepts, refused by a declared rule across parameters
        # (three-layer's queue_per_replica_down 100 above queue_per_replica_up 5), named by it.
        assert isinstance(outcome, ConfigError), (v, outcome)
        assert f"{name}.{rule} = " in str(outcome), str(outcome)
    else:
        assert not isinstance(outcome, ConfigError), str(outcome)


def _refused_by_a_rule(name: str, key: str, v: object) -> str | None:
    """The parameter a rule across parameters (``register(check=...)``) names for ``key: v`` over
    the defaults, or None when the policy declares no rule or the rule accepts it."""
    info = POLICIES[name]
    if info.check is None:
        return None
    value = float(v) if info.params[key].kind is float and v is not None else v  # type: ignore[arg-type]
    try:
        info.check({**info.defaults, key: value})
    except PolicyParamError as e:
        return e.param
    return None


@st.composite
def documents(draw: st.DrawFn) -> object:
    doc: dict[object, object] = {}
    for _ in range(draw(st.integers(0, 3))):
        name = draw(
            st.one_of(
                st.sampled_from(NAMES),
                st.sampled_from(["sloo", "SLO", "hpa", "static ", "guards"]),
                st.text(max_size=6),
                st.integers(-3, 3),
            )
        )
        if name in POLICIES:
            keys = st.one_of(
                st.sampled_from(sorted(POLICIES[name].params)), st.just(GUARDS_KEY), st.text(max_size=6)
            )
        else:
            keys = st.text(max_size=6)
        entry: dict[object, object] = {}
        for _ in range(draw(st.integers(0, 4))):
            key = draw(keys)
            if key == GUARDS_KEY:
                entry[key] = draw(
                    st.one_of(
                        st.dictionaries(
                            st.one_of(st.sampled_from(GUARD_FIELDS), st.text(max_size=5)), value, max_size=4
                        ),
                        value,
                    )
                )
            else:
                entry[key] = draw(value)
        doc[name] = draw(st.one_of(st.just(entry), value)) if draw(st.integers(0, 9)) == 0 else entry
    return doc


@st.composite
def signals(draw: st.DrawFn) -> Signals:
    ready = draw(st.integers(0, 5))
    starting = draw(st.integers(0, 2))
    spec = draw(st.integers(0, ready + starting + 2))
    number = st.one_of(
        st.none(), st.integers(0, 2000).map(float), st.floats(0, 1), st.sampled_from([0.0, 1e-9, 1e6])
    )
    values = {name: SignalValue(draw(number)) for name in SIGNALS}
    per = {
        f"pod-{i}": {name: draw(st.floats(0, 100)) for name in ("DCGM_FI_DEV_GPU_UTIL",)}
        for i in range(ready)
    }
    return Signals(
        time_s=0.0,
        fleet=FleetView(spec_replicas=spec, ready=ready, loading=starting),
        values=values,
        per_replica=per,
    )


@FUZZ
@given(doc=documents(), ticks=st.lists(signals(), min_size=1, max_size=3))
def test_documents_load_or_fail_with_the_file_and_what_loads_runs(doc, ticks) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        outcome = _load(_write(tmp, doc))
    if isinstance(outcome, ConfigError):
        return
    for name, params in outcome.items():
        own = {k: v for k, v in params.items() if k != GUARDS_KEY}
        try:
            policy = create_policy(name, Deployment(min_replicas=1, max_replicas=20), own)
            # As the backtest merges them: its bounds, the policy's own settings, the user's.
            base = GuardConfig(1, 20).merged(getattr(policy, "guard_overrides", {}) or {})
            guards = base.merged(params.get(GUARDS_KEY) or {})
        except ConfigError:
            continue  # a cross-field rule (bw_down above bw_up): refused, with a message
        state, gstate = policy.initial_state(), GuardState()
        for i, sig in enumerate(ticks):
            now = (i + 1) * policy.tick_s
            decision, state = policy.decide(sig, state, now)
            assert isinstance(decision.desired, numbers.Integral), decision
            apply_guards(decision, sig, guards, gstate, now)


@FUZZ
@given(
    raw=st.one_of(
        st.text(max_size=80),
        st.sampled_from(
            [
                "[" * 3000,
                "a: b: c",
                "- 1\n- 2",
                "slo: [1, 2]",
                "slo:\n  guards: 5",
                "slo:\n  guards: {max_down_step: -3}",
                "? [1, 2]\n: x",
                "&a [*a]",
                "slo: !!python/object:os.system {}",
                "\x00\x01",
                "slo:\n  target_utilization: .nan",
                "slo:\n  tick_s: 1e-9",
            ]
        ),
    )
)
def test_any_text_is_a_config_or_a_config_error(raw: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _load(_write(tmp, None, raw=raw))


def within(param: Param) -> st.SearchStrategy[object]:
    """Values the declaration accepts, its extremes included (the bounds, 1e-300, 1e300)."""
    if param.kind is bool:
        return st.booleans()
    if param.kind is str:
        return st.sampled_from(param.choices or (param.default,))
    bounds = Interval.parse(param.range or "(-inf, inf)")
    lo = bounds.lo if math.isfinite(bounds.lo) else -1e300
    hi = bounds.hi if math.isfinite(bounds.hi) else 1e300
    if param.kind is int:
        top = min(int(hi), 10**6)
        return st.integers(math.ceil(lo), top).filter(lambda v: v in bounds)
    extremes = [lo, hi, lo + 1e-300, hi * (1 - 1e-12), 1e-300, 1e300, 1.0, 0.5]
    return st.one_of(
        st.floats(lo, hi, allow_nan=False, allow_infinity=False),
        st.sampled_from(extremes),
    ).filter(lambda v: v in bounds)


@FUZZ
@given(data=st.data(), ticks=st.lists(signals(), min_size=2, max_size=4))
def test_every_accepted_value_runs(data, ticks) -> None:
    name = data.draw(st.sampled_from(NAMES), label="policy")
    params = POLICIES[name].params
    chosen = {k: data.draw(st.one_of(st.just(p.default), within(p)), label=k) for k, p in params.items()}
    chosen = {k: v for k, v in chosen.items() if v is not None}
    try:
        validate_params(name, chosen)
    except PolicyParamError as e:
        # Only a rule between parameters may refuse values each declaration accepts, and it is
        # declared with them and names one (bw_down above bw_up; gpu_low_pct <= gpu_high_pct).
        assert e.param in chosen, str(e)
        return
    # What the declarations accept builds: no factory keeps a rule of its own on the parameters,
    # so the configuration check (which builds nothing) refuses all that the build would.
    ctx = Deployment(min_replicas=1, max_replicas=20)
    try:
        policy = create_policy(name, ctx, chosen)
    except DeploymentFitError as e:
        # The one refusal a factory may add: this deployment cannot serve the values (a planning
        # shape beyond the model's KV cache), which no check of the parameters alone can know.
        assert e.param in chosen and ctx.model in str(e), str(e)
        return
    guards = GuardConfig(1, 20).merged(getattr(policy, "guard_overrides", {}) or {})
    state, gstate = policy.initial_state(), GuardState()
    for i, sig in enumerate(ticks):
        now = (i + 1) * policy.tick_s
        decision, state = policy.decide(sig, state, now)
        assert isinstance(decision.desired, numbers.Integral), decision
        out, gstate = apply_guards(decision, sig, guards, gstate, now)
        assert 1 <= out.desired <= 20
