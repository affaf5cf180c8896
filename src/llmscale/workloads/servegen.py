"""ServeGen (alibaba/ServeGen) rate files -> generated arrivals.

ServeGen publishes no request timestamps, only per-window descriptions of
each client's arrival process, so this loader *generates* arrivals from them
(seeded) and draws lengths from a :class:`~llmscale.workloads.lengths.LengthModel`.

Two layouts, both format ``"servegen"``:

* **Per-client rates**: a directory of ``chunk-N-trace.csv`` (one file per
  client N) or a single such file. No header; one row per 10-minute window:
  ``window_start_s,rate_rps,cv,iat_family,p1,p2``. ``iat_family`` is
  ``Gamma`` (``p1`` = shape, ``p2`` = scale in seconds; ``p1*p2`` is
  ``1/rate_rps`` to 4 digits) or ``Weibull`` (``p1`` = shape, ``p2`` =
  scale); empty means no traffic in that window.
* **Aggregated**: ``*_total_rate_10min.csv`` with header
  ``window_start_s,total_rate_rps,active_clients``; each window is a gamma
  renewal process at ``total_rate_rps`` with a chosen CV (1.0 = Poisson).

Generation rules (documented because they shape every backtest on ServeGen):

* ``rate_rps`` is authoritative; the family's *shape* sets burstiness and the
  scale is re-derived so the mean inter-arrival is ``1/rate_rps``. Why: the
  Weibull fits in m-small imply a mean inter-arrival of 0.91-1.90x (p10-p90,
  median 1.23x) of ``1/rate_rps``, so using their scale as-is would produce
  ~20% less traffic than the file's own rates (and its total-rate file) say.
* Each (client, window) pair draws from its own generator,
  ``SeedSequence(seed, spawn_key=(N, window_index))``; the whole 10-minute
  window is generated and then cut to the requested span. So the requests in
  a given window are the same whichever span you ask for, and asking for one
  hour of a 14-day file generates one hour (plus at most one window per client).
* Lengths come from the same per-pair generator, after the arrivals.
* ``meta['start_s']`` / ``meta['duration_s']`` give the generated span
  relative to the file's first window; ``meta['t0_offset_s']`` is the file
  time of the first generated request (so ``arrival_s + t0_offset_s`` is on
  the file's own axis) and ``meta['first_arrival_offset_s']`` its distance
  from the span start.
* A window with ``rate_rps > 0`` but an empty family (absent from the
  published files) is generated as Poisson and counted in
  ``meta['poisson_fallback_windows']``.

Rate shape (``rate_shape``, CLI ``--rate-shape``):

* ``"smooth"`` (default): the rate is continuous and piecewise linear, with
  knots at every window boundary and centre, and each window keeps exactly
  its expected count ``L * rate_rps``. Real aggregate traffic does not jump
  by x1.85 at a window boundary, as the step shape makes the ServeGen ramp do.
* ``"step"``: the rate is constant within a window and jumps at its edges
  (the behaviour before the smooth shape; same seed, same requests, byte for
  byte: ``test_step_shape_is_unchanged``).
* ``meta['rate_shape']`` records which. Both shapes draw the same unit-rate
  points per window, so a whole window has the same number of requests under
  either; only their times differ.

The smooth knots: a boundary takes the rate a line between the two window
centres gives it (the mean of the two windows for equal lengths), capped at
twice the smaller of the two rates; a window's centre knot is then
``2 * r - (left + right) / 2``, which makes the two trapezoids of the window
hold ``L/4 * (left + 2 * centre + right) = L * r`` requests. The cap keeps the
centre >= 0 (``left + right <= 4 r``), so an idle window between busy ones
stays idle and a client switching on ramps from 0 at its window's edge.
The first and last windows of the file are linear: the line from their inner
boundary through their own rate at their centre.
Why not simply interpolate between the window centres: that takes
``L/8`` times the second difference of the rates out of every window, and
peaks are what an autoscaler is tested on. Worked number, ServeGen m-large, the
windows from 79,800 s (22 h 10 min into the file): 402.3, 583.0, 201.1 req/s. Centre interpolation
gives the peak window ``600 * (0.75 * 583.0 + (402.3 + 201.1) / 8) = 307,605``
requests instead of 349,800 (-12.1%). Here the boundaries are 492.65 and
392.05 req/s and the centre 723.65: a window whose mean is above both
neighbours' must peak above its mean, and the knots never exceed twice the
window's own rate. Pinned by ``test_smooth_keeps_each_window_count``.

Arrivals under the smooth shape are a non-homogeneous renewal process by
time rescaling: each window draws a unit-rate renewal process with its own
family and shape on ``[0, Lambda_i)`` (``Lambda_i`` its integrated rate) and
maps every point ``u`` to the time ``t`` where the integrated rate from the
window start reaches ``u``. Where the rate is constant the map is affine, so
the inter-arrival CV is the family's (pinned by
``test_smooth_keeps_cv_on_constant_rate``). Where it moves, the relative
change of the rate across one mean inter-arrival is ``slope / rate**2``: on
the m-large peak above, (723.65 - 492.65) / 300 s = 0.77 req/s per second at
~600 req/s, i.e. 2e-6, so the CV is the family's to that order. Each window
restarts its renewal process, as under the step shape.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from llmscale.errors import ConfigError, TraceFormatError
from llmscale.workloads import _io
from llmscale.workloads.arrivals import check_seed, renewal_arrivals, unit_iat_sampler
from llmscale.workloads.lengths import LengthModel, LognormalLengths
from llmscale.workloads.limits import MAX_ABS_TIME_S, MAX_REQUESTS, describe_span
from llmscale.workloads.model import Workload

__all__ = [
    "DEFAULT_MAX_REQUESTS",
    "RATE_SHAPES",
    "is_servegen_chunk_line",
    "is_servegen_chunk_name",
    "load_servegen",
    "smooth_knots",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: see :data:`llmscale.workloads.limits.MAX_REQUESTS`
DEFAULT_MAX_REQUESTS: Final = MAX_REQUESTS

_CHUNK_FIELDS: Final = ("window_start_s", "rate_rps", "cv", "iat_family", "p1", "p2")
_TOTAL_FIELDS: Final = ("window_start_s", "total_rate_rps")
#: ``--rate-shape`` values; see the module docstring.
RATE_SHAPES: Final = ("smooth", "step")
_CHUNK_NAME = re.compile(r"chunk-(\d+)-trace\.csv$")
_FAMILIES: Final = {"": "", "gamma": "gamma", "weibull": "weibull"}
#: Range of an inter-arrival shape (``p1``) in a window with traffic. ServeGen's own lie in
#: 0.0100-364 (Gamma) and 0.160-2.28 (Weibull) in m-small. A gamma shape s has CV 1/sqrt(s),
#: and the generator sizes its draws with a 6-CV margin: a shape of 1.7e-59 asked numpy for an
#: array of ~1e32 values ("Maximum allowed dimension exceeded").
_SHAPE_MIN: Final = 1e-3
_SHAPE_MAX: Final = 1e4

# ServeGen README facts: rate-weighted mean lengths per model family.
_MEANS_M_LARGE: Final = (914.0, 155.0)
_MEANS_M_SMALL: Final = (120.0, 15.0)


def is_servegen_chunk_line(line: str) -> bool:
    """True when ``line`` looks like a headerless ``chunk-N-trace.csv`` row."""
    fields = [f.strip() for f in line.split(",")]
    if len(fields) != len(_CHUNK_FIELDS) or fields[3].lower() not in _FAMILIES:
        return False
    try:
        for i in (0, 1, 2, 4, 5):
            float(fields[i])
    except ValueError:
        return False
    return True


def is_servegen_chunk_name(name: str) -> bool:
    """True for a file named as ServeGen names a client's rates, ``chunk-N-trace.csv``."""
    return _CHUNK_NAME.search(name) is not None


