"""Trace loaders: one function per format and :func:`load_trace` with auto-detection.

Policies shared by every loader (and recorded in ``Workload.meta``):

* Arrivals are shifted so the first request arrives at 0.0; ``meta['t0_offset_s']``
  keeps the shift in the file's own time unit converted to seconds, and the
  Azure loader also keeps the first timestamp as written (``start_timestamp``).
* Out-of-order timestamps are sorted stably (ties keep file order) and
  ``meta['sorted'] = True`` says so; in-order files get ``False``.
* A token count of 0 is raised to 1 (a request carries at least one prompt
  token, and a 0-token answer still costs a prefill and one decode step);
  ``meta['clamped_rows']`` counts the rows touched. Negative, fractional or
  non-numeric counts are errors. Exception: BurstGPT marks *failed* requests
  with 0 response tokens; those rows are skipped and counted in
  ``meta['skipped_rows']`` instead.
* Any problem with the input raises :class:`~llmscale.errors.TraceFormatError`
  naming the file, the 1-based line and the field.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from llmscale.documents import no_duplicate_keys
from llmscale.errors import ConfigError, TraceFormatError
from llmscale.workloads import _io
from llmscale.workloads.lengths import LengthModel
from llmscale.workloads.limits import MAX_ABS_TIME_S, describe_span
from llmscale.workloads.model import Workload
from llmscale.workloads.servegen import (
    DEFAULT_MAX_REQUESTS,
    is_servegen_chunk_line,
    is_servegen_chunk_name,
    load_servegen,
)
from llmscale.workloads.transform import window

__all__ = [
    "FORMATS",
    "detect_format",
    "load_azure",
    "load_burstgpt",
    "load_csv",
    "load_mooncake",
    "load_trace",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
PathLike = str | os.PathLike[str]

FORMATS: Final[dict[str, str]] = {
    "azure": "Azure LLM inference trace CSV: TIMESTAMP,ContextTokens,GeneratedTokens",
    "mooncake": "Mooncake JSONL: timestamp (ms), input_length, output_length, hash_ids",
    "burstgpt": "BurstGPT CSV: Timestamp,Model,Request tokens,Response tokens,...; failed rows skipped",
    "servegen": "ServeGen per-client rates (dir or chunk-N-trace.csv) or *_total_rate_10min.csv; seeded",
    "csv": "plain CSV: arrival_s,input_tokens,output_tokens",
}

_SUPPORTED = ", ".join(f"{name} ({desc})" for name, desc in FORMATS.items())


def _trace_name(path: Path) -> str:
    name = path.name
    if name.endswith(".gz"):
        name = name[:-3]
    return Path(name).stem if Path(name).suffix else name


def _clamp_zero_tokens(inp: IntArray, out: IntArray) -> tuple[IntArray, IntArray, int]:
    zero = (inp == 0) | (out == 0)
    clamped = int(zero.sum())
    if clamped:
        inp = np.maximum(inp, 1)
        out = np.maximum(out, 1)
    return inp, out, clamped


@dataclass(frozen=True)
class _Span:
    """The part of a trace to keep, and the longest span a replay of it may cover."""

    start_s: float | None = None
    duration_s: float | None = None
    max_span_s: float | None = None

    @property
    def windowed(self) -> bool:
        return self.start_s is not None or self.duration_s is not None


def _check_span(path: Path, arrival_s: FloatArray, lines: IntArray, field: str, span: _Span) -> None:
    """Refuse a (windowed) trace whose requests span more than ``span.max_span_s``.

    Names the line of the last request kept and the line of the first: a stray row years
    away from the rest is the usual cause (a two-row trace spanning 1e9 s replayed for hours).
    """
    if span.max_span_s is None or arrival_s.size == 0:
        return
    t = arrival_s - float(arrival_s.min())
    lo_s = span.start_s or 0.0
    hi_s = math.inf if span.duration_s is None else lo_s + span.duration_s
    kept = np.flatnonzero((t >= lo_s) & (t < hi_s))
    if kept.size == 0:
        return  # an empty window: window() says so, with the trace's span
    first = int(kept[np.argmin(t[kept])])
    last = int(kept[np.argmax(t[kept])])
    span_s = float(t[last] - t[first])
    if span_s > span.max_span_s:
        raise TraceFormatError(
            f"the requests span {describe_span(span_s)}, from line {int(lines[first])} to this one; "
            f"a replay covers at most {describe_span(span.max_span_s)}: cut a window with "
            "start_s / duration_s (--start-s / --duration-s)",
            path=str(path),
            line=int(lines[last]),
            field=field,
        )


def _finish(
    path: Path,
    fmt: str,
    arrival_s: FloatArray,
    inp: IntArray,
    out: IntArray,
    meta: dict[str, object],
    name: str | None,
    *,
    lines: IntArray,
    time_field: str,
    span: _Span,
) -> Workload:
    if arrival_s.size == 0:
        raise TraceFormatError("trace has no requests", path=str(path))
    _check_span(path, arrival_s, lines, time_field, span)
    inp, out, clamped = _clamp_zero_tokens(inp, out)
    base: dict[str, object] = {"format": fmt, "path": str(path), "clamped_rows": clamped}
    base.update(meta)
    w = Workload.from_arrays(name or _trace_name(path), arrival_s, inp, out, base)
    if not span.windowed:
        return w
    return window(w, span.start_s or 0.0, math.inf if span.duration_s is None else span.duration_s)


def load_azure(
    path: PathLike,
    *,
    name: str | None = None,
    start_s: float | None = None,
    duration_s: float | None = None,
    max_span_s: float | None = None,
) -> Workload:
    """Azure LLM inference trace (``TIMESTAMP,ContextTokens,GeneratedTokens``).

    ``TIMESTAMP`` is a wall-clock string such as ``2023-11-16 18:17:03.9799600``
    (7 fractional digits; a UTC offset such as ``+00:00`` is accepted when every row has the
    same one: mixed zones are refused), or a plain number of
    seconds (Unix epoch seconds) in every row, marked ``meta['timestamps'] = "epoch seconds"``.
    The 19,366-row conversation trace loads in about 15 ms, a million rows in about 0.9 s (0.8 s
    without the year-range and bare-number checks; best of 3, same machine and minute).
    ``start_s`` / ``duration_s`` / ``max_span_s``: see :func:`load_trace`.
    """
    p = Path(path)
    table = _io.parse_table(_io.read_text(p), str(p), ["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
    arrival_s = _io.parse_datetime_column(table, "TIMESTAMP")
    inp = _io.parse_token_column(table, "ContextTokens")
    out = _io.parse_token_column(table, "GeneratedTokens")
    first = int(np.argmin(arrival_s))
    meta: dict[str, object] = {
        "rows": table.num_rows,
        "start_timestamp": _io.datetime_label(table, "TIMESTAMP", first),
    }
    if _io.is_epoch_seconds(table, "TIMESTAMP"):
        meta["timestamps"] = "epoch seconds"
    span = _Span(start_s, duration_s, max_span_s)
    return _finish(
        p, "azure", arrival_s, inp, out, meta, name, lines=table.lines, time_field="TIMESTAMP", span=span
    )


def load_burstgpt(
    path: PathLike,
    *,
    name: str | None = None,
    start_s: float | None = None,
    duration_s: float | None = None,
    max_span_s: float | None = None,
) -> Workload:
    """BurstGPT CSV (``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``).

    ``Timestamp`` is seconds (float) from the trace start. Rows with 0
    ``Response tokens`` are failed requests in BurstGPT: they are dropped and
    counted in ``meta['skipped_rows']``. ``meta['models']`` counts the kept
    rows per ``Model`` when that column is present.
    """
    p = Path(path)
    table = _io.parse_table(
        _io.read_text(p), str(p), ["Timestamp", "Request tokens", "Response tokens"], optional=["Model"]
    )
    arrival_s = _io.parse_float_column(
        table, "Timestamp", what="timestamp in seconds", max_abs=MAX_ABS_TIME_S, unit="s"
    )
    inp = _io.parse_token_column(table, "Request tokens")
    out = _io.parse_token_column(table, "Response tokens")
    ok = out > 0
    skipped = int(table.num_rows - int(ok.sum()))
    meta: dict[str, object] = {"rows": table.num_rows, "skipped_rows": skipped}
    if "Model" in table.columns:
        kept = [m for m, keep in zip(table.columns["Model"], ok.tolist(), strict=True) if keep]
        meta["models"] = dict(sorted(Counter(m.strip() for m in kept).items()))
    if not ok.any():
        raise TraceFormatError(
            f"trace has no requests: all {table.num_rows} rows have 0 response tokens (failed requests)",
            path=str(p),
        )
    span = _Span(start_s, duration_s, max_span_s)
    return _finish(
        p,
        "burstgpt",
        arrival_s[ok],
        inp[ok],
        out[ok],
        meta,
        name,
        lines=table.lines[ok],
        time_field="Timestamp",
        span=span,
    )


def load_csv(
    path: PathLike,
    *,
    name: str | None = None,
    start_s: float | None = None,
    duration_s: float | None = None,
    max_span_s: float | None = None,
) -> Workload:
    """Plain CSV with a header ``arrival_s,input_tokens,output_tokens`` (extra columns ignored)."""
    p = Path(path)
    table = _io.parse_table(_io.read_text(p), str(p), ["arrival_s", "input_tokens", "output_tokens"])
    arrival_s = _io.parse_float_column(
        table, "arrival_s", what="time in seconds", max_abs=MAX_ABS_TIME_S, unit="s"
    )
    inp = _io.parse_token_column(table, "input_tokens")
    out = _io.parse_token_column(table, "output_tokens")
    span = _Span(start_s, duration_s, max_span_s)
    meta: dict[str, object] = {"rows": table.num_rows}
    return _finish(
        p, "csv", arrival_s, inp, out, meta, name, lines=table.lines, time_field="arrival_s", span=span
    )


_MOONCAKE_FIELDS: Final = ("timestamp", "input_length", "output_length")
#: hash ids outside int64 leave the prefix-reuse statistic out (they are provenance, not load)
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def _is_int64(value: object) -> bool:
    return type(value) is int and _INT64_MIN <= value <= _INT64_MAX


def _json_refusal(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc)


def _json_kind(value: object) -> str:
    """How JSON spelled ``value``: the user wrote JSON, not Python."""
    kinds = {bool: "boolean", str: "string", type(None): "null", list: "array", dict: "object"}
    return kinds.get(type(value), type(value).__name__)


def _number_column(
    values: list[object], table: _io.Table, field: str, what: str, max_abs: float | None = None
) -> FloatArray:
    """JSON numbers as float64, each within ``+-max_abs`` when given.

    ``true`` and ``"100"`` are not numbers: json gives bool and str, which numpy would
    quietly read as 1.0 and 100.0.
    """
    if not set(map(type, values)) <= {int, float}:
        for i, value in enumerate(values):
            if type(value) not in (int, float):
                kind = _json_kind(value)
                shown = json.dumps(value)[:40]
                raise table.error(f"not a {what}: {shown} is a JSON {kind}", row=i, field=field)
    try:
        arr = np.array(values, dtype=np.float64)
    except OverflowError:
        # JSON integers have no size limit; one beyond float64's 1.8e308 is no count or time.
        i = next(i for i, v in enumerate(values) if not -1e308 < v < 1e308)  # type: ignore[operator]
        raise table.error(f"not a finite {what}: {values[i]!r}", row=i, field=field) from None
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        i = int(bad[0])
        raise table.error(f"not a finite {what}: {values[i]!r}", row=i, field=field)
    if max_abs is not None:
        _io.check_magnitude(arr, values, table, field, what=what, max_abs=max_abs)
    return arr


def _prefix_reuse_share(ids: list[int], blocks_per_row: list[int]) -> float | None:
    """Share of 512-token prefix blocks whose hash id appeared in an earlier request."""
    if not ids:
        return None
    id_arr = np.asarray(ids, dtype=np.int64)
    row_of = np.repeat(np.arange(len(blocks_per_row)), blocks_per_row)
    _, first_pos, inverse = np.unique(id_arr, return_index=True, return_inverse=True)
    first_row = row_of[first_pos][inverse]
    return round(float(np.mean(first_row < row_of)), 6)


def load_mooncake(
    path: PathLike,
    *,
    name: str | None = None,
    start_s: float | None = None,
    duration_s: float | None = None,
    max_span_s: float | None = None,
) -> Workload:
    """Mooncake JSONL: one object a line with ``timestamp`` (ms), ``input_length``, ``output_length``.

    ``hash_ids`` (512-token prefix blocks; equal ids = shared prefix) stay out
    of the Workload arrays; ``meta['prefix_reuse_share']`` records the share of
    blocks already seen in an earlier request (0.64 for the FAST'25 synthetic trace).
    """
    p = Path(path)
    where = str(p)
    text = _io.read_text(p)
    values: dict[str, list[object]] = {key: [] for key in _MOONCAKE_FIELDS}
    line_numbers: list[int] = []
    hash_ids: list[int] = []
    blocks_per_row: list[int] = []
    has_hashes = True
    for line_no, line in enumerate(_io.split_lines(text), start=1):
        if not line.strip():
            continue
        try:
            # a repeated key is refused as in every other document (llmscale.documents): json keeps
            # the last, so {"timestamp": 0, "timestamp": 9000} was silently read as 9 s
            obj = json.loads(line, object_pairs_hook=no_duplicate_keys)
        except json.JSONDecodeError as exc:
            raise TraceFormatError(
                f"invalid JSON: {exc.msg} (column {exc.colno})", path=where, line=line_no
            ) from None
        except (ValueError, RecursionError) as exc:
            # ValueError: an integer of more than 4,300 digits, or a repeated key; RecursionError:
            # arrays nested thousands deep. None is a request.
            raise TraceFormatError(f"invalid JSON: {_json_refusal(exc)}", path=where, line=line_no) from None
        if not isinstance(obj, dict):
            raise TraceFormatError(
                f"expected a JSON object, got {type(obj).__name__}", path=where, line=line_no
            )
        for key in _MOONCAKE_FIELDS:
            if key not in obj:
                raise TraceFormatError(f"missing field {key!r}", path=where, line=line_no, field=key)
            values[key].append(obj[key])
        line_numbers.append(line_no)
        ids = obj.get("hash_ids")
        if has_hashes and isinstance(ids, list) and all(_is_int64(h) for h in ids):
            hash_ids.extend(ids)
            blocks_per_row.append(len(ids))
        else:
            has_hashes = False
    if not line_numbers:
        raise TraceFormatError("trace has no requests", path=where)
    table = _io.Table(path=where, columns={}, lines=np.asarray(line_numbers, dtype=np.int64))
    stamp_ms = _number_column(
        values["timestamp"], table, "timestamp", "timestamp in milliseconds", max_abs=1000.0 * MAX_ABS_TIME_S
    )
    inp_f = _number_column(values["input_length"], table, "input_length", "token count")
    out_f = _number_column(values["output_length"], table, "output_length", "token count")
    inp = _io.check_token_counts(inp_f, values["input_length"], table, "input_length")
    out = _io.check_token_counts(out_f, values["output_length"], table, "output_length")
    meta: dict[str, object] = {"rows": table.num_rows}
    if has_hashes:
        meta["prefix_reuse_share"] = _prefix_reuse_share(hash_ids, blocks_per_row)
        meta["prefix_block_tokens"] = 512
    span = _Span(start_s, duration_s, max_span_s)
    return _finish(
        p,
        "mooncake",
        stamp_ms / 1000.0,
        inp,
        out,
        meta,
        name,
        lines=table.lines,
        time_field="timestamp",
        span=span,
    )


def detect_format(path: PathLike) -> str:
    """Format name (a key of :data:`FORMATS`) from the extension and the first line.

    Raises TraceFormatError for a missing path, an empty file or an unknown layout.
    """
    p = Path(path)
    _io.check_regular_file(p, directory_ok=True)
    if p.is_dir():
        if any(p.glob("chunk-*-trace.csv")):
            return "servegen"
        raise TraceFormatError(
            f"directory has no ServeGen chunk-N-trace.csv files; supported formats: {_SUPPORTED}", path=str(p)
        )
    head = _io.first_line(p)
    if not head:
        raise TraceFormatError("empty file: trace has no requests", path=str(p))
    lower_name = p.name.lower().removesuffix(".gz")
    if lower_name.endswith((".jsonl", ".json", ".ndjson")) or head.startswith("{"):
        try:
            obj = json.loads(head)
        except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
            # Not JSON as sniffed: a first line longer than the 64 KiB sniffed (a valid request with
            # ~10,000 hash_ids) is cut, and a line with a stray comma is no JSON at all. The JSONL
            # reader reads every line whole and names the line and column of what is wrong, where
            # "no 'timestamp' fields" sent the user looking for fields that are there.
            return "mooncake"
        if isinstance(obj, dict) and {"timestamp", "input_length"} <= obj.keys():
            return "mooncake"
        raise TraceFormatError(
            f"JSON lines without 'timestamp'/'input_length' fields; supported formats: {_SUPPORTED}",
            path=str(p),
            line=1,
        )
    columns = [c.strip().strip('"').lower() for c in head.split(",")]
    names = set(columns)
    if {"timestamp", "contexttokens", "generatedtokens"} <= names:
        return "azure"
    if {"timestamp", "request tokens", "response tokens"} <= names:
        return "burstgpt"
    if {"window_start_s", "total_rate_rps"} <= names:
        return "servegen"
    if {"arrival_s", "input_tokens", "output_tokens"} <= names:
        return "csv"
    if is_servegen_chunk_line(head) or is_servegen_chunk_name(lower_name):
        return "servegen"
    raise TraceFormatError(
        f"unrecognised trace format (first line {head[:80]!r}); supported formats: {_SUPPORTED}",
        path=str(p),
        line=1,
    )


def load_trace(
    path: PathLike,
    fmt: str = "auto",
    *,
    seed: int = 0,
    start_s: float | None = None,
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
    """Load a request trace in any supported format (see :data:`FORMATS`).

    Args:
        path: File, or directory of ServeGen ``chunk-N-trace.csv`` files.
        fmt: ``"auto"`` (detect from extension and header) or a FORMATS key.
        seed: Seed for formats that generate arrivals (ServeGen); same seed,
            same window -> same Workload.
        start_s, duration_s: Keep only ``[start_s, start_s + duration_s)``
            seconds of the trace (relative to its first request; for ServeGen,
            to its first window), re-based so the first kept request is at 0.
            For ServeGen only that span is generated.
        name: Workload name; default is the file name without extension.
        lengths, input_mean, output_mean: ServeGen only (its files carry no
            lengths): a length model, or the mean prompt / output tokens of a
            lognormal (sigma 1.0). Defaults: 914 / 155 tokens, or 120 / 15 for
            files whose path mentions ``m-small`` (ServeGen's rate-weighted means).
        cv: ServeGen total-rate files only: inter-arrival CV of the gamma
            process drawn per window (1.0 = Poisson).
        max_requests: ServeGen only: refuse (ConfigError) to generate more than
            this many requests; the 14-day m-large file at 196 req/s would be
            237 million.
        max_span_s: Refuse (TraceFormatError, naming the line of the last
            request kept) a trace whose kept requests span longer than this,
            seconds; None: no limit. The CLI passes
            :data:`~llmscale.workloads.limits.MAX_SPAN_S` (31 days).
        rate_shape: ServeGen only: ``"smooth"`` (rate linear between window
            centres) or ``"step"`` (constant per 10-minute window); see
            :mod:`llmscale.workloads.servegen`.

    Raises:
        TraceFormatError: unknown format, missing file or malformed content.
        ConfigError: invalid window or generation parameters.
    """
    p = Path(path)
    if fmt == "auto":
        fmt = detect_format(p)
    elif fmt not in FORMATS:
        raise TraceFormatError(f"unknown trace format {fmt!r}; supported formats: {_SUPPORTED}", path=str(p))
    if fmt == "servegen":
        return load_servegen(
            p,
            seed=seed,
            start_s=start_s or 0.0,
            duration_s=duration_s,
            name=name,
            lengths=lengths,
            input_mean=input_mean,
            output_mean=output_mean,
            cv=cv,
            max_requests=max_requests,
            max_span_s=max_span_s,
            rate_shape=rate_shape,
        )
    if lengths is not None or input_mean is not None or output_mean is not None:
        raise ConfigError(
            f"lengths / input_mean / output_mean apply to servegen traces only; {fmt} has its own lengths"
        )
    loaders = {"azure": load_azure, "mooncake": load_mooncake, "burstgpt": load_burstgpt, "csv": load_csv}
    return loaders[fmt](p, name=name, start_s=start_s, duration_s=duration_s, max_span_s=max_span_s)
