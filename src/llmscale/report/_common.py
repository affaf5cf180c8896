"""Pieces shared by the terminal table and the HTML report.

Both renderers must show the *same* columns, formatted the *same* way, and give each policy the
*same* colour, so all of that lives here. Nothing in this module imports plotly, rich or numpy:
it is imported by the CLI's ``--json``/table path, which should start fast.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from llmscale.errors import ConfigError

__all__ = [
    "COLUMNS",
    "MISSING",
    "NODE_PENDING_COLUMN",
    "ORACLE_COLOR",
    "ORACLE_LABEL",
    "PALETTE",
    "REFERENCE_COLOR",
    "REFERENCE_LABEL",
    "Column",
    "Row",
    "best_rows",
    "cell_text",
    "fmt_count",
    "fmt_float",
    "fmt_mean",
    "fmt_pct",
    "fmt_seconds",
    "foresight_text",
    "judged_text",
    "measure_of",
    "measure_unit",
    "noise_ties",
    "number",
    "policy_style",
    "report_title",
    "rows_of",
    "section",
    "seeds_text",
    "slo_text",
]

#: Shown for a metric that has no value (``None``/NaN), e.g. a TTFT percentile with no requests.
MISSING = "—"

#: Categorical palette (d3 "category10"): well-separated hues that also read on a terminal.
#: With more policies than colours the palette cycles and :func:`policy_style` switches the dash
#: pattern / marker symbol, so policy 11 is "blue, dashed" rather than a second "blue, solid".
PALETTE: tuple[str, ...] = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
_DASHES: tuple[str, ...] = ("solid", "dash", "dot", "dashdot")
_SYMBOLS: tuple[str, ...] = ("circle", "square", "diamond", "triangle-up")

#: The oracle is drawn near-black and dashed everywhere so it never looks like "one more policy".
ORACLE_COLOR = "#222222"
ORACLE_LABEL = "oracle (lower bound)"
#: The causal reference (the cheapest schedule found without foresight) is a bound too: grey, dotted.
REFERENCE_COLOR = "#8a8a8a"
REFERENCE_LABEL = "causal reference"


@dataclass(frozen=True)
class Row:
    """One line of the comparison: a policy's summary plus how to draw it."""

    policy: str
    """Name exactly as in the document (unescaped)."""
    label: str
    """Display name; the oracle gets :data:`ORACLE_LABEL`."""
    summary: Mapping[str, Any]
    """The result mapping itself (summary keys + optional ``series``)."""
    index: int
    """Position among the non-oracle policies (drives the colour); -1 for the oracle."""
    is_oracle: bool
    """A bound, not a policy (the oracle or the causal reference): dimmed, never ranked."""
    is_reference: bool = False
    """The causal reference (``is_oracle`` too), drawn apart from the oracle."""

    @property
    def color(self) -> str:
        """Hex colour used for this policy in every chart and table."""
        if self.is_reference:
            return REFERENCE_COLOR
        return policy_style(self.index)[0] if not self.is_oracle else ORACLE_COLOR

    @property
    def dash(self) -> str:
        """Plotly dash style for this policy's lines."""
        if self.is_reference:
            return "dot"
        return policy_style(self.index)[1] if not self.is_oracle else "dash"

    @property
    def symbol(self) -> str:
        """Plotly marker symbol for this policy's points."""
        if self.is_reference:
            return "star-open"
        return policy_style(self.index)[2] if not self.is_oracle else "star"

    @property
    def series(self) -> Mapping[str, Any] | None:
        """The sampled time series, or ``None`` when the result carries none."""
        series = self.summary.get("series")
        return series if isinstance(series, Mapping) else None


def policy_style(index: int) -> tuple[str, str, str]:
    """Colour, dash and marker symbol for the ``index``-th policy (cycling past the palette)."""
    cycle, slot = divmod(max(index, 0), len(PALETTE))
    return PALETTE[slot], _DASHES[cycle % len(_DASHES)], _SYMBOLS[cycle % len(_SYMBOLS)]


