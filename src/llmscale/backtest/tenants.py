"""Several models (tenants) on one pool of MIG-partitioned GPUs, backtested together.

Seed 003 4.2 ("quota-aware scaling of GPU instances shared by tenants, on MIG")
with 3.1's resource-layer admission. Each tenant is its own service: its
trace, its model on one MIG profile, its policy and guards, its quota of
instances of that profile. Every tenant runs the ordinary controller loop
(the controller core, :func:`~llmscale.controller.core.tick`, which decides without actuating);
between the guards and the actuator sits the pool's admission
(:func:`llmscale.tenancy.pool.admit`): a scale-up goes only as far as the
tenant's quota, a free placement of its profile in the pool and a node that
passes seed 003 3.1's checks allow. The core applies its verdict
(:func:`~llmscale.controller.core.settle`, as for the live loop's node checks): the
record's ``desired`` is what was admitted, its ``guard`` names the limit
(``mig-quota``, ``mig-pool``, ``node-check``), and a scale-up held whole starts no
cooldown. The decision line of every tick carries the tenant and an ``admission``
object with what each limit had room for.

The configuration (``llmscale tenants tenants.yaml``)::

    pool:
      gpu: h100-80gb          # a100-40gb, a100-80gb, h100-80gb
      gpus: 2
      gpus_per_node: 1
      node: {disk_read_bytes_s: 6.9e9}              # llmscale.tenancy.node_model.NodeSpec
      checks: {min_free_memory_gib: 2, max_cpu_throttled_ratio: 0.1, max_disk_io_util: 0.7}
      background:             # load from outside the fleet, per node and time window
        - {node: 1, from_s: 600, to_s: 900, cpu_throttled_ratio: 0.2}
    tenants:
      chat:
        model: llama-3-8b
        profile: 3g.40gb
        quota: 2              # instances of the profile (a ResourceQuota on nvidia.com/mig-3g.40gb)
        policy: slo
        params: {guards: {up_cooldown_s: 30}}      # as in --policy-config
        workload: {preset: flash-crowd, params: {rate_rps_mean: 6}, duration_s: 900}
        max_replicas: 4

Ticks of different tenants at the same time are admitted in the file's order.
Slice-hours count each replica's slice from Pending until Gone; GPU-hours
weigh them by the profile's compute share (a 3g slice-hour is 3/7 GPU-hour).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, StringConstraints, ValidationError

from llmscale.backtest.results import PolicyResult, summarize
from llmscale.backtest.runner import BacktestSettings, SeriesRecorder, series_step_for
from llmscale.controller.core import (
    AdmissionVerdict,
    Controller,
    ControllerState,
    TickFacts,
    initial_state,
    settle,
    tick,
)
from llmscale.deployment import DEFAULT_DEPLOYMENT, guard_config
from llmscale.documents import validation_message
from llmscale.errors import ConfigError
from llmscale.perf.mig import SLICE_SEPARATOR, Placement
from llmscale.policies.base import create_policy
from llmscale.sim.config import SimConfig
from llmscale.sim.exporter import SimMetricSource
from llmscale.sim.fleet import Fleet
from llmscale.tenancy.node_checks import NodeThresholds, check_node
from llmscale.tenancy.node_model import NodeBackground, NodeSpec, node_sample
from llmscale.tenancy.pool import Admission, MigPool, admit
from llmscale.types import Phase
from llmscale.workloads.model import Workload

__all__ = [
    "TenantResult",
    "TenantsResult",
    "TenantsSpec",
    "load_tenant_quota",
    "load_tenants",
    "parse_tenants",
    "run_tenants",
]

if TYPE_CHECKING:
    from llmscale.controller.admission import MigQuota

_LIMITS = ("quota", "pool", "node")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


#: A count: YAML's ``true`` is none (lax pydantic read ``quota: true`` as a quota of 1 and
#: ``gpus: true`` as a pool of one GPU), and ``quota: 1.0`` is refused like ``quota: 1.5``.
#: Floats stay lax: ``6.9e9`` is a string to YAML 1.1 and a number to the reader.
_Count = Annotated[int, Strict()]


def _not_a_boolean(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError(f"{str(value).lower()} is a boolean, not a number")
    return value


#: A number: lax (whole numbers and ``6.9e9``, a string to YAML 1.1, are read), but never YAML's
#: ``true`` (read as 1.0 it made ``slo_ttft_s: true`` a one-second SLO without a word).
_Number = Annotated[float, BeforeValidator(_not_a_boolean)]

#: A tenant's name: it names the tenant's rows, decision lines and MIG quota, so it is never empty.
_TenantName = Annotated[str, StringConstraints(min_length=1)]


class _NodeCfg(_Strict):
    memory_gib: _Number = Field(default=2048.0, gt=0, allow_inf_nan=False)
    base_used_gib: _Number = Field(default=64.0, ge=0, allow_inf_nan=False)
    replica_host_memory_gib: _Number = Field(default=8.0, ge=0, allow_inf_nan=False)
    disk_read_bytes_s: _Number = Field(default=6.9e9, gt=0, allow_inf_nan=False)


class _ChecksCfg(_Strict):
    min_free_memory_gib: _Number = Field(default=2.0, ge=0, allow_inf_nan=False)
    max_cpu_throttled_ratio: _Number = Field(default=0.1, gt=0, le=1)
    max_disk_io_util: _Number = Field(default=0.7, gt=0, le=1)


class _BackgroundCfg(_Strict):
    node: _Count = Field(ge=0)
    from_s: _Number = Field(ge=0, allow_inf_nan=False)
    to_s: _Number = Field(gt=0)
    used_memory_gib: _Number = Field(default=0.0, ge=0, allow_inf_nan=False)
    cpu_throttled_ratio: _Number = Field(default=0.0, ge=0, le=1)
    disk_io_util: _Number = Field(default=0.0, ge=0, le=1)


class _PoolCfg(_Strict):
    gpu: str
    gpus: _Count = Field(ge=1, le=4096)
    gpus_per_node: _Count = Field(default=8, ge=1, le=64)
    node: _NodeCfg = Field(default_factory=_NodeCfg)
    checks: _ChecksCfg = Field(default_factory=_ChecksCfg)
    background: list[_BackgroundCfg] = []


class _WorkloadCfg(_Strict):
    preset: str | None = None
    params: dict[str, float] = {}
    trace: str | None = None
    format: str = "auto"
    start_s: _Number | None = Field(default=None, ge=0)
    duration_s: _Number | None = Field(default=None, gt=0)
    rate_scale: _Number = Field(default=1.0, gt=0, allow_inf_nan=False)


class _TenantCfg(_Strict):
    model: str
    profile: str
    quota: _Count = Field(ge=0, le=100_000)
    policy: str
    params: dict[str, Any] = {}
    workload: _WorkloadCfg
    min_replicas: _Count = Field(default=1, ge=0)
    max_replicas: _Count | None = Field(default=None, ge=1)
    initial_replicas: _Count = Field(default=1, ge=0)
    slo_ttft_s: _Number = Field(default=DEFAULT_DEPLOYMENT.slo_ttft_s, gt=0, allow_inf_nan=False)
    slo_tpot_s: _Number = Field(default=DEFAULT_DEPLOYMENT.slo_tpot_s, gt=0, allow_inf_nan=False)


class _TenantsCfg(_Strict):
    pool: _PoolCfg
    tenants: dict[_TenantName, _TenantCfg] = Field(min_length=1)
    seed: _Count = Field(default=0, ge=0)
    drain_horizon_s: _Number = Field(default=1800.0, gt=0, allow_inf_nan=False)


@dataclass(frozen=True)
class TenantSpec:
    name: str
    profile: str
    quota: int
    policy: str
    settings: BacktestSettings
    workload: Workload


@dataclass(frozen=True)
class TenantsSpec:
    """A checked configuration: the pool and every tenant with its workload loaded."""

    gpu: str
    gpus: int
    gpus_per_node: int
    node: NodeSpec
    checks: NodeThresholds
    background: tuple[NodeBackground, ...]
    tenants: tuple[TenantSpec, ...]
    drain_horizon_s: float = 1800.0


def load_tenants(path: Path) -> TenantsSpec:
    """Read and check ``path``; every error is a ConfigError naming the file and the key path."""
    return parse_tenants(_read_tenants_file(path), source=str(path), base_dir=path.parent)


def load_tenant_quota(path: Path, tenant: str) -> MigQuota:
    """``tenant``'s MIG quota from the tenants file ``path``, for ``llmscale run``
    (``admission.mig_quota``): the file is checked as ``llmscale tenants`` checks it, but no
    workload is loaded. Raises ConfigError naming the file and the key path."""
    from llmscale.controller.admission import MigQuota
    from llmscale.perf.mig import get_mig_gpu

    cfg = _validate(_read_tenants_file(path), str(path))
    t = cfg.tenants.get(tenant)
    if t is None:
        raise ConfigError(f"{path}: tenants: no tenant {tenant!r}; the file has {', '.join(cfg.tenants)}")
    try:
        profile = get_mig_gpu(cfg.pool.gpu).profile(t.profile).name
    except ConfigError as e:
        raise ConfigError(f"{path}: tenants.{tenant}.profile: {e}") from e
    return MigQuota(tenant, profile, t.quota)


def _read_tenants_file(path: Path) -> dict[str, Any]:
    from llmscale.documents import read_yaml_file

    data = read_yaml_file(path, "the tenants file")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with `pool:` and `tenants:`")
    return data


def _validate(data: Mapping[str, Any], source: str) -> _TenantsCfg:
    try:
        return _TenantsCfg.model_validate(dict(data))
    except ValidationError as e:
        raise ConfigError(validation_message(e, source)) from e


def parse_tenants(
    data: Mapping[str, Any], *, source: str = "<tenants>", base_dir: Path | None = None
) -> TenantsSpec:
    """Check a parsed tenants document and load each tenant's workload."""
    from llmscale.perf.mig import get_mig_gpu
    from llmscale.policies.config_file import check_policy_params

    cfg = _validate(data, source)

    def fail(where: str, msg: str) -> ConfigError:
        return ConfigError(f"{source}: {where}: {msg}")

    try:
        mig = get_mig_gpu(cfg.pool.gpu)
    except ConfigError as e:
        raise fail("pool.gpu", str(e)) from e
    nodes = -(-cfg.pool.gpus // cfg.pool.gpus_per_node)
    background = []
    for i, b in enumerate(cfg.pool.background):
        if b.node >= nodes:
            raise fail(f"pool.background.{i}.node", f"{b.node}, the pool has nodes 0..{nodes - 1}")
        try:
            background.append(NodeBackground(**b.model_dump()))
        except ConfigError as e:
            raise fail(f"pool.background.{i}", str(e)) from e
    tenants = []
    for name, t in cfg.tenants.items():
        where = f"tenants.{name}"
        try:
            profile = mig.profile(t.profile).name
        except ConfigError as e:
            raise fail(f"{where}.profile", str(e)) from e
        try:
            params = check_policy_params({t.policy: t.params})[t.policy]
        except ConfigError as e:
            raise fail(f"{where}.policy", str(e)) from e
        if params.get("standby_replicas", 0) != 0:
            # Sleeping replicas hold a slice each, which the pool's admission does not count.
            raise fail(f"{where}.params.standby_replicas", "a standby pool is not supported on a MIG pool")
        max_replicas = t.max_replicas if t.max_replicas is not None else max(1, t.quota)
        if t.initial_replicas > t.quota:
            raise fail(f"{where}.initial_replicas", f"{t.initial_replicas} exceeds the quota ({t.quota})")
        try:
            settings = BacktestSettings(
                model=t.model,
                gpu=f"{mig.gpu}{SLICE_SEPARATOR}{profile}",
                tp=1,  # a MIG slice has no peer-to-peer: one slice per replica
                min_replicas=t.min_replicas,
                max_replicas=max_replicas,
                initial_replicas=t.initial_replicas,
                slo_ttft_s=t.slo_ttft_s,
                slo_tpot_s=t.slo_tpot_s,
                seed=cfg.seed,
                sim=SimConfig(seed=cfg.seed),
                policy_params={t.policy: params},
                drain_horizon_s=cfg.drain_horizon_s,
            ).with_cold_start()
            from llmscale.perf import get_perf_model

            get_perf_model(settings.model, settings.gpu, 1).kv_capacity_blocks()  # weights must fit the slice
        except ConfigError as e:
            raise fail(where, str(e)) from e
        try:
            workload = _load_workload(t.workload, cfg.seed, base_dir)
        except ConfigError as e:
            raise fail(f"{where}.workload", str(e)) from e
        tenants.append(TenantSpec(name, profile, t.quota, t.policy, settings, workload))
    c = cfg.pool.checks
    return TenantsSpec(
        gpu=mig.gpu,
        gpus=cfg.pool.gpus,
        gpus_per_node=cfg.pool.gpus_per_node,
        node=NodeSpec(**cfg.pool.node.model_dump()),
        checks=NodeThresholds(c.min_free_memory_gib * 1024**3, c.max_cpu_throttled_ratio, c.max_disk_io_util),
        background=tuple(background),
        tenants=tuple(tenants),
        drain_horizon_s=cfg.drain_horizon_s,
    )


def _load_workload(w: _WorkloadCfg, seed: int, base_dir: Path | None) -> Workload:
    from llmscale.workloads import load_trace, make_preset, rate_scale, window

    if (w.preset is None) == (w.trace is None):
        raise ConfigError("give exactly one of `preset` or `trace`")
    if w.trace is not None:
        path = Path(w.trace)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        wl = load_trace(path, w.format, seed=seed, start_s=w.start_s, duration_s=w.duration_s)
    else:
        assert w.preset is not None
        wl = make_preset(w.preset, seed=seed, **w.params)
        if w.start_s is not None or w.duration_s is not None:
            wl = window(
                wl, w.start_s or 0.0, w.duration_s if w.duration_s is not None else wl.duration_s + 1.0
            )
    if w.rate_scale != 1.0:
        wl = rate_scale(wl, w.rate_scale, seed=seed)
    if wl.num_requests == 0:
        raise ConfigError("the workload has no request")
    return wl


@dataclass
class TenantResult:
    """One tenant's outcome: the usual result row plus what tenancy adds."""

    name: str
    profile: str
    quota: int
    result: PolicyResult
    #: replica-hours on slices (each replica holds one slice from Pending until Gone)
    slice_hours: float
    #: slice-hours x compute slices / 7
    gpu_hours: float
    max_slices_held: int
    #: limit -> ticks on which it held part of a scale-up
    held_ticks: dict[str, int]
    #: limit -> replicas it held, summed over ticks
    held_replicas: dict[str, int]
    admitted_replicas: int

    def as_json(self) -> dict[str, Any]:
        row = self.result.as_json()
        # The row's gpu_hours count a slice as a GPU (one "GPU" per replica): tenancy's own are above.
        row.pop("gpu_hours", None)
        return {
            "tenant": self.name,
            "profile": self.profile,
            "quota": self.quota,
            "slice_hours": round(self.slice_hours, 5),
            "gpu_hours": round(self.gpu_hours, 5),
            "max_slices_held": self.max_slices_held,
            "admitted_replicas": self.admitted_replicas,
            "held_ticks": dict(self.held_ticks),
            "held_replicas": dict(self.held_replicas),
            "result": row,
        }


@dataclass
class TenantsResult:
    gpu: str
    gpus: int
    tenants: list[TenantResult]
    #: every GPU's memory slices at the end (``llmscale.tenancy.pool.MigPool.occupancy``)
    occupancy_end: list[str]
    max_memory_slices_used: int
    wall_s: float

    def as_json(self) -> dict[str, Any]:
        return {
            "pool": {
                "gpu": self.gpu,
                "gpus": self.gpus,
                "max_memory_slices_used": self.max_memory_slices_used,
                "occupancy_end": self.occupancy_end,
            },
            "tenants": [t.as_json() for t in self.tenants],
            "wall_s": round(self.wall_s, 3),
        }


@dataclass
class _Run:
    spec: TenantSpec
    fleet: Fleet
    source: SimMetricSource
    controller: Controller
    state: ControllerState
    recorder: SeriesRecorder
    placements: dict[str, Placement] = field(default_factory=dict)
    held_ticks: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_LIMITS, 0))
    held_replicas: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_LIMITS, 0))
    admitted: int = 0
    max_held: int = 0