@dataclass(frozen=True)
class _Client:
    """One client's windows (all arrays aligned, one entry per window)."""

    key: int  # N of chunk-N-trace.csv: part of the per-window seed
    path: str
    start_s: FloatArray
    length_s: FloatArray
    rate_rps: FloatArray
    family: list[str]
    shape: FloatArray
    lines: IntArray  # 1-based file line of each window


def _window_lengths(starts_s: FloatArray, table: _io.Table, field: str) -> FloatArray:
    steps = np.diff(starts_s)
    bad = np.flatnonzero(steps <= 0)
    if bad.size:
        i = int(bad[0]) + 1
        raise table.error(
            f"window starts must increase; {starts_s[i]:g} follows {starts_s[i - 1]:g}", row=i, field=field
        )
    # The last window lasts as long as the typical one (600 s in ServeGen).
    last_s = float(np.median(steps)) if steps.size else 600.0
    return np.append(steps, last_s)


def _read_chunk(path: Path, key: int) -> _Client:
    table = _io.parse_table(
        _io.read_text(path), str(path), _CHUNK_FIELDS, header=False, positional=_CHUNK_FIELDS
    )
    starts = _io.parse_float_column(
        table, "window_start_s", what="time in seconds", max_abs=MAX_ABS_TIME_S, unit="s"
    )
    rates = _io.parse_float_column(table, "rate_rps", what="rate")
    _io.parse_float_column(table, "cv", what="number")
    shapes = _io.parse_float_column(table, "p1", what="number")
    _io.parse_float_column(table, "p2", what="number")
    negative = np.flatnonzero(rates < 0)
    if negative.size:
        i = int(negative[0])
        raise table.error(f"negative rate: {table.columns['rate_rps'][i]!r}", row=i, field="rate_rps")
    families: list[str] = []
    for i, raw in enumerate(table.columns["iat_family"]):
        family = _FAMILIES.get(raw.strip().lower())
        if family is None:
            raise table.error(
                f"unknown inter-arrival family {raw!r}; expected Gamma, Weibull or empty", i, "iat_family"
            )
        if family and rates[i] > 0 and not _SHAPE_MIN <= shapes[i] <= _SHAPE_MAX:
            raise table.error(
                f"{raw.strip()} shape must be in [{_SHAPE_MIN:g}, {_SHAPE_MAX:g}], "
                f"got {table.columns['p1'][i]!r}",
                i,
                "p1",
            )
        families.append(family)
    lengths = _window_lengths(starts, table, "window_start_s")
    return _Client(key, str(path), starts, lengths, rates, families, shapes, table.lines)