def rows_of(doc: Mapping[str, Any]) -> list[Row]:
    """The policies of a backtest document in display order: results as given, oracle last.

    Raises :class:`~llmscale.errors.ConfigError` when ``doc`` is not shaped like the output of
    ``llmscale backtest --json`` (so the CLI prints a message instead of a ``KeyError``).
    """
    if not isinstance(doc, Mapping):
        raise ConfigError(f"backtest document must be a mapping, got {type(doc).__name__}")
    results = doc.get("results") or []
    if not isinstance(results, Sequence) or isinstance(results, str | bytes):
        raise ConfigError(f"backtest document: 'results' must be a list, got {type(results).__name__}")
    rows: list[Row] = []
    for i, result in enumerate(results):
        if not isinstance(result, Mapping):
            raise ConfigError(
                f"backtest document: results[{i}] must be a mapping, got {type(result).__name__}"
            )
        name = str(result.get("policy", f"policy {i + 1}"))
        rows.append(Row(policy=name, label=name, summary=result, index=i, is_oracle=False))
    oracle = doc.get("oracle")
    if isinstance(oracle, Mapping):
        name = str(oracle.get("policy", "oracle"))
        rows.append(Row(policy=name, label=ORACLE_LABEL, summary=oracle, index=-1, is_oracle=True))
    reference = doc.get("causal_reference")
    if isinstance(reference, Mapping):
        name = str(reference.get("policy", "causal-reference"))
        rows.append(
            Row(
                policy=name,
                label=REFERENCE_LABEL,
                summary=reference,
                index=-1,
                is_oracle=True,
                is_reference=True,
            )
        )
    return rows


def measure_of(doc: Mapping[str, Any]) -> tuple[str, str]:
    """(fleet, measure) of a backtest document: ``mixed`` / ``cost`` when the oracle is the mixed
    fleet's (``mixed_measure``), ``disaggregated`` / ``gpu_hours`` for two pools, else one pool in
    GPU-hours (:data:`llmscale.backtest.fleet_yardsticks.FLEET_MEASURE`)."""
    from llmscale.backtest.fleet_yardsticks import FLEET_MEASURE

    oracle = doc.get("oracle")
    oracle = oracle if isinstance(oracle, Mapping) else {}
    if oracle.get("mixed_measure") == "cost":
        fleet = "mixed"
    elif oracle.get("mode") == "disaggregated":
        fleet = "disaggregated"
    else:
        fleet = "single"
    return fleet, FLEET_MEASURE[fleet]


def measure_unit(measure: str) -> str:
    return "GPU-hours" if measure == "gpu_hours" else measure


def foresight_text(doc: Mapping[str, Any]) -> str:
    """ "causal reference = ... 1.23x the oracle's GPU-hours (the price of foresight)", or ""
    (cost on a mixed fleet)."""
    price = number(doc.get("price_of_foresight"))
    if price is None:
        return ""
    unit = measure_unit(measure_of(doc)[1])
    return (
        "causal reference = cheapest schedule found without foresight (the oracle's, delayed by "
        f"detection + start, with headroom): {price:.2f}x the oracle's {unit}, the price of foresight"
    )


def judged_text(doc: Mapping[str, Any]) -> str:
    """ "slo-disagg: 1.08x the causal reference's GPU-hours at 99.60% SLO attainment (the
    reference's 99.20%)" for the policy the fleet is judged on (``slo``, ``slo-disagg`` on two
    pools, ``gpu-mix`` by cost on a mixed fleet: the workload matrix's criterion allows 1.15x),
    or "" without a reference or that policy."""
    from llmscale.backtest.fleet_yardsticks import judged_policy, reference_ratio

    ref = doc.get("causal_reference")
    results = doc.get("results") or []
    if not isinstance(ref, Mapping) or not isinstance(results, Sequence):
        return ""
    fleet, measure = measure_of(doc)
    rows = {str(r.get("policy")): r for r in results if isinstance(r, Mapping)}
    name = judged_policy(fleet, list(rows))
    ratio = None if name is None else reference_ratio(rows[name], ref, measure)
    if name is None or ratio is None:
        return ""
    return (
        f"{name}: {ratio:.2f}x the causal reference's {measure_unit(measure)} at "
        f"{fmt_pct(rows[name].get('slo_attainment'))} SLO attainment (the reference's "
        f"{fmt_pct(ref.get('slo_attainment'))})"
    )