def run_tenants(spec: TenantsSpec, *, decisions_out: IO[str] | None = None) -> TenantsResult:
    """Simulate every tenant on the shared pool; ``decisions_out`` gets one JSON line per tenant tick."""
    from llmscale.backtest.runner import build_fleet

    wall0 = time.perf_counter()
    pool = MigPool(spec.gpu, spec.gpus, spec.gpus_per_node)
    runs: list[_Run] = []
    duration = max(t.workload.duration_s for t in spec.tenants)
    step_s = series_step_for(duration)
    for t in spec.tenants:
        s = t.settings
        params = dict(s.policy_params.get(t.policy) or {})
        guard_params = params.pop("guards", None) or {}
        deployment = s.deployment()
        policy = create_policy(t.policy, deployment, params)
        guards = guard_config(deployment, policy, guard_params)
        fleet = build_fleet(t.workload, s, s.initial_replicas)
        controller = Controller(policy, guards, deployment, assess=decisions_out is not None)
        run = _Run(
            t,
            fleet,
            SimMetricSource(fleet),
            controller,
            # each tenant on its own policy's cadence, the first tick one cadence in
            initial_state(controller, first_tick_s=controller.cadence_s),
            SeriesRecorder(fleet, step_s),
        )
        profile = pool.profile(t.profile)
        for rep in fleet.replicas:  # the initial replicas take their slices first, in file order
            p = pool.find(profile)
            if p is None:
                raise ConfigError(
                    f"tenants.{t.name}.initial_replicas: {s.initial_replicas} x {t.profile} do not fit "
                    f"the pool of {spec.gpus} x {spec.gpu} beside the tenants before it"
                )
            pool.take(p)
            run.placements[rep.name] = p
        run.max_held = len(run.placements)
        runs.append(run)

    last_arrival = max(float(r.spec.workload.arrival_s[-1]) for r in runs)
    horizon = last_arrival + spec.drain_horizon_s
    next_sample = step_s
    max_used = sum(8 - g.free_memory_slices for g in pool.gpus)
    now = 0.0
    while True:
        now = min(min(r.state.next_tick_s for r in runs), next_sample)
        for r in runs:
            r.fleet.run_until(now)
        if now >= next_sample:
            for r in runs:
                r.recorder.sample(now)
            next_sample += step_s
        _release_gone(pool, runs)
        due = [r for r in runs if r.state.next_tick_s <= now]
        if due:
            failures = _node_failures(spec, pool, runs, now)
            for r in due:
                _tick(r, pool, failures, now, decisions_out)
            max_used = max(max_used, sum(8 - g.free_memory_slices for g in pool.gpus))
        if all(r.fleet.arrivals_done and r.fleet.unresolved == 0 for r in runs) or now > horizon:
            break
    results = []
    for r in runs:
        r.fleet.finish(now)
        end_s = max(r.fleet.last_resolved_s, float(r.spec.workload.arrival_s[-1]))
        res = summarize(
            r.spec.name,
            r.spec.workload,
            r.fleet,
            r.recorder.cols,
            r.spec.settings,
            end_s=end_s,
            wall_s=0.0,
        )
        slice_h = r.fleet.gpu_seconds(now) / 3600.0
        share = pool.profile(r.spec.profile).compute_slices / 7.0
        results.append(
            TenantResult(
                r.spec.name,
                r.spec.profile,
                r.spec.quota,
                res,
                slice_h,
                slice_h * share,
                r.max_held,
                r.held_ticks,
                r.held_replicas,
                r.admitted,
            )
        )
    return TenantsResult(
        spec.gpu, spec.gpus, results, pool.occupancy(), max_used, time.perf_counter() - wall0
    )


