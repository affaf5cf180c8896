"""The documents ``llmscale <command> --json`` writes, as pydantic models; their JSON Schemas ship beside.

Each document starts with ``schema_version`` (:data:`SCHEMA_VERSION`): a script checks it before
reading. The major number changes when a field is removed, renamed or changes type; the minor
number when a field is added. ``<command>.schema.json`` in this directory is generated from the
models by ``scripts/gen_schemas.py``; ``tests/cli/test_output_schemas.py`` fails when a shipped
file differs from what the models generate, and validates every command's real output against it.

The models describe the documents; the commands build them as plain dicts (the backtest's rows
are :data:`llmscale.backtest.results.SUMMARY_KEYS`), so these models are never on a hot path.
Objects whose keys are data (a workload's summary, a policy's parameters, per-tier counts) are
open maps; the result rows and the other records are closed (no field outside the model).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "COMMANDS",
    "SCHEMA_VERSION",
    "load_schema",
    "schema_of",
    "versioned",
]

#: "major.minor" of every document below (see the module docstring)
SCHEMA_VERSION = "1.0"

_Version = Literal["1.0"]
Num = float | None


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


# ---------------------------------------------------------------------------------------------
# backtest


class BacktestRow(_Closed):
    """One policy's result row (``results[i]``, ``oracle``): llmscale.backtest.results.SUMMARY_KEYS."""

    policy: str
    requests: int
    completed: int
    rejected: int
    timed_out: int
    killed_by_scale_down: int
    in_flight_at_end: int
    slo_attainment: Num = Field(description="share of all arrived requests that met the SLO")
    infeasible: int = Field(description="requests no fleet could serve within the SLO (too long)")
    slo_attainment_feasible: Num = Field(description="attainment over the feasible requests only")
    ttft_p50_s: Num
    ttft_p95_s: Num
    ttft_p99_s: Num
    tpot_p50_s: Num
    tpot_p99_s: Num
    e2e_p50_s: Num
    e2e_p99_s: Num
    gpu_hours: float
    cost: Num = Field(description="the GPU-hours at the prices per GPU-hour (--gpu-prices or the defaults)")
    cost_currency: str = Field(description="the currency of cost (the prices file's, USD by default)")
    replicas_mean: Num
    replicas_max: int | None
    scale_events: int
    direction_changes: int
    mean_gpu_util: Num
    mean_sm_active: Num
    makespan_s: float
    starts: dict[str, int] = Field(description="starts into service after the initial fleet, by tier")
    wall_s: float
    node_pending_replica_s: float | None = Field(None, description="only with a node pool")
    gpu_hours_by_gpu: dict[str, float] | None = Field(
        None, description="only with a mixed-GPU fleet (--gpus)"
    )
    seeds: dict[str, Any] | None = Field(None, description="only with --seeds N > 1")
    series: dict[str, list[Any]] | None = Field(None, description="only in the report's document")


class OracleRow(BacktestRow):
    """The oracle's row (``oracle``): a result row and how its schedule was searched."""

    oracle_interval_s: float = Field(description="the schedule's step: one fleet size per interval")
    oracle_target: float = Field(description="the attainment the search had to reach")
    oracle_trials: int = Field(description="simulations the search ran")
    oracle_search: dict[str, Any] = Field(description="the search's own counts (greedy, descent)")
    gpu: str | None = Field(None, description="only with --gpus: the GPU type of the cheapest answer by cost")
    mixed_by_gpu: dict[str, Any] | None = Field(
        None, description="only with --gpus: each type's oracle and reference (attainment, GPU-hours, cost)"
    )
    mixed_measure: str | None = Field(None, description="only with --gpus: what the types are compared on")


class ReferenceRow(BacktestRow):
    """The causal reference's row (``causal_reference``): a result row and how it was found."""

    reference_detection_s: float = Field(description="how late the schedule is learnt")
    reference_delay_s: float = Field(description="detection plus a cold start: when a rise serves")
    reference_target: float = Field(description="the attainment the search had to reach")
    reference_search: dict[str, Any] = Field(description="the runs tried and the schedule chosen")
    gpu: str | None = Field(None, description="only with --gpus: the GPU type of the cheapest answer by cost")
    mixed_by_gpu: dict[str, Any] | None = Field(
        None, description="only with --gpus: each type's oracle and reference (attainment, GPU-hours, cost)"
    )
    mixed_measure: str | None = Field(None, description="only with --gpus: what the types are compared on")
    price_of_foresight_cost: Num = Field(None, description="only with --gpus: its cost over the oracle's")


class BacktestWorkload(_Open):
    name: str
    context: dict[str, Any]
    infeasible: dict[str, Any] | None
    source: dict[str, Any]


class StandbyPoint(_Closed):
    standby_replicas: int
    slo_attainment: Num
    gpu_hours: float
    starts: dict[str, int]