def number(value: Any) -> float | None:
    """``value`` as a finite float, or ``None`` for None/NaN/inf/non-numbers."""
    if value is None or isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def fmt_float(value: Any, sig: int = 3) -> str:
    """``sig`` significant digits in fixed-point notation (never ``1e-05``), thousands separated."""
    x = number(value)
    if x is None:
        return MISSING
    if x == 0:
        return "0"
    # Decimals needed for `sig` significant digits; capped so tiny values don't print 12 zeros.
    decimals = min(max(sig - 1 - math.floor(math.log10(abs(x))), 0), 6)
    return f"{x:,.{decimals}f}"


def fmt_seconds(value: Any) -> str:
    """A latency in seconds, 3 significant digits (``0.0423``, ``1.23``, ``123``)."""
    return fmt_float(value, 3)


def fmt_pct(value: Any) -> str:
    """A 0-1 fraction as a percentage.

    Near 100 % two decimals are shown, and the value is truncated rather than rounded, so 99.996 %
    attainment never displays as a perfect ``100.00%``: the difference matters for an SLO.
    """
    x = number(value)
    if x is None:
        return MISSING
    pct = x * 100.0
    if pct >= 99.0:
        return f"{math.floor(pct * 100.0) / 100.0:.2f}%"
    return f"{pct:.1f}%"


def fmt_count(value: Any) -> str:
    """An integer count with thousands separators."""
    x = number(value)
    if x is None:
        return MISSING
    return f"{round(x):,d}"


def fmt_mean(value: Any) -> str:
    """A mean of small integers (e.g. replicas): one decimal."""
    x = number(value)
    return MISSING if x is None else f"{x:,.1f}"


@dataclass(frozen=True)
class Column:
    """One numeric column of the comparison table."""

    key: str
    """Key in a result summary."""
    header: str
    """Short header shown in both renderers; a newline splits it into two lines so the 13 columns
    fit a terminal or a page side by side (the second line is often the unit)."""
    fmt: Callable[[Any], str]
    """Formats a raw value (``None`` -> :data:`MISSING`)."""
    best: Literal["max", "min"] | None = None
    """Whether the best (highlighted) value is the largest or the smallest; ``None``: no highlight."""
    help: str = ""
    """Longer description (HTML ``title`` tooltip)."""
    abbrev: str = ""
    """One-line short header for a narrow terminal, explained in a legend under the table."""
    title: str = ""
    """What the abbreviation stands for, in the legend (``"TTFT99 = TTFT p99 (s)"``)."""
    primary: bool = True
    """Shown in the first table when a terminal is too narrow for all columns side by side: the
    numbers a policy is chosen on (attainment, tail latency, GPU-hours, fleet size). The others
    move to a second table, never out of sight."""