def _release_gone(pool: MigPool, runs: list[_Run]) -> None:
    """A replica's slice is free again once it is Gone (a draining pod still holds its device)."""
    for r in runs:
        alive = {rep.name for rep in r.fleet.replicas}
        for name in [n for n in r.placements if n not in alive]:
            pool.release(r.placements.pop(name))


def _node_failures(
    spec: TenantsSpec, pool: MigPool, runs: list[_Run], now: float
) -> dict[int, tuple[str, ...]]:
    """Seed 003 3.1's checks on every node, read once at ``now`` (as a live tick reads its metrics)."""
    replicas = [0] * pool.num_nodes
    loading = [0] * pool.num_nodes
    for r in runs:
        phase = {rep.name: rep.phase for rep in r.fleet.replicas}
        for name, p in r.placements.items():
            n = pool.node_of(p.gpu)
            replicas[n] += 1
            if phase.get(name) == Phase.LOADING:
                loading[n] += 1
    out = {}
    for n in range(pool.num_nodes):
        sample = node_sample(spec.node, n, replicas[n], loading[n], now, spec.background)
        failed = check_node(sample, spec.checks)
        if failed:
            out[n] = failed
    return out


#: the guard name a decision line gives a scale-up each limit held (``tenancy/pool.py``'s held_by)
ADMISSION_GUARDS = {"quota": "mig-quota", "pool": "mig-pool", "node": "node-check"}