def _chunk_files(path: Path) -> list[tuple[int, Path]]:
    """The ``(N, file)`` of each ``chunk-N-trace.csv``, by N.

    N is the client's number and seeds its windows, so two files of one number (``chunk-1`` and
    ``chunk-01``, a copy left beside the original) would replay that client twice with the same
    draws: every one of its arrivals doubled. They are refused, naming both.
    """
    if path.is_dir():
        found = sorted((int(m.group(1)), p) for p in path.iterdir() if (m := _CHUNK_NAME.search(p.name)))
        if not found:
            raise TraceFormatError("directory has no chunk-N-trace.csv files", path=str(path))
        for (key, a), (next_key, b) in itertools.pairwise(found):
            if key == next_key:
                raise TraceFormatError(
                    f"{a.name} and {b.name} are both chunk {key}: one client's rates would be "
                    "replayed twice; keep one",
                    path=str(path),
                )
        return found
    match = _CHUNK_NAME.search(path.name)
    return [(int(match.group(1)) if match else 0, path)]


def _default_lengths(path: Path, input_mean: float | None, output_mean: float | None) -> LognormalLengths:
    small = "m-small" in str(path).lower()
    in_default, out_default = _MEANS_M_SMALL if small else _MEANS_M_LARGE
    return LognormalLengths.from_means(
        in_default if input_mean is None else input_mean,
        out_default if output_mean is None else output_mean,
        sigma=1.0,
    )


def _span(
    start_s: float, duration_s: float | None, trace_start_s: float, trace_end_s: float, path: Path
) -> tuple[float, float]:
    """Absolute ``[lo, hi)`` on the file's axis for a span given relative to its first window."""
    if not (math.isfinite(start_s) and start_s >= 0):
        raise ConfigError(f"start_s = {start_s}, must be a finite number >= 0")
    if duration_s is not None and not duration_s > 0:
        raise ConfigError(f"duration_s = {duration_s}, must be > 0")
    lo_s = trace_start_s + start_s
    if lo_s >= trace_end_s:
        raise ConfigError(
            f"start_s = {start_s:g} is past the end of {path} ({trace_end_s - trace_start_s:g} s long)"
        )
    hi_s = trace_end_s if duration_s is None else min(lo_s + duration_s, trace_end_s)
    return lo_s, hi_s