#: The columns of the comparison (after the policy name), in order.
COLUMNS: tuple[Column, ...] = (
    Column(
        "slo_attainment",
        "SLO\nattain.",
        fmt_pct,
        "max",
        "Share of requests meeting both TTFT and TPOT SLOs",
        abbrev="SLO%",
        title="SLO attainment",
    ),
    Column(
        "slo_attainment_feasible",
        "SLO att.\nfeasible",
        fmt_pct,
        None,
        "Share of the feasible requests meeting both SLOs (infeasible: longer than the context, or a "
        "prefill alone on an idle replica past the TTFT target)",
        abbrev="SLO%f",
        title="SLO attain., feasible",
        primary=False,
    ),
    Column(
        "ttft_p50_s",
        "TTFT\np50 s",
        fmt_seconds,
        None,
        "Median time to first token",
        abbrev="TTFT50",
        title="TTFT p50 (s)",
        primary=False,
    ),
    Column(
        "ttft_p99_s",
        "TTFT\np99 s",
        fmt_seconds,
        None,
        "99th percentile time to first token",
        abbrev="TTFT99",
        title="TTFT p99 (s)",
    ),
    Column(
        "tpot_p50_s",
        "TPOT\np50 s",
        fmt_seconds,
        None,
        "Median time per output token",
        abbrev="TPOT50",
        title="TPOT p50 (s)",
        primary=False,
    ),
    Column(
        "tpot_p99_s",
        "TPOT\np99 s",
        fmt_seconds,
        None,
        "99th percentile time per output token",
        abbrev="TPOT99",
        title="TPOT p99 (s)",
    ),
    Column(
        "gpu_hours",
        "GPU\nhours",
        lambda v: fmt_float(v, 4),
        "min",
        "GPU-hours paid (all replica states)",
        abbrev="GPU-h",
        title="GPU-hours",
    ),
    Column(
        "cost",
        "Cost",
        lambda v: fmt_float(v, 4),
        "min",
        "GPU-hours at the prices per GPU-hour (--gpu-prices, or the cited defaults; docs/gpu-mix.md)",
        abbrev="Cost",
        title="cost (currency of the prices)",
        primary=False,
    ),
    Column(
        "replicas_mean",
        "Repl.\nmean",
        fmt_mean,
        None,
        "Time-weighted mean replica count",
        abbrev="Rmean",
        title="replicas, time-weighted mean",
    ),
    Column(
        "replicas_max",
        "Repl.\nmax",
        fmt_count,
        None,
        "Peak replica count",
        abbrev="Rmax",
        title="replicas, peak",
        primary=False,
    ),
    Column(
        "scale_events",
        "Scale\nevents",
        fmt_count,
        None,
        "Number of scaling actions",
        abbrev="Scl",
        title="scale events",
        primary=False,
    ),
    Column(
        "killed_by_scale_down",
        "Killed",
        fmt_count,
        None,
        "Requests killed by a scale-down",
        abbrev="Kill",
        title="requests killed by a scale-down",
        primary=False,
    ),
    Column(
        "timed_out",
        "Timed\nout",
        fmt_count,
        None,
        "Requests that timed out",
        abbrev="T/O",
        title="requests timed out",
        primary=False,
    ),
    Column(
        "rejected",
        "Rejected",
        fmt_count,
        None,
        "Requests rejected on arrival: longer than the model's context (HTTP 400), or the gateway queue full",
        abbrev="Rej",
        title="requests rejected",
        primary=False,
    ),
    Column(
        "infeasible",
        "Infeas-\nible",
        fmt_count,
        None,
        "Requests no fleet serves within the SLO: longer than the context, or a prefill alone on an "
        "idle replica past the TTFT target",
        abbrev="Inf",
        title="requests infeasible",
        primary=False,
    ),
)


#: Replica-seconds waiting for a node: in a result only when the backtest modelled a node pool
#: (``--node-start-s`` / ``--max-nodes``), and in the HTML table only then.
NODE_PENDING_COLUMN = Column(
    "node_pending_replica_s",
    "Node\npending s",
    lambda v: fmt_float(v, 4),
    None,
    "Replica-seconds spent waiting for a node (provisioning, or a full pool): asked for, not serving",
    abbrev="NodeP",
    title="node-pending replica-seconds",
    primary=False,
)


def _seed_stat(row: Row, key: str) -> Mapping[str, Any] | None:
    """The row's statistics over seeds for ``key`` (``--seeds N`` > 1), or None."""
    seeds = row.summary.get("seeds")
    stat = seeds.get(key) if isinstance(seeds, Mapping) else None
    return stat if isinstance(stat, Mapping) and number(stat.get("mean")) is not None else None


def _value(row: Row, key: str) -> Any:
    """The value a row is ranked on: its mean over seeds when it has one, else its own."""
    stat = _seed_stat(row, key)
    return stat["mean"] if stat is not None else row.summary.get(key)