def admission_verdict(adm: Admission, base: int) -> AdmissionVerdict | None:
    """The core's input for a tenant's admission: at most ``base`` (the replicas it has, active or
    reclaimable) plus those admitted; None when all were admitted."""
    if adm.held_by is None:
        return None
    return AdmissionVerdict(
        base + adm.admitted,
        ADMISSION_GUARDS[adm.held_by],
        adm.note or f"{adm.held_by} admits {adm.admitted} of {adm.requested} new replica(s)",
    )


def _tick(
    r: _Run, pool: MigPool, failures: dict[int, tuple[str, ...]], now: float, out: IO[str] | None
) -> None:
    before = r.state
    record, state, _ = tick(r.controller, before, r.source.observe(now))
    fleet = r.fleet
    active = sum(1 for rep in fleet.replicas if rep.phase < Phase.DRAINING)
    reclaim = sum(1 for rep in fleet.replicas if rep.phase == Phase.DRAINING and rep.drain_until_idle)
    new_needed = max(0, record.final - active - reclaim)
    adm: Admission | None = None
    if new_needed > 0:
        adm = admit(
            pool,
            r.spec.profile,
            new_needed,
            quota=r.spec.quota,
            held=len(r.placements),
            node_failures=failures,
        )
        r.admitted += adm.admitted
        if adm.held_by is not None:
            r.held_ticks[adm.held_by] += 1
            r.held_replicas[adm.held_by] += adm.requested - adm.admitted
    # The core holds what the pool did not admit, and puts the guard clocks back when nothing was:
    # a scale-up held whole starts no cooldown (the live loop's node admission does the same).
    verdict = None if adm is None else admission_verdict(adm, active + reclaim)
    record, r.state = settle(record, state, before, TickFacts(admission=verdict))
    target = record.final
    applied = target != fleet.spec_replicas
    if applied:
        fleet.scale_to(target, now, drain_until_idle=r.controller.guards.drain_aware)
    if adm is not None and adm.placements:
        new = [rep.name for rep in fleet.replicas if rep.name not in r.placements]
        if len(new) != len(adm.placements):  # a broken invariant, not a user error
            raise RuntimeError(
                f"{r.spec.name}: {len(new)} new replicas for {len(adm.placements)} admitted slices"
            )
        for name, p in zip(new, adm.placements, strict=True):
            r.placements[name] = p
    r.max_held = max(r.max_held, len(r.placements))
    if out is not None:
        line = replace(record, applied=applied).as_json()
        line["tenant"] = r.spec.name
        line["desired_after_admission"] = target
        line["admission"] = None if adm is None else adm.as_json()
        line["slices_held"] = len(r.placements)
        out.write(json.dumps(line) + "\n")


def format_table(result: TenantsResult) -> str:
    """A plain-text table, one row per tenant."""
    head = (
        f"{'Tenant':<14}{'Profile':<10}{'Quota':>6}{'SLO att.':>10}{'TTFT p99 s':>12}"
        f"{'Slice h':>9}{'GPU h':>8}{'Max held':>9}{'Held by quota/pool/node (ticks)':>33}"
    )
    lines = [head]
    for t in result.tenants:
        att = float(t.result.summary.get("slo_attainment", math.nan))
        ttft = t.result.summary.get("ttft_p99_s")
        held = "/".join(str(t.held_ticks[k]) for k in _LIMITS)
        lines.append(
            f"{t.name:<14}{t.profile:<10}{t.quota:>6}{att:>10.2%}"
            f"{(f'{ttft:.3f}' if ttft is not None else '-'):>12}"
            f"{t.slice_hours:>9.3f}{t.gpu_hours:>8.3f}{t.max_slices_held:>9}{held:>33}"
        )
    lines.append(
        f"pool: {result.gpus} x {result.gpu}, at most {result.max_memory_slices_used} of "
        f"{result.gpus * 8} memory slices used; end: {' '.join(result.occupancy_end)}"
    )
    return "\n".join(lines)