class BacktestDocument(_Closed):
    """``llmscale backtest --json``."""

    schema_version: _Version
    workload: BacktestWorkload
    config: dict[str, Any]
    results: list[BacktestRow]
    oracle: OracleRow | None
    #: the cheapest schedule found that needs no foresight (the oracle's fields), when computed
    causal_reference: ReferenceRow | None = None
    #: its GPU-hours over the oracle's (its cost over the oracle's with --gpus: oracle.mixed_measure)
    price_of_foresight: Num = None
    standby_curve: list[StandbyPoint] | None = None
    seeds: dict[str, Any] | None = None


class DisaggPool(_Closed):
    """One pool's share of a disaggregated run (``pools.prefill``, ``pools.decode``)."""

    gpu_hours: float
    replicas_mean: Num
    replicas_max: int | None
    scale_events: int
    requests: int


class DisaggRow(_Closed):
    """One policy's row of ``backtest --disaggregated``: llmscale.backtest.disagg.DISAGG_KEYS."""

    policy: str
    mode: str
    interconnect: str
    requests: int
    completed: int
    rejected: int
    timed_out: int
    killed_by_scale_down: int
    in_flight_at_end: int
    slo_attainment: Num = Field(description="share of all arrived requests that met the SLO")
    infeasible: int = Field(description="requests no pool size could serve within the SLO (too long)")
    slo_attainment_feasible: Num = Field(
        description="attainment over the feasible requests only: what the oracle and reference are held to"
    )
    ttft_p50_s: Num
    ttft_p99_s: Num
    tpot_p50_s: Num
    tpot_p99_s: Num
    e2e_p99_s: Num
    transfer_p50_s: Num = Field(description="the KV transfer from the prefill to the decode pool")
    transfer_p99_s: Num
    gpu_hours: float = Field(description="both pools")
    pools: dict[str, DisaggPool]
    wall_s: float


class DisaggOracleRow(DisaggRow):
    """The two-pool oracle's row: the cheapest pair of constant pool sizes, then each pool's count
    shaped to its load (llmscale.backtest.disagg_reference)."""

    oracle_pair: dict[str, Any] = Field(description="the constant pair (prefill, decode) and the target")
    oracle_target: float = Field(description="the attainment the search had to reach")
    oracle_interval_s: float = Field(description="the schedule's step: one pair of sizes per interval")
    oracle_schedule: dict[str, Any] = Field(
        description="each pool's count per interval (prefill, decode) and the candidates tried"
    )


class DisaggReferenceRow(DisaggRow):
    """The two-pool causal reference's row (``causal_reference``): the oracle's schedules learnt late,
    with headroom per pool where they miss (llmscale.backtest.disagg_reference)."""

    reference_detection_s: float = Field(description="how late the schedules are learnt")
    reference_delay_s: float = Field(description="detection plus a cold start: when a rise serves")
    reference_target: float = Field(description="the attainment the search had to reach")
    reference_search: dict[str, Any] = Field(
        description="the runs tried and each pool's schedule chosen (prefill, decode)"
    )
    price_of_foresight: Num = Field(None, description="its GPU-hours over the oracle's")


class DisaggDocument(_Closed):
    """``llmscale backtest --disaggregated --json``."""

    schema_version: _Version
    workload: BacktestWorkload
    config: dict[str, Any]
    results: list[DisaggRow]
    #: the two-pool oracle: the cheapest constant pair, then shaped to each pool's load
    oracle: DisaggOracleRow | None
    #: its causal reference (the oracle's fields), when computed
    causal_reference: DisaggReferenceRow | None = None
    #: its GPU-hours over the oracle's
    price_of_foresight: Num = None


# ---------------------------------------------------------------------------------------------
# loadgen


class LatencyStats(_Closed):
    p50: Num
    p95: Num
    p99: Num
    mean: Num
    n: float


class LoadgenRequest(_Closed):
    index: int
    scheduled_s: float
    sent_s: float
    input_tokens: int
    output_tokens: int
    outcome: str
    tokens: int
    ttft_s: Num
    tpot_s: Num
    e2e_s: Num
    error: str


class LoadgenDocument(_Closed):
    """``llmscale loadgen --json``."""

    schema_version: _Version
    target: str
    model: str
    api: Literal["chat", "completions"]
    planned: int
    sent: int
    ok: int
    errors: int
    timeouts: int
    wall_s: float
    latency_s: dict[str, LatencyStats]
    first_errors: list[str]
    notes: list[str]
    requests: list[LoadgenRequest]


# ---------------------------------------------------------------------------------------------
# tenants


class TenantsPool(_Closed):
    gpu: str
    gpus: int
    max_memory_slices_used: int
    occupancy_end: list[str]


class TenantRow(_Closed):
    tenant: str
    profile: str
    quota: int | None
    slice_hours: float
    gpu_hours: float
    max_slices_held: int
    admitted_replicas: int
    held_ticks: dict[str, int]
    held_replicas: dict[str, int]
    result: dict[str, Any] = Field(description="the tenant's backtest row without gpu_hours")