def cell_text(row: Row, column: Column) -> str:
    """The cell of ``row`` in ``column``: its value, or ``mean ± half-width`` over seeds.

    The half-width of a percentage is in percentage points (``57.4% ± 2.3``); of GPU-hours, in
    GPU-hours with two significant digits (``0.2944 ± 0.073``).
    """
    stat = _seed_stat(row, column.key)
    if stat is None:
        return column.fmt(row.summary.get(column.key))
    half = number(stat.get("half_width")) or 0.0
    spread = fmt_float(half * 100.0, 2) if column.fmt is fmt_pct else fmt_float(half, 2)
    return f"{column.fmt(stat['mean'])} ± {spread}"


def noise_ties(doc: Mapping[str, Any], rows: Sequence[Row], column: Column, best: set[int]) -> set[int]:
    """Rows not best on ``column`` but within noise of a best row (``--seeds``' paired comparison)."""
    seeds = doc.get("seeds")
    comparisons = seeds.get("comparisons") if isinstance(seeds, Mapping) else None
    if not isinstance(comparisons, Sequence) or not best:
        return set()
    best_names = {rows[i].policy for i in best}
    tied: set[str] = set()
    for c in comparisons:
        if isinstance(c, Mapping) and c.get("metric") == column.key and c.get("within_noise") is True:
            a, b = str(c.get("a")), str(c.get("b"))
            if a in best_names:
                tied.add(b)
            if b in best_names:
                tied.add(a)
    return {i for i, r in enumerate(rows) if not r.is_oracle and r.policy in tied and i not in best}


def seeds_text(doc: Mapping[str, Any]) -> str:
    """``"3 seeds (3-5): mean ± 95% half-width; ≈ = within noise of the best ..."`` or ``""``."""
    seeds = doc.get("seeds")
    values = seeds.get("seeds") if isinstance(seeds, Mapping) else None
    if not isinstance(values, Sequence) or len(values) < 2:
        return ""
    return (
        f"{len(values)} seeds ({values[0]}-{values[-1]}): SLO attainment and GPU-hours as mean ± 95% "
        "half-width, other columns from the first seed; ≈ = within noise of the best "
        "(paired t over seeds, 95%)"
    )


def best_rows(rows: Sequence[Row], column: Column) -> set[int]:
    """Indices (into ``rows``) holding the best value of ``column``, ties included.

    The oracle is excluded: it plans with hindsight, so "beating" it is not a meaningful win and
    highlighting it would hide which *real* policy did best. With ``--seeds`` the means rank.
    """
    if column.best is None:
        return set()
    values = {i: number(_value(r, column.key)) for i, r in enumerate(rows) if not r.is_oracle}
    present = {i: v for i, v in values.items() if v is not None}
    if not present:
        return set()
    target = max(present.values()) if column.best == "max" else min(present.values())
    # Tolerance: two policies whose values print identically should both be highlighted.
    tol = 1e-9 * max(1.0, abs(target))
    return {i for i, v in present.items() if abs(v - target) <= tol}


def section(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``doc[key]`` when it is a mapping (``workload``, ``config``), else an empty one."""
    value = doc.get(key)
    return value if isinstance(value, Mapping) else {}


def report_title(doc: Mapping[str, Any]) -> str:
    """One-line description of a backtest: workload, model, GPU and tensor parallelism."""
    workload, config = section(doc, "workload"), section(doc, "config")
    title = f"Backtest: {workload.get('name') or 'unnamed workload'}"
    model, gpu, tp = config.get("model"), config.get("gpu"), config.get("tp")
    setup = " ".join(
        bit
        for bit in (str(model) if model else "", (f"on {tp}×{gpu}" if tp else f"on {gpu}") if gpu else "")
        if bit
    )
    return f"{title} — {setup}" if setup else title


def slo_text(doc: Mapping[str, Any]) -> str:
    """``"SLO: TTFT ≤ 2 s, TPOT ≤ 0.1 s"`` from the config (empty when the config has no SLO)."""
    config = section(doc, "config")
    bits = []
    for key, name in (("slo_ttft_s", "TTFT"), ("slo_tpot_s", "TPOT")):
        if number(config.get(key)) is not None:
            bits.append(f"{name} ≤ {fmt_seconds(config[key])} s")
    return "SLO: " + ", ".join(bits) if bits else ""
