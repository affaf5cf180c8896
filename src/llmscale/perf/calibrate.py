"""``llmscale calibrate``: fit a calibration profile to a user's own engine measurements.

Three kinds of input, each turned into *targets*: a measured time and a function that predicts
it from a :class:`~llmscale.perf.PerfModel`.

* **Closed batches** (CSV): ``model,gpu,tp,input_tokens,output_tokens,batch_size,latency_s
  [,ttft_s]``, what ``vllm bench latency`` measures; the shared Argonne file's columns
  (``Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,Latency``) are
  read too. Each row is replayed on the simulator (:mod:`llmscale.perf.closed_batch`) with the
  engine settings given, and its latency predicted from that schedule.
* **A ``vllm bench serve --save-result`` JSON**: per request ``input_lens``, ``output_lens``,
  ``ttfts`` and ``itls`` (seconds). The run's mean concurrency follows from Little's law
  (the sum of request latencies over the run's ``duration``), and the median inter-token
  latency is predicted as a decode step of that many sequences at the mean context.
* **A live fleet** through Prometheus: over ``--start``..``--end``, the fleet's mean
  inter-token latency (``vllm:time_per_output_token_seconds`` rate of sum over rate of count)
  against its mean running batch (``vllm:num_requests_running``) and context, one target per
  step.

The four factors of :mod:`llmscale.perf.profile` are fitted by bounded least squares on the log
ratio predicted / measured, with a weak prior that keeps a factor the data cannot see at 1
(``comm`` without TP > 1 rows, ``compute`` without prefill-heavy rows).
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from llmscale.errors import ConfigError, TraceFormatError
from llmscale.perf.closed_batch import EngineSettings
from llmscale.perf.coefficients import PerfCoefficients, load_coefficients
from llmscale.perf.profile import (
    FACTOR_NAMES,
    FACTOR_RANGE,
    CalibrationProfile,
    PointError,
    scale_coefficients,
)

__all__ = ["Target", "calibrate", "read_closed_batches", "read_prometheus", "read_serve_result"]

#: Weight of the prior log(factor) = 0 against one target's log error: a factor the data do not
#: pull stays at 1, and one they do barely feels it (a 2x factor weighs as much as a 1.4% error
#: on one point).
_PRIOR_WEIGHT = 0.02
_ROBUST_SCALE = 0.1


@dataclass(frozen=True)
class Target:
    """One measured time (s) and how to predict it from a PerfModel of ``model`` on ``tp`` x ``gpu``."""

    label: str
    model: str
    gpu: str
    tp: int
    measured_s: float
    predict: Callable[[Any], float] = field(repr=False)
    #: False: reported with its error but not fitted (a held-out check)
    fit: bool = True
    #: what the target exercises, for the prior: "prefill", "decode" or "mixed"
    kind: str = "mixed"


def _where(path: Path, line: int, column: str) -> str:
    return f"{path}:{line}: {column}"


def _pos_int(v: str, path: Path, line: int, column: str, hi: int = 10_000_000) -> int:
    try:
        x = int(v)
    except (TypeError, ValueError):
        raise TraceFormatError(f"{_where(path, line, column)} = {v!r}, must be an integer") from None
    if not 1 <= x <= hi:
        raise TraceFormatError(f"{_where(path, line, column)} = {x}, must be in [1, {hi}]")
    return x


def _pos_float(v: str, path: Path, line: int, column: str) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise TraceFormatError(f"{_where(path, line, column)} = {v!r}, must be a number") from None
    if not math.isfinite(x) or x <= 0:
        raise TraceFormatError(f"{_where(path, line, column)} = {v!r}, must be a finite number > 0")
    return x


def _engine_for(engine: EngineSettings, model: str) -> EngineSettings:
    """``engine``, with vLLM V0's budget rule for ``model`` when the budget is left to it (0).

    Without chunked prefill vLLM V0 sets max_num_batched_tokens = max(max_model_len, 2048), so
    each model of a file gets its own: Llama-2-7B 4,096, Mistral-7B 32,768.
    """
    if engine.max_num_batched_tokens > 0:
        return engine
    from llmscale.perf.catalogue import get_model

    v0 = EngineSettings.vllm_v0(get_model(model).max_context_tokens)
    return EngineSettings(
        max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=v0.max_num_batched_tokens,
        chunked_prefill=engine.chunked_prefill,
        gpu_memory_utilization=engine.gpu_memory_utilization,
    )


_ARGONNE_GPUS = {"nvidia a100 gpu": "a100-40gb", "nvidia h100 gpu": "h100-80gb", "nvidia gh200 gpu": "gh200"}


def read_closed_batches(
    path: Path,
    *,
    model: str | None,
    gpu: str | None,
    tp: int | None,
    framework: str | None,
    engine: EngineSettings,
    hold_out_lengths: Sequence[int] = (),
) -> list[Target]:
    """Targets from a closed-batch CSV (ours or the Argonne columns); errors name the file, line and column.

    ``model``/``gpu``/``tp`` fill columns the file lacks and filter rows when it has them.
    """
    import io

    from llmscale.edge import MAX_DOCUMENT_BYTES, InputFileError, read_input_text
    from llmscale.perf.catalogue import get_gpu, get_model
    from llmscale.perf.closed_batch import schedule

    try:
        # read_input_text drops a UTF-8 BOM: a spreadsheet's made the first column "\ufeffmodel",
        # and the file was refused for a missing column it has; FIFOs and binary files are refused
        fh = io.StringIO(read_input_text(path, MAX_DOCUMENT_BYTES, what="a CSV file"), newline="")
    except InputFileError as exc:
        raise TraceFormatError(f"{exc.path}: cannot read: {exc.problem}") from exc
    with fh:
        reader = csv.DictReader(fh)
        cols = [c.strip() for c in (reader.fieldnames or [])]
        argonne = "Input Output Length" in cols
        need = (
            ("Model", "Input Output Length", "Batch Size", "Latency")
            if argonne
            else ("input_tokens", "output_tokens", "batch_size", "latency_s")
        )
        missing = [c for c in need if c not in cols]
        if missing:
            raise TraceFormatError(
                f"{path}:1: missing column(s) {', '.join(missing)}; expected "
                "model,gpu,tp,input_tokens,output_tokens,batch_size,latency_s[,ttft_s] "
                "(model/gpu/tp may come from --model/--gpu/--tp) or the Argonne columns"
            )
        frameworks: set[str] = set()
        rows: list[tuple[int, dict[str, str]]] = []
        for i, raw in enumerate(reader, start=2):
            row = {k.strip(): (v or "").strip() for k, v in raw.items() if k is not None}
            if argonne:
                fw = row.get("Framework", "")
                if framework is None:
                    frameworks.add(fw)
                elif fw.lower() != framework.lower():
                    continue
            rows.append((i, row))
        if argonne and framework is None and len(frameworks) > 1:
            raise ConfigError(
                f"{path}: rows of several engines ({', '.join(sorted(frameworks))}): "
                "choose one with --framework"
            )
    want_model = get_model(model).name if model else None
    want_gpu = get_gpu(gpu).name if gpu else None
    targets: list[Target] = []
    schedules: dict[tuple[str, str, int, int, int, int], Any] = {}
    for line, row in rows:
        if argonne:
            m_raw, g_raw, tp_raw = row["Model"], row.get("Hardware", ""), row.get("Num of Hardware", "")
            n_in = n_out = _pos_int(row["Input Output Length"], path, line, "Input Output Length")
            batch = _pos_int(row["Batch Size"], path, line, "Batch Size", 100_000)
            latency = _pos_float(row["Latency"], path, line, "Latency")
            ttft = None
            g_name = _ARGONNE_GPUS.get(g_raw.lower(), g_raw) if g_raw else None
        else:
            m_raw, g_name, tp_raw = row.get("model", ""), row.get("gpu") or None, row.get("tp", "")
            n_in = _pos_int(row["input_tokens"], path, line, "input_tokens")
            n_out = _pos_int(row["output_tokens"], path, line, "output_tokens")
            batch = _pos_int(row["batch_size"], path, line, "batch_size", 100_000)
            latency = _pos_float(row["latency_s"], path, line, "latency_s")
            ttft = _pos_float(row["ttft_s"], path, line, "ttft_s") if row.get("ttft_s") else None
        try:
            row_model = get_model(m_raw).name if m_raw else want_model
            row_gpu = get_gpu(g_name).name if g_name else want_gpu
        except ConfigError as exc:
            if want_model is not None or want_gpu is not None:
                continue  # another model's or GPU's row, filtered out anyway
            raise TraceFormatError(f"{path}:{line}: {exc}") from exc
        row_tp = _pos_int(tp_raw, path, line, "tp", 8) if tp_raw else tp
        if row_model is None or row_gpu is None or row_tp is None:
            raise TraceFormatError(
                f"{path}:{line}: the row does not say its model, gpu and tp: give --model, --gpu and --tp"
            )
        if (want_model and row_model != want_model) or (want_gpu and row_gpu != want_gpu):
            continue
        if tp is not None and tp_raw and row_tp != tp:
            continue
        # A run that finished faster than 1 ms per output token did not run (broken rows exist).
        if latency < n_out * 1e-3:
            continue
        key = (row_model, row_gpu, row_tp, n_in, n_out, batch)
        row_engine = _engine_for(engine, row_model)
        if key not in schedules:
            try:
                schedules[key] = schedule(row_model, row_gpu, row_tp, n_in, n_out, batch, row_engine)
            except ConfigError as exc:
                raise TraceFormatError(f"{path}:{line}: {exc}") from exc
        sched = schedules[key]
        label = f"{row_model}/{row_gpu}/tp{row_tp} in{n_in} out{n_out} x{batch}"
        held = n_in in hold_out_lengths or n_out in hold_out_lengths
        targets.append(
            Target(label, row_model, row_gpu, row_tp, latency, sched.makespan_s, fit=not held, kind="mixed")
        )
        if ttft is not None:
            first = schedules.setdefault(
                (*key[:4], 1, batch), schedule(row_model, row_gpu, row_tp, n_in, 1, batch, row_engine)
            )
            targets.append(
                Target(
                    label + " ttft", row_model, row_gpu, row_tp, ttft, first.makespan_s, not held, "prefill"
                )
            )
    if not targets:
        raise TraceFormatError(f"{path}: no usable rows (after the --model/--gpu/--tp/--framework filters)")
    return targets


def _itl_at(batch: float, ctx_each: float, rate_rps: float, prompt_tokens: float) -> Callable[[Any], float]:
    """The predictor of the mean ITL at this batch, context, arrival rate and prompt length.

    The same formula the live controller's drift check uses (:func:`llmscale.perf.drift.predict_itl_s`):
    decode steps stretched by the share of engine time the arriving prompts' prefills take.
    """
    from llmscale.perf.drift import OperatingPoint, predict_itl_s

    op = OperatingPoint(
        batch=batch, context_tokens=ctx_each, prompt_tokens=prompt_tokens, prefill_rps=rate_rps
    )

    def predict(perf: Any) -> float:
        return predict_itl_s(perf, op)

    return predict


def read_serve_result(path: Path, *, model: str | None, gpu: str | None, tp: int | None) -> list[Target]:
    """Targets from ``vllm bench serve --save-result`` JSON (fields input_lens, output_lens, ttfts, itls)."""
    from llmscale.edge import MAX_DOCUMENT_BYTES, InputFileError, read_input_text
    from llmscale.perf.catalogue import get_gpu, get_model

    try:
        doc = json.loads(read_input_text(path, MAX_DOCUMENT_BYTES, what="JSON"))
    except InputFileError as exc:
        raise TraceFormatError(f"{exc.path}: cannot read: {exc.problem}") from exc
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        why = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise TraceFormatError(f"{path}: not valid JSON ({why})") from exc
    if not isinstance(doc, dict):
        raise TraceFormatError(f"{path}: expected a JSON object (vllm bench serve --save-result)")
    for key in ("input_lens", "output_lens", "ttfts", "itls", "duration"):
        if key not in doc:
            raise TraceFormatError(f"{path}: field {key!r} missing (is this a vllm bench serve result?)")
    ins, outs, ttfts, itls = doc["input_lens"], doc["output_lens"], doc["ttfts"], doc["itls"]
    if not all(isinstance(x, list) for x in (ins, outs, ttfts, itls)) or not (
        len(ins) == len(outs) == len(ttfts) == len(itls)
    ):
        raise TraceFormatError(f"{path}: input_lens, output_lens, ttfts, itls must be lists of equal length")
    duration = doc["duration"]
    if isinstance(duration, bool) or not isinstance(duration, int | float) or not duration > 0:
        raise TraceFormatError(f"{path}: duration = {duration!r}, must be a number > 0")
    errors = doc.get("errors") or [""] * len(ins)
    m = get_model(model or str(doc.get("model_id", ""))).name
    if gpu is None or tp is None:
        raise ConfigError(f"{path}: a serve result does not name the GPU or TP: give --gpu and --tp")
    g = get_gpu(gpu).name
    e2e_sum = 0.0
    per_req_itl: list[float] = []
    ctx: list[float] = []
    for i, (n_in, n_out, t0, gaps) in enumerate(zip(ins, outs, ttfts, itls, strict=True)):
        if errors[i] if i < len(errors) else "":
            continue
        where = f"{path}: request {i}"
        if isinstance(n_in, bool) or not isinstance(n_in, int) or n_in < 1:
            raise TraceFormatError(f"{where}: input_lens = {n_in!r}, must be a positive integer")
        if isinstance(n_out, bool) or not isinstance(n_out, int) or n_out < 0:
            raise TraceFormatError(f"{where}: output_lens = {n_out!r}, must be an integer >= 0")
        if not isinstance(t0, int | float) or not math.isfinite(t0) or t0 < 0:
            raise TraceFormatError(f"{where}: ttfts = {t0!r}, must be a number >= 0")
        if not isinstance(gaps, list) or not all(isinstance(g_, int | float) and g_ >= 0 for g_ in gaps):
            raise TraceFormatError(f"{where}: itls must be a list of numbers >= 0")
        e2e_sum += float(t0) + float(sum(gaps))
        if gaps:
            per_req_itl.append(float(sum(gaps)) / len(gaps))
            ctx.append(n_in + n_out / 2.0)
    if not per_req_itl:
        raise TraceFormatError(f"{path}: no successful request generated more than one token")
    concurrency = e2e_sum / float(duration)  # Little's law: mean requests in flight
    itl = statistics.median(per_req_itl)
    mean_ctx = statistics.fmean(ctx)
    label = f"{path.name}: median ITL at ~{concurrency:.1f} in flight, context ~{mean_ctx:.0f}"
    rate = len(per_req_itl) / float(duration)
    prompt = statistics.fmean(float(n) for n, gaps in zip(ins, itls, strict=True) if gaps)
    return [Target(label, m, g, tp, itl, _itl_at(concurrency, mean_ctx, rate, prompt), kind="decode")]


def read_prometheus(
    url: str,
    *,
    start_s: float,
    end_s: float,
    step_s: float,
    model: str,
    gpu: str,
    tp: int,
    window: str = "5m",
    selector: str = "",
) -> list[Target]:
    """Targets from a live fleet: mean inter-token latency against the mean running batch, per step.

    Reads vLLM's new histogram names and falls back to the old ones (``vllm:inter_token_latency_seconds``
    or ``vllm:time_per_output_token_seconds``); ``selector`` (e.g. ``job="vllm"``) picks the fleet's
    series. The mean context of a running sequence is its prompt plus half its output, from the
    token counters over the finished requests (``vllm:e2e_request_latency_seconds_count``); the
    prompts arriving meanwhile stretch the decode steps they share (see :func:`_itl_at`).
    """
    from llmscale.metrics.names import VllmMetric as V
    from llmscale.metrics.prometheus import query_range_values
    from llmscale.perf.catalogue import get_gpu, get_model

    m, g = get_model(model).name, get_gpu(gpu).name
    sel = "{" + selector + "}" if selector else ""

    def rate(name: str) -> str:
        return f"sum(rate({name}{sel}[{window}]))"

    q_itl = (
        f"({rate(V.ITL + '_sum')} or {rate(V.ITL_OLD + '_sum')})"
        f" / ({rate(V.ITL + '_count')} or {rate(V.ITL_OLD + '_count')})"
    )
    # Per replica: the batch averaged over the window like the rates, arrivals per replica.
    q_batch = f"avg(avg_over_time({V.RUNNING}{sel}[{window}]))"
    q_ctx = f"({rate(V.PROMPT_TOKENS)} + 0.5 * {rate(V.GENERATION_TOKENS)}) / {rate(V.E2E + '_count')}"
    q_rate = f"{rate(V.E2E + '_count')} / count({V.RUNNING}{sel})"
    q_prompt = f"{rate(V.PROMPT_TOKENS)} / {rate(V.E2E + '_count')}"
    series = [
        query_range_values(url, q, start_s, end_s, step_s) for q in (q_itl, q_batch, q_ctx, q_rate, q_prompt)
    ]
    targets = []
    for t in sorted(set.intersection(*(set(x) for x in series))):
        y, b, c, lam, p = (x[t] for x in series)
        if not all(math.isfinite(v) for v in (y, b, c, lam, p)) or y <= 0 or b < 1 or c <= 0:
            continue
        targets.append(
            Target(
                f"t={t:.0f} batch {b:.1f} ctx {c:.0f} {lam:.2f} req/s",
                m,
                g,
                tp,
                y,
                _itl_at(b, c, lam, p),
                kind="decode",
            )
        )
    if not targets:
        raise ConfigError(
            f"{url}: no step in {start_s:.0f}..{end_s:.0f} had requests running with a finite "
            "inter-token latency and context (is the fleet serving, and scraped?)"
        )
    return targets


def _family_of(gpu: str) -> str:
    from llmscale.perf.catalogue import get_gpu

    return get_gpu(gpu).family


def calibrate(
    targets: Sequence[Target],
    *,
    engine: EngineSettings,
    engine_name: str,
    sources: Sequence[str],
    base: PerfCoefficients | None = None,
) -> CalibrationProfile:
    """Fit the factors on the targets marked ``fit``; return the profile with every target's error."""
    import numpy as np
    from scipy.optimize import least_squares

    from llmscale.perf.step_time import PerfModel

    base_c = base or load_coefficients()
    fitted = [t for t in targets if t.fit]
    if not fitted:
        raise ConfigError("nothing to fit: every input point is held out")
    free = ["bandwidth", "host"]
    if any(t.kind != "decode" for t in fitted):
        free.append("compute")
    if any(t.tp > 1 for t in fitted):
        free.append("comm")
    lo, hi = FACTOR_RANGE
    # No factor may make a GPU beat its data sheet: the sustained FLOP rate and the achieved
    # bandwidth stay within 1.1x of peak (10% slack for what the roofline leaves out, such as
    # fused kernels moving fewer bytes). H100: gemm 0.69 x serving 0.89 -> compute <= 1.8.
    fams = [base_c.family(_family_of(t.gpu)) for t in targets]
    caps = {
        "compute": 1.1 / max(f.gemm_flops_eff * f.serving_flops_scale for f in fams),
        "bandwidth": 1.1 / max(max(f.weight_bw_eff, f.act_bw_eff) for f in fams),
    }
    caps["bandwidth"] = min(caps["bandwidth"], 1.1 / base_c.attn_kv_bw_eff)
    upper = [min(hi, caps.get(name, hi)) for name in free]

    def models(factors: dict[str, float]) -> dict[tuple[str, str, int], Any]:
        c = scale_coefficients(base_c, factors)
        return {k: PerfModel(k[0], k[1], k[2], c) for k in {(t.model, t.gpu, t.tp) for t in targets}}

    def predictions(factors: dict[str, float], which: Sequence[Target]) -> list[float]:
        pm = models(factors)
        return [t.predict(pm[(t.model, t.gpu, t.tp)]) for t in which]

    measured = np.array([t.measured_s for t in fitted])

    def residuals(x: Any) -> Any:
        factors = dict(zip(free, np.exp(x), strict=True))
        pred = np.array(predictions(factors, fitted))
        r = np.log(np.maximum(pred, 1e-12) / measured) / _ROBUST_SCALE
        robust = np.sign(r) * np.sqrt(2.0 * (np.sqrt(1.0 + r * r) - 1.0)) * _ROBUST_SCALE
        prior = _PRIOR_WEIGHT * np.asarray(x)
        return np.concatenate([robust, prior])

    res = least_squares(
        residuals,
        np.zeros(len(free)),
        bounds=(np.full(len(free), math.log(lo)), np.log(np.array(upper))),
        method="trf",
        x_scale=1.0,
        ftol=1e-10,
        xtol=1e-10,
        gtol=1e-10,
        max_nfev=200,
    )
    factors = {name: 1.0 for name in FACTOR_NAMES}
    factors.update({k: float(v) for k, v in zip(free, np.exp(res.x), strict=True)})
    after = predictions(factors, targets)
    before = predictions({}, targets)
    first = targets[0]
    return CalibrationProfile(
        model=first.model,
        gpu=first.gpu,
        tp=first.tp,
        factors=MappingProxyType(factors),
        engine=MappingProxyType(
            {
                "max_num_seqs": engine.max_num_seqs,
                "max_num_batched_tokens": engine.max_num_batched_tokens,
                "chunked_prefill": engine.chunked_prefill,
            }
        ),
        engine_name=engine_name,
        sources=tuple(sources),
        points=tuple(
            PointError(t.label, t.measured_s, a, b, t.fit)
            for t, a, b in zip(targets, after, before, strict=True)
        ),
    )