@dataclass(frozen=True)
class _Active:
    """A window that generates requests inside the span: where it starts and ends, and its row."""

    start_s: float
    end_s: float
    path: str
    line: int


def _active_window(client: _Client, i: int) -> _Active:
    start_s = float(client.start_s[i])
    return _Active(start_s, start_s + float(client.length_s[i]), client.path, int(client.lines[i]))


def _check_active_span(active: list[_Active], lo_s: float, hi_s: float, max_span_s: float | None) -> None:
    """Refuse a span whose generated requests would cover more than ``max_span_s`` seconds.

    Only windows that generate requests count: idle windows cost nothing. Names the row of the
    last active window (a stray row years after the rest is the usual cause).
    """
    if max_span_s is None or not active:
        return
    first = min(active, key=lambda a: a.start_s)
    last = max(active, key=lambda a: a.end_s)
    span_s = min(last.end_s, hi_s) - max(first.start_s, lo_s)
    if span_s > max_span_s:
        where = f"{first.path} line {first.line}" if first.path != last.path else f"line {first.line}"
        raise TraceFormatError(
            f"the windows with traffic span {describe_span(span_s)}, from {where} to this one; "
            f"a replay covers at most {describe_span(max_span_s)}: cut a window with "
            "start_s / duration_s (--start-s / --duration-s)",
            path=last.path,
            line=last.line,
            field="window_start_s",
        )


def _check_budget(expected: float, max_requests: int, path: Path, start_s: float, end_s: float) -> None:
    if expected > max_requests:
        raise ConfigError(
            f"{path}: [{start_s:g}, {end_s:g}) s would generate ~{expected:,.0f} requests, "
            f"more than max_requests = {max_requests:,}; pass start_s/duration_s for a shorter span "
            "or raise max_requests"
        )


def _generate_window(
    rng: np.random.Generator,
    rate_rps: float,
    window_start_s: float,
    window_s: float,
    family: str,
    shape: float,
) -> FloatArray:
    sampler = unit_iat_sampler(family or "exponential", shape)
    cv_hint = 1.0 / math.sqrt(shape) if family == "gamma" else 3.0 if family == "weibull" else 1.0
    unit_points = renewal_arrivals(rate_rps * window_s, sampler, rng, cv_hint=cv_hint)
    return window_start_s + unit_points / rate_rps


def smooth_knots(length_s: FloatArray, rate_rps: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Rate at each window's left edge, centre and right edge under the smooth shape, req/s.

    The boundary between windows ``i`` and ``i+1`` takes
    ``r[i] + (r[i+1] - r[i]) * L[i] / (L[i] + L[i+1])`` (the midpoint for equal
    windows: 45.4 and 83.6 req/s meet at 64.5), capped at
    ``2 * min(r[i], r[i+1])`` (0 beside an idle window); the first window's
    left edge and the last one's right edge continue the line through their
    window's centre at its own rate. The centre is
    ``2 r - (left + right) / 2`` so the window holds ``L * r`` requests (module
    docstring). Both windows read the same boundary value: the curve is
    continuous, and every knot lies in ``[0, 2 r]`` of its window.
    """
    line = rate_rps[:-1] + (rate_rps[1:] - rate_rps[:-1]) * length_s[:-1] / (length_s[:-1] + length_s[1:])
    boundary = np.minimum(line, 2.0 * np.minimum(rate_rps[:-1], rate_rps[1:]))
    # The outer edges continue the line from the inner boundary through the window's mean at its
    # centre (2 r - boundary, in [0, 2 r] by the cap): holding them at r instead would force a dip
    # in the middle, 100 -> 78.75 -> 142.5 req/s for a first window of 100 before one of 185.
    first = 2.0 * rate_rps[:1] - boundary[:1] if boundary.size else rate_rps[:1]
    last = 2.0 * rate_rps[-1:] - boundary[-1:] if boundary.size else rate_rps[-1:]
    left = np.concatenate([first, boundary])
    right = np.concatenate([boundary, last])
    # >= 0 by the cap; the max() only absorbs a rounding of -1e-16.
    centre = np.maximum(2.0 * rate_rps - (left + right) / 2.0, 0.0)
    return left, centre, right


def _invert_linear(u: FloatArray, rate0_rps: float, slope_rps2: float) -> FloatArray:
    """Time ``tau`` where ``rate0 * tau + slope * tau**2 / 2`` reaches ``u``.

    Written as ``2u / (r0 + sqrt(r0**2 + 2 s u))`` so that a flat piece
    (``s = 0``: ``u / r0``) and a piece rising from zero (``r0 = 0``:
    ``sqrt(2u / s)``) need no special case and nothing cancels.
    """
    root = np.sqrt(np.maximum(rate0_rps * rate0_rps + 2.0 * slope_rps2 * u, 0.0))
    denom = rate0_rps + root
    safe = np.where(denom > 0.0, denom, 1.0)
    return np.asarray(np.where(denom > 0.0, 2.0 * u / safe, 0.0), dtype=np.float64)


def _generate_window_smooth(
    rng: np.random.Generator,
    rates_rps: tuple[float, float, float],
    window_start_s: float,
    window_s: float,
    family: str,
    shape: float,
) -> FloatArray:
    """Arrivals of one window whose rate goes linearly left edge -> centre -> right edge.

    Time rescaling (module docstring): unit-rate renewal points on the window's
    integrated rate, each mapped back through the inverse of that integral.
    """
    left, centre, right = rates_rps
    half_s = window_s / 2.0
    first_half = half_s * (left + centre) / 2.0
    total = first_half + half_s * (centre + right) / 2.0
    sampler = unit_iat_sampler(family or "exponential", shape)
    cv_hint = 1.0 / math.sqrt(shape) if family == "gamma" else 3.0 if family == "weibull" else 1.0
    u = renewal_arrivals(total, sampler, rng, cv_hint=cv_hint)
    early = u < first_half
    t = np.empty_like(u)
    t[early] = _invert_linear(u[early], left, (centre - left) / half_s)
    t[~early] = half_s + _invert_linear(u[~early] - first_half, centre, (right - centre) / half_s)
    # Rounding can put the last point a hair past the end; the window stays half-open.
    return window_start_s + np.minimum(t, np.nextafter(window_s, 0.0))


def _collect(
    pieces_t: list[FloatArray],
    pieces_in: list[IntArray],
    pieces_out: list[IntArray],
    rng: np.random.Generator,
    arrivals_s: FloatArray,
    lengths: LengthModel,
    start_s: float,
    end_s: float,
) -> None:
    inp, out = lengths.sample(arrivals_s.size, rng)
    keep = (arrivals_s >= start_s) & (arrivals_s < end_s)
    pieces_t.append(arrivals_s[keep])
    pieces_in.append(inp[keep])
    pieces_out.append(out[keep])


def load_servegen(
    path: str | Path,
    *,
    seed: int = 0,
    start_s: float = 0.0,
    duration_s: float | None = None,
    name: str | None = None,
    lengths: LengthModel | None = None,
    input_mean: float | None = None,
    output_mean: float | None = None,
    cv: float = 1.0,
    max_requests: int = DEFAULT_MAX_REQUESTS,
    max_span_s: float | None = None,
    rate_shape: str = "smooth",
) -> Workload:
    """Generate a Workload from ServeGen rate files (see the module docstring).

    Args:
        path: Directory of ``chunk-N-trace.csv``, one such file, or a
            ``*_total_rate_10min.csv`` file.
        seed: Root seed; same seed and span -> same Workload.
        start_s, duration_s: Span of the file to generate, seconds from its
            first window start (default: all of it, subject to ``max_requests``).
        name: Workload name (default: the file or directory name).
        lengths: Length model; default lognormal (sigma 1.0) with ``input_mean``
            / ``output_mean`` tokens, themselves defaulting to 914 / 155
            (m-large) or 120 / 15 when the path mentions ``m-small``.
        cv: Total-rate files only: inter-arrival CV within a window.
        max_requests: ConfigError when the expected count exceeds it.
        max_span_s: TraceFormatError when the windows with traffic in the span
            cover more than this many seconds (None: no limit).
        rate_shape: ``"smooth"`` (rate linear between window centres) or
            ``"step"`` (constant per window); see the module docstring.
    """
    p = Path(path)
    if rate_shape not in RATE_SHAPES:
        raise ConfigError(f"rate_shape = {rate_shape!r}, must be one of {', '.join(RATE_SHAPES)}")
    smooth = rate_shape == "smooth"
    _io.check_regular_file(p, directory_ok=True)
    seed = check_seed(seed)
    if not (math.isfinite(cv) and cv > 0):
        raise ConfigError(f"cv = {cv}, must be a finite number > 0")
    length_model = lengths if lengths is not None else _default_lengths(p, input_mean, output_mean)
    # A headerless numeric first row, or the name chunk-N-trace.csv, is a per-client chunk, whose
    # reader names a bad field ("0,1,1,Pareto,1,1" read as a total-rate header said "column '1'
    # appears twice"); anything else is a total-rate file, whose header check names what is missing.
    chunk = p.is_dir() or is_servegen_chunk_name(p.name) or is_servegen_chunk_line(_io.first_line(p))
    if not chunk:
        return _load_total(
            p, seed, start_s, duration_s, name, length_model, cv, max_requests, max_span_s, smooth
        )
    return _load_clients(p, seed, start_s, duration_s, name, length_model, max_requests, max_span_s, smooth)


def _finish(
    p: Path,
    name: str | None,
    pieces: tuple[list[FloatArray], list[IntArray], list[IntArray]],
    meta: dict[str, object],
    start_s: float,
    end_s: float,
) -> Workload:
    arrival_s = np.concatenate(pieces[0]) if pieces[0] else np.empty(0)
    if arrival_s.size == 0:
        raise TraceFormatError(
            f"trace has no requests in [{start_s:g}, {end_s:g}) s (all windows idle)", path=str(p)
        )
    workload_name = name or (p.name if p.is_dir() else p.stem)
    meta["first_arrival_offset_s"] = float(arrival_s.min()) - start_s
    return Workload.from_arrays(
        workload_name, arrival_s, np.concatenate(pieces[1]), np.concatenate(pieces[2]), meta
    )


def _load_clients(
    p: Path,
    seed: int,
    start_s: float,
    duration_s: float | None,
    name: str | None,
    lengths: LengthModel,
    max_requests: int,
    max_span_s: float | None,
    smooth: bool,
) -> Workload:
    clients = [_read_chunk(path, key) for key, path in _chunk_files(p)]
    trace_end_s = max(float(c.start_s[-1] + c.length_s[-1]) for c in clients)
    trace_start_s = min(float(c.start_s[0]) for c in clients)
    lo_s, hi_s = _span(start_s, duration_s, trace_start_s, trace_end_s, p)
    expected = 0.0
    plan: list[tuple[_Client, int]] = []
    edges: list[_Active] = []
    fallback = 0
    knots: dict[int, tuple[FloatArray, FloatArray, FloatArray]] = {}
    for client in clients:
        overlap_s = np.minimum(client.start_s + client.length_s, hi_s) - np.maximum(client.start_s, lo_s)
        active = np.flatnonzero((overlap_s > 0) & (client.rate_rps > 0))
        # Both shapes keep each window's count, so the budget is the same (pro rata for a
        # window the span cuts).
        expected += float(np.sum(client.rate_rps[active] * overlap_s[active]))
        if smooth:
            knots[client.key] = smooth_knots(client.length_s, client.rate_rps)
        plan.extend((client, int(i)) for i in active)
        fallback += sum(1 for i in active if not client.family[i])
        if active.size:
            # The span of the traffic is set by each client's first and last active window.
            edges.extend(_active_window(client, int(i)) for i in (active[0], active[-1]))
    _check_active_span(edges, lo_s, hi_s, max_span_s)
    _check_budget(expected, max_requests, p, lo_s, hi_s)
    pieces: tuple[list[FloatArray], list[IntArray], list[IntArray]] = ([], [], [])
    for client, i in plan:
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(client.key, i)))
        if smooth:
            left, centre, right = knots[client.key]
            arrivals_s = _generate_window_smooth(
                rng,
                (float(left[i]), float(centre[i]), float(right[i])),
                float(client.start_s[i]),
                float(client.length_s[i]),
                client.family[i],
                float(client.shape[i]),
            )
        else:
            arrivals_s = _generate_window(
                rng,
                float(client.rate_rps[i]),
                float(client.start_s[i]),
                float(client.length_s[i]),
                client.family[i],
                float(client.shape[i]),
            )
        _collect(*pieces, rng, arrivals_s, lengths, lo_s, hi_s)
    meta: dict[str, object] = {
        "format": "servegen",
        "layout": "clients",
        "path": str(p),
        "clients": len(clients),
        "rows": sum(int(c.start_s.size) for c in clients),
        "seed": seed,
        "sorted": False,
        "start_s": lo_s - trace_start_s,
        "duration_s": hi_s - lo_s,
        "expected_requests": round(expected, 1),
        "active_windows": len(plan),
        "poisson_fallback_windows": fallback,
        "iat_scale": "rate-matched: family shape kept, scale set so mean inter-arrival = 1/rate_rps",
        "rate_shape": "smooth" if smooth else "step",
        "lengths": lengths.describe(),
    }
    return _finish(p, name, pieces, meta, lo_s, hi_s)


def _load_total(
    p: Path,
    seed: int,
    start_s: float,
    duration_s: float | None,
    name: str | None,
    lengths: LengthModel,
    cv: float,
    max_requests: int,
    max_span_s: float | None,
    smooth: bool,
) -> Workload:
    table = _io.parse_table(_io.read_text(p), str(p), _TOTAL_FIELDS)
    starts = _io.parse_float_column(
        table, "window_start_s", what="time in seconds", max_abs=MAX_ABS_TIME_S, unit="s"
    )
    rates = _io.parse_float_column(table, "total_rate_rps", what="rate")
    negative = np.flatnonzero(rates < 0)
    if negative.size:
        i = int(negative[0])
        raise table.error(
            f"negative rate: {table.columns['total_rate_rps'][i]!r}", row=i, field="total_rate_rps"
        )
    window_s = _window_lengths(starts, table, "window_start_s")
    trace_start_s = float(starts[0])
    lo_s, hi_s = _span(start_s, duration_s, trace_start_s, float(starts[-1] + window_s[-1]), p)
    overlap_s = np.minimum(starts + window_s, hi_s) - np.maximum(starts, lo_s)
    active = np.flatnonzero((overlap_s > 0) & (rates > 0))
    expected = float(np.sum(rates[active] * overlap_s[active]))
    left, centre, right = smooth_knots(window_s, rates)
    edges = [
        _Active(float(starts[i]), float(starts[i] + window_s[i]), str(p), int(table.lines[i]))
        for i in (active[[0, -1]].tolist() if active.size else [])
    ]
    _check_active_span(edges, lo_s, hi_s, max_span_s)
    _check_budget(expected, max_requests, p, lo_s, hi_s)
    family, shape = ("", 1.0) if cv == 1.0 else ("gamma", 1.0 / (cv * cv))
    pieces: tuple[list[FloatArray], list[IntArray], list[IntArray]] = ([], [], [])
    for i in active.tolist():
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(i,)))
        if smooth:
            arrivals_s = _generate_window_smooth(
                rng,
                (float(left[i]), float(centre[i]), float(right[i])),
                float(starts[i]),
                float(window_s[i]),
                family,
                shape,
            )
        else:
            arrivals_s = _generate_window(
                rng, float(rates[i]), float(starts[i]), float(window_s[i]), family, shape
            )
        _collect(*pieces, rng, arrivals_s, lengths, lo_s, hi_s)
    meta: dict[str, object] = {
        "format": "servegen",
        "layout": "total_rate",
        "path": str(p),
        "rows": table.num_rows,
        "seed": seed,
        "sorted": False,
        "cv": cv,
        "rate_shape": "smooth" if smooth else "step",
        "start_s": lo_s - trace_start_s,
        "duration_s": hi_s - lo_s,
        "expected_requests": round(expected, 1),
        "active_windows": int(active.size),
        "lengths": lengths.describe(),
    }
    return _finish(p, name, pieces, meta, lo_s, hi_s)