class TenantsDocument(_Closed):
    """``llmscale tenants --json``."""

    schema_version: _Version
    pool: TenantsPool
    tenants: list[TenantRow]
    wall_s: float


# ---------------------------------------------------------------------------------------------
# analyze, diagnose


class KneeOut(_Closed):
    load: float = Field(description="req/s per serving replica at the knee")
    value: float


class PatternOut(_Closed):
    label: int
    entropy: float
    bandwidth: float
    share_of_time: float
    num_ticks: int
    zone: str


class PhaseOut(_Closed):
    eps: float
    min_weight_s: float
    clusters: list[PatternOut]


class EffectOut(_Closed):
    action: str
    ate_s: float
    ci_low_s: float
    ci_high_s: float
    naive_diff_s: float
    num_treated: int
    num_control: int
    horizon_s: float
    covariates: list[str]
    helped: bool | None


class PredictorOut(_Closed):
    name: str
    errors: dict[str, float] | None
    missing: str


class AnalyzeDocument(_Closed):
    """``llmscale analyze --json``."""

    schema_version: _Version
    policy: str
    source: str
    ticks: int
    latency_knee: KneeOut | None
    throughput_knee: KneeOut | None
    phase: PhaseOut | None
    effects: list[EffectOut]
    predictors: list[PredictorOut]
    notes: dict[str, str]
    summaries: dict[str, str] = Field(description="chart id -> the paragraph the terminal prints")
    report: str | None
    policy_config: str | None


class FindingOut(_Closed):
    kind: str
    start_s: float
    end_s: float
    num_ticks: int
    peak: float
    detail: str


class DiagnoseDocument(_Closed):
    """``llmscale diagnose --json``."""

    schema_version: _Version
    policy: str
    source: str
    ticks: int
    findings: list[FindingOut]
    unchecked: list[str]


# ---------------------------------------------------------------------------------------------
# calibrate, tune, node-check


class CalibrationInput(_Closed):
    source: str
    kind: Literal["closed-batch", "serve-detailed", "serve-summary", "prometheus"] = Field(
        description="serve-detailed: vllm bench serve --save-detailed (per-request arrays); "
        "serve-summary: plain --save-result (means, medians, percentiles)"
    )
    points: int


class CalibrationPoint(_Closed):
    label: str
    measured_s: float
    uncalibrated_s: float
    predicted_s: float
    error_pct: float
    fitted: bool


class CalibrateDocument(_Closed):
    """``llmscale calibrate --json``."""

    schema_version: _Version
    profile: str
    inputs: list[CalibrationInput]
    points: list[CalibrationPoint]
    factors: dict[str, float]
    uncertainty: dict[str, dict[str, Any]]
    notes: list[str]


class TrialOut(_Closed):
    number: int
    state: str
    params: dict[str, Any]
    gpu_hours: Num
    attainment: Num
    feasible: bool
    baseline: bool
    error: str | None
    cases: list[dict[str, Any]]
    ran_on: str


class TuneDocument(_Closed):
    """``llmscale tune --json``."""

    schema_version: _Version
    policy: str
    study: str
    target_attainment: float
    cases: list[str]
    trials: list[TrialOut]
    ran_now: int
    best: TrialOut | None
    baseline: TrialOut | None
    policy_config: str | None = Field(description="--out, when a trial met the target")
    report: str


class NodeCheckDocument(_Closed):
    """``llmscale node-check`` (stdout, and --json)."""

    schema_version: _Version
    node: str
    readings: dict[str, Num]
    failed: list[str]
    #: why a reading could not be had (Prometheus unreachable or answering malformed); exit 2
    errors: list[str] | None = None


#: command -> the model of its --json document
COMMANDS: dict[str, type[BaseModel]] = {
    "backtest": BacktestDocument,
    "backtest-disaggregated": DisaggDocument,
    "loadgen": LoadgenDocument,
    "tenants": TenantsDocument,
    "analyze": AnalyzeDocument,
    "diagnose": DiagnoseDocument,
    "calibrate": CalibrateDocument,
    "tune": TuneDocument,
    "node-check": NodeCheckDocument,
}


def versioned(command: str, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with ``schema_version`` first (``command`` must have a model)."""
    if command not in COMMANDS:
        raise KeyError(f"no output schema for command {command!r}")
    return {"schema_version": SCHEMA_VERSION, **{k: v for k, v in doc.items() if k != "schema_version"}}


def schema_of(command: str) -> dict[str, Any]:
    """The JSON Schema the models generate for ``command``'s document (what the files hold)."""
    model = COMMANDS[command]
    schema = model.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:llmscale:output:{command}:{SCHEMA_VERSION}",
        **schema,
    }


def load_schema(command: str) -> dict[str, Any]:
    """The shipped schema of ``command`` (``<command>.schema.json`` beside this module)."""
    text = resources.files(__package__).joinpath(f"{command}.schema.json").read_text(encoding="utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc
