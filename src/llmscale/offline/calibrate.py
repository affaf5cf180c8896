"""``llmscale calibrate``: fit a calibration profile to a user's own engine measurements.

Three kinds of input, each turned into *targets*: a measured time and a function that predicts
it from a :class:`~llmscale.perf.PerfModel`.

* **Closed batches** (CSV): ``model,gpu,tp,input_tokens,output_tokens,batch_size,latency_s
  [,ttft_s]``, what ``vllm bench latency`` measures; the shared Argonne file's columns
  (``Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,Latency``) are
  read too. Each row is replayed on the simulator (:mod:`llmscale.offline.closed_batch`) with the
  engine settings given, and its latency predicted from that schedule.
* **A ``vllm bench serve --save-result`` JSON**, in either of the two shapes vLLM writes.
  With ``--save-detailed``, per request ``input_lens``, ``output_lens``, ``ttfts`` and ``itls``
  (seconds): the run's mean concurrency follows from Little's law (the sum of request latencies
  over the run's ``duration``), and the median of the requests' mean inter-token latency is
  predicted as a decode step of that many sequences at the mean context. Without it (vLLM's
  default), only the run's statistics: ``completed``, ``total_input_tokens``,
  ``total_output_tokens``, ``duration`` and ``{mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms``
  (milliseconds). A request's mean ITL is its TPOT, so ``median_tpot_ms`` is the same median
  (``median_itl_ms`` is the median over all gaps, the fallback); the concurrency is
  ``mean_e2el_ms`` x ``completed`` / ``duration`` (Little's law again), or, when the run did not
  record E2E latency, ``mean_ttft_ms + mean_tpot_ms x (mean output - 1)`` per request (a mean of
  products taken as a product of means: the label says so). :data:`SERVE_KINDS` names the two.
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
from llmscale.offline.closed_batch import EngineSettings
from llmscale.perf.coefficients import PerfCoefficients, load_coefficients
from llmscale.perf.profile import FACTOR_SPECS, CalibrationProfile, PointError, scale_coefficients
from llmscale.workloads.limits import MAX_TOKENS

__all__ = [
    "SERVE_KINDS",
    "Target",
    "calibrate",
    "read_closed_batches",
    "read_prometheus",
    "read_serve_result",
    "row_findings",
]

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
    #: what the target exercises: "prefill" (pins compute), "decode" or "mixed"
    kind: str = "mixed"
    #: a closed batch's size, and the configuration and lengths it shares with rows of other
    #: sizes (:func:`row_findings` compares them); 0 / "" for other targets
    batch: int = 0
    group: str = ""
    #: which input shape the target came from: "serve-detailed" or "serve-summary" for a
    #: vllm bench serve result (:data:`SERVE_KINDS`), "" otherwise
    source_kind: str = ""


#: the two shapes of a ``vllm bench serve`` result file, and what calibrate reads from each
SERVE_KINDS = {
    "serve-detailed": "vllm bench serve result with per-request arrays (--save-detailed): "
    "median of the requests' mean ITL, concurrency from their latencies",
    "serve-summary": "vllm bench serve result with summary statistics only (plain --save-result): "
    "median TPOT, concurrency from the mean latency",
}

#: a plain result's fields of the inter-token latency, in order of preference (see the docstring)
_SUMMARY_ITL_FIELDS = ("median_tpot_ms", "median_itl_ms", "mean_tpot_ms", "mean_itl_ms")


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
    from llmscale.offline.closed_batch import schedule
    from llmscale.perf.catalogue import get_gpu, get_model

    try:
        # read_input_text drops a UTF-8 BOM: a spreadsheet's made the first column "\ufeffmodel",
        # and the file was refused for a missing column it has; FIFOs and binary files are refused
        fh = io.StringIO(read_input_text(path, MAX_DOCUMENT_BYTES, what="a CSV file"), newline="")
    except InputFileError as exc:
        raise TraceFormatError(f"{exc.path}: cannot read: {exc.problem}") from exc
    with fh:
        reader = csv.DictReader(fh)
        cols = [c.strip() for c in (reader.fieldnames or [])]
        ttft_only = "TTFT Latency" in cols
        argonne = "Input Output Length" in cols or ttft_only
        need = (
            ("Model", "Input Length", "Batch Size", "TTFT Latency")
            if ttft_only
            else ("Model", "Input Output Length", "Batch Size", "Latency")
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
            if ttft_only:
                n_in = _pos_int(row["Input Length"], path, line, "Input Length")
                n_out = 1
                latency = _pos_float(row["TTFT Latency"], path, line, "TTFT Latency")
            else:
                n_in = n_out = _pos_int(row["Input Output Length"], path, line, "Input Output Length")
                latency = _pos_float(row["Latency"], path, line, "Latency")
            batch = _pos_int(row["Batch Size"], path, line, "Batch Size", 100_000)
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
        if not ttft_only and latency < n_out * 1e-3:
            continue
        key = (row_model, row_gpu, row_tp, n_in, n_out, batch)
        row_engine = _engine_for(engine, row_model)
        if key not in schedules:
            try:
                schedules[key] = schedule(row_model, row_gpu, row_tp, n_in, n_out, batch, row_engine)
            except ConfigError as exc:
                raise TraceFormatError(f"{path}:{line}: {exc}") from exc
        sched = schedules[key]
        group = f"{row_model}/{row_gpu}/tp{row_tp} in{n_in} out{n_out}"
        label = f"{group} x{batch}"
        held = n_in in hold_out_lengths or n_out in hold_out_lengths
        if ttft_only:
            # Argonne's TTFT file: a batch of prompts with one output token each, a prefill point
            # (fitted whatever the held-out lengths: it is how compute is pinned, not a closed batch).
            targets.append(
                Target(
                    label + " ttft", row_model, row_gpu, row_tp, latency, sched.makespan_s, True, "prefill"
                )
            )
            continue
        targets.append(
            Target(
                label, row_model, row_gpu, row_tp, latency, sched.makespan_s, not held, "mixed", batch, group
            )
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


#: A latency longer than a day is not a measurement of a serving engine (a unit mix-up, an
#: overflowed timer); it is refused, naming the request, rather than fitted.
_MAX_LATENCY_S = 86_400.0


def _is_number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _serve_errors(path: Path, doc: dict[str, Any], n: int) -> list[bool]:
    """Which requests failed, from the result's ``errors``: one string per request, "" when it
    succeeded (vLLM writes ``output.error``); absent or null means none failed, a null item
    that this one did not."""
    errors = doc.get("errors")
    if errors is None:
        return [False] * n
    if not isinstance(errors, list) or len(errors) != n:
        got = f"a list of {len(errors)}" if isinstance(errors, list) else f"a {type(errors).__name__}"
        raise TraceFormatError(
            f"{path}: field 'errors' is {got}, must be a list of {n} strings (one per request)"
        )
    failed = []
    for i, e in enumerate(errors):
        if e is not None and not isinstance(e, str):
            raise TraceFormatError(
                f"{path}: request {i}: errors = {str(e)[:60]!r} ({type(e).__name__}), must be a string"
            )
        failed.append(bool(e))
    return failed


def _latency(x: object, where: str, field: str) -> float:
    """``x`` as seconds in [0, a day] (NaN, infinities, booleans and strings refused)."""
    if not (isinstance(x, int | float) and not isinstance(x, bool) and 0.0 <= x <= _MAX_LATENCY_S):
        limit = f"[0, {_MAX_LATENCY_S:g}]"
        raise TraceFormatError(
            f"{where}: {field} = {str(x)[:60]!r}, must be a finite number of seconds in {limit}"
        )
    return float(x)


def read_serve_result(path: Path, *, model: str | None, gpu: str | None, tp: int | None) -> list[Target]:
    """Targets from ``vllm bench serve --save-result`` JSON (fields input_lens, output_lens, ttfts, itls).

    Every field read is checked (type, finite, range); an error names the file, the request and
    the field: ``serve.json: request 3: itls = 'inf', must be a finite number of seconds``.
    """
    from llmscale.edge import MAX_DOCUMENT_BYTES, InputFileError, read_input_text
    from llmscale.perf.catalogue import get_gpu, get_model

    try:
        doc = json.loads(read_input_text(path, MAX_DOCUMENT_BYTES, what="JSON"))
    except InputFileError as exc:
        raise TraceFormatError(f"{exc.path}: cannot read: {exc.problem}") from exc
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:120]
        raise TraceFormatError(f"{path}: not valid JSON ({why})") from None
    if not isinstance(doc, dict):
        raise TraceFormatError(f"{path}: expected a JSON object (vllm bench serve --save-result)")
    if "ttfts" not in doc and "itls" not in doc and any(k in doc for k in _SUMMARY_ITL_FIELDS):
        return [_serve_summary_target(path, doc, model=model, gpu=gpu, tp=tp)]
    for key in ("input_lens", "output_lens", "ttfts", "itls", "duration"):
        if key not in doc:
            raise TraceFormatError(
                f"{path}: field {key!r} missing, and no {' / '.join(_SUMMARY_ITL_FIELDS)} of a plain "
                "--save-result file either (is this a vllm bench serve result?)"
            )
    ins, outs, ttfts, itls = doc["input_lens"], doc["output_lens"], doc["ttfts"], doc["itls"]
    if not all(isinstance(x, list) for x in (ins, outs, ttfts, itls)) or not (
        len(ins) == len(outs) == len(ttfts) == len(itls)
    ):
        raise TraceFormatError(f"{path}: input_lens, output_lens, ttfts, itls must be lists of equal length")
    duration = doc["duration"]
    if not _is_number(duration) or not (0 < duration < math.inf):
        raise TraceFormatError(f"{path}: duration = {str(duration)[:60]!r}, must be a finite number > 0")
    failed = _serve_errors(path, doc, len(ins))
    model_id = doc.get("model_id", "")
    if model is None and not isinstance(model_id, str):
        raise TraceFormatError(
            f"{path}: model_id = {str(model_id)[:60]!r}, must be a string (or give --model)"
        )
    m = get_model(model or str(model_id)).name
    if gpu is None or tp is None:
        raise ConfigError(f"{path}: a serve result does not name the GPU or TP: give --gpu and --tp")
    g = get_gpu(gpu).name
    e2e_sum = 0.0
    per_req_itl: list[float] = []
    ctx: list[float] = []
    prompts: list[float] = []
    for i, (n_in, n_out, t0, gaps) in enumerate(zip(ins, outs, ttfts, itls, strict=True)):
        if failed[i]:
            continue
        where = f"{path}: request {i}"
        if isinstance(n_in, bool) or not isinstance(n_in, int) or not 1 <= n_in <= 10_000_000:
            raise TraceFormatError(
                f"{where}: input_lens = {str(n_in)[:60]!r}, must be an integer in [1, 1e7]"
            )
        if isinstance(n_out, bool) or not isinstance(n_out, int) or not 0 <= n_out <= 10_000_000:
            raise TraceFormatError(
                f"{where}: output_lens = {str(n_out)[:60]!r}, must be an integer in [0, 1e7]"
            )
        e2e_sum += _latency(t0, where, "ttfts")
        if not isinstance(gaps, list):
            raise TraceFormatError(f"{where}: itls = {str(gaps)[:60]!r}, must be a list of seconds")
        total = math.fsum(_latency(x, where, f"itls[{j}]") for j, x in enumerate(gaps))
        e2e_sum += total
        if gaps:
            per_req_itl.append(total / len(gaps))
            ctx.append(n_in + n_out / 2.0)
            prompts.append(float(n_in))
    if not per_req_itl:
        raise TraceFormatError(f"{path}: no successful request generated more than one token")
    concurrency = e2e_sum / float(duration)  # Little's law: mean requests in flight
    itl = statistics.median(per_req_itl)
    if not itl > 0:
        raise TraceFormatError(f"{path}: itls: the median inter-token latency is {itl}, must be > 0")
    mean_ctx = statistics.fmean(ctx)
    label = f"{path.name}: median ITL at ~{concurrency:.1f} in flight, context ~{mean_ctx:.0f}"
    rate = len(per_req_itl) / float(duration)
    prompt = statistics.fmean(prompts)
    predict = _itl_at(concurrency, mean_ctx, rate, prompt)
    return [Target(label, m, g, tp, itl, predict, kind="decode", source_kind="serve-detailed")]


def _summary_field(path: Path, doc: dict[str, Any], key: str, lo: float, hi: float) -> float:
    """``doc[key]`` as a number in [lo, hi]; the error names the file and the field."""
    if key not in doc:
        raise TraceFormatError(f"{path}: field {key!r} missing (vllm bench serve --save-result writes it)")
    v = doc[key]
    if not _is_number(v) or not (lo <= v <= hi):
        raise TraceFormatError(f"{path}: {key} = {repr(v)[:60]}, must be a number in [{lo:g}, {hi:g}]")
    return float(v)


def _serve_summary_target(
    path: Path, doc: dict[str, Any], *, model: str | None, gpu: str | None, tp: int | None
) -> Target:
    """The decode target of a plain ``--save-result`` file (statistics, no per-request arrays)."""
    from llmscale.perf.catalogue import get_gpu, get_model

    duration = _summary_field(path, doc, "duration", 1e-9, _MAX_LATENCY_S * 365)
    completed = _summary_field(path, doc, "completed", 1, 1e9)
    total_in = _summary_field(path, doc, "total_input_tokens", 1, 1e15)
    total_out = _summary_field(path, doc, "total_output_tokens", 0, 1e15)
    max_ms = _MAX_LATENCY_S * 1000.0
    itl_key = next(k for k in _SUMMARY_ITL_FIELDS if k in doc)
    itl = _summary_field(path, doc, itl_key, 0.0, max_ms) / 1000.0
    if not itl > 0:
        raise TraceFormatError(f"{path}: {itl_key} = 0: no request generated more than one token")
    mean_out = total_out / completed
    mean_in = total_in / completed
    if "mean_e2el_ms" in doc:
        e2e_s = _summary_field(path, doc, "mean_e2el_ms", 0.0, max_ms) / 1000.0
        how = "mean_e2el_ms"
    else:
        # vLLM records E2E latency only when --percentile-metrics names e2el (its default is
        # ttft,tpot,itl): a request's latency is its TTFT plus a TPOT per token after the first.
        ttft = _summary_field(path, doc, "mean_ttft_ms", 0.0, max_ms) / 1000.0
        tpot_key = "mean_tpot_ms" if "mean_tpot_ms" in doc else itl_key
        tpot = _summary_field(path, doc, tpot_key, 0.0, max_ms) / 1000.0
        e2e_s = ttft + tpot * max(mean_out - 1.0, 0.0)
        how = f"mean_ttft_ms + {tpot_key} x (mean output - 1)"
    rate = completed / duration
    concurrency = e2e_s * rate  # Little's law: mean requests in flight
    model_id = doc.get("model_id", "")
    if model is None and not isinstance(model_id, str):
        what = str(model_id)[:60]
        raise TraceFormatError(f"{path}: model_id = {what!r}, must be a string (or give --model)")
    m = get_model(model or str(model_id)).name
    if gpu is None or tp is None:
        raise ConfigError(f"{path}: a serve result does not name the GPU or TP: give --gpu and --tp")
    g = get_gpu(gpu).name
    mean_ctx = mean_in + mean_out / 2.0
    label = (
        f"{path.name}: {itl_key} (summary file) at ~{concurrency:.1f} in flight ({how}), "
        f"context ~{mean_ctx:.0f}"
    )
    predict = _itl_at(concurrency, mean_ctx, rate, mean_in)
    return Target(label, m, g, tp, itl, predict, kind="decode", source_kind="serve-summary")


#: What a live step may read, per query of :func:`read_prometheus` (a finite value outside is
#: refused, naming the query): a running batch of 1e308 reached the step-time model as an integer
#: float() could not hold (OverflowError), where the closed-batch CSV refuses a batch above 100,000.
_LIVE_BOUNDS: dict[str, tuple[float, float, str]] = {
    "itl": (0.0, 3600.0, "s between tokens"),
    "batch": (0.0, 100_000.0, "sequences running per replica"),
    "ctx": (0.0, float(MAX_TOKENS), "tokens of context per sequence"),
    "rate": (0.0, 1e6, "req/s per replica"),
    "prompt": (0.0, float(MAX_TOKENS), "prompt tokens per request"),
}


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
    timeout_s: float = 30.0,
) -> list[Target]:
    """Targets from a live fleet: mean inter-token latency against the mean running batch, per step.

    Reads vLLM's new histogram names and falls back to the old ones (``vllm:inter_token_latency_seconds``
    or ``vllm:time_per_output_token_seconds``); ``selector`` (e.g. ``job="vllm"``) picks the fleet's
    series. The mean context of a running sequence is its prompt plus half its output, from the
    token counters over the finished requests (``vllm:e2e_request_latency_seconds_count``); the
    prompts arriving meanwhile stretch the decode steps they share (see :func:`_itl_at`). Each
    query ends within ``timeout_s``; no usable answer raises a PrometheusError (exit code 2)
    naming the server and the query.
    """
    from llmscale.metrics.names import VllmMetric as V
    from llmscale.metrics.prometheus import query_ranges
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
    named = {"itl": q_itl, "batch": q_batch, "ctx": q_ctx, "rate": q_rate, "prompt": q_prompt}
    answers = query_ranges(url, named, start_s, end_s, step_s, timeout_s=timeout_s)
    series = list(answers.values())
    targets = []
    for t in sorted(set.intersection(*(set(x) for x in series))):
        y, b, c, lam, p = (x[t] for x in series)
        if not all(math.isfinite(v) for v in (y, b, c, lam, p)) or y <= 0 or b < 1 or c <= 0:
            continue  # no request running or finished in this step: nothing measured
        for key, v in zip(named, (y, b, c, lam, p), strict=True):
            lo, hi, what = _LIVE_BOUNDS[key]
            if not lo <= v <= hi:
                raise ConfigError(
                    f"prometheus {url}: query {named[key]!r} at t={t:.0f}: {v:g} {what}, "
                    f"outside [{lo:g}, {hi:g}]: no fleet measures that (a broken exporter or recording rule?)"
                )
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


#: A closed batch of B concurrent sequences never finishes sooner than one sequence of the
#: same lengths: its last request waits for every other's prefill and decodes in bigger steps.
#: Rows of one configuration whose latency falls by more than this from their smallest batch to
#: a batch >= 4x larger are not concurrent batches (llama.cpp's "batch size" is its prompt
#: batch, n_batch: one sequence whose prompt is processed in bigger pieces; Argonne's Llama-2-7B
#: llama.cpp rows on one H100 at 128 tokens take 2.17 s at batch 1, 1.23 s at 16, 1.17 s at 64).
#: 10%: run-to-run noise of a closed batch is a few percent.
_FALLING_LATENCY = 0.9
#: ... and rows whose latency grows like the batch itself (B sequences one after another, no
#: batching at all: throughput that of a single sequence) at >= 8x the smallest batch. The
#: batching engines' rows in the same file (vLLM, TensorRT-LLM, DeepSpeed-MII; 292 pairs) are
#: 1.3-15.6x slower at batch 64 than at 1 (median 2.2x), never 51x (0.8 x 64).
_SERIAL_LATENCY = 0.8


def row_findings(targets: Sequence[Target]) -> list[str]:
    """What in the rows is not a concurrent closed batch, one sentence per configuration and length."""
    groups: dict[str, list[Target]] = {}
    for t in targets:
        if t.batch > 0 and t.group:
            groups.setdefault(t.group, []).append(t)
    found = []
    for key, rows in sorted(groups.items()):
        rows = sorted(rows, key=lambda t: t.batch)
        small = rows[0]
        for big in rows[1:]:
            ratio = big.batch / small.batch
            if ratio < 4:
                continue
            slow = big.measured_s / small.measured_s
            if slow < _FALLING_LATENCY:
                found.append(
                    f"{key}: latency falls with batch size ({small.measured_s:.3g} s at batch {small.batch}, "
                    f"{big.measured_s:.3g} s at {big.batch}): not a concurrent batch (a single sequence "
                    "whose 'batch' is the prompt batch, as llama.cpp's n_batch?)"
                )
                break
            if ratio >= 8 and slow >= _SERIAL_LATENCY * ratio:
                found.append(
                    f"{key}: latency grows like the batch ({slow:.1f}x from batch {small.batch} to "
                    f"{big.batch}): the sequences ran one after another, a single sequence's throughput"
                )
                break
    return found


@dataclass(frozen=True)
class _Param:
    """One fitted parameter: a factor (or, for ``kv_total``, bandwidth x kv) and its box."""

    name: str
    lo: float
    hi: float
    start: float
    log: bool


#: An rms log error this large after the fit (predictions still 2x off) means the rows describe
#: something else than the model, GPU and TP they name: refused rather than written as a profile.
_ABSURD_LOG_ERROR = math.log(2.0)
#: The order factors are considered in: each must add information the earlier ones lack.
_CANDIDATES = ("host", "bandwidth", "per_seq", "kv", "kv_reread", "compute", "comm")
#: A factor whose e-fold change moves the fitted points' log predictions by less than this
#: (root mean square) is not determined by them and stays at its prior.
_MIN_SENSITIVITY = 0.02
#: ... and one whose (normalised) sensitivity is this close to a combination of the factors
#: already chosen cannot be told apart from them: smallest singular value below this.
_MIN_INDEPENDENCE = 0.1


def _select(jac: Any, names: Sequence[str], n_rows: int) -> tuple[list[int], dict[str, str]]:
    """Columns of ``jac`` (rows x candidates, in priority order) the rows determine; why not the rest."""
    import numpy as np

    chosen: list[int] = []
    why: dict[str, str] = {}
    for k, name in enumerate(names):
        col = jac[:, k]
        rms = float(np.sqrt(np.mean(col * col)))
        if rms < _MIN_SENSITIVITY:
            why[name] = f"the rows hardly depend on it (elasticity {rms:.3f})"
            continue
        if len(chosen) + 1 >= n_rows:
            why[name] = f"{n_rows} fitted points determine at most {max(0, n_rows - 1)} factors"
            continue
        sub = jac[:, [*chosen, k]]
        sub = sub / np.linalg.norm(sub, axis=0)
        sv = np.linalg.svd(sub, compute_uv=False)
        if sv[-1] < _MIN_INDEPENDENCE:
            why[name] = (
                f"the rows cannot tell it from {', '.join(names[j] for j in chosen)} "
                f"(independence {sv[-1]:.3f})"
            )
            continue
        chosen.append(k)
    return chosen, why


def calibrate(
    targets: Sequence[Target],
    *,
    engine: EngineSettings,
    engine_name: str,
    sources: Sequence[str],
    base: PerfCoefficients | None = None,
) -> CalibrationProfile:
    """Fit the factors the targets marked ``fit`` determine; return the profile with every target's error.

    Well-posed by construction: every parameter bounded (its physical range and the data sheet,
    :mod:`llmscale.perf.bounds`), a weak prior at the committed model, a deterministic start at
    that prior, and only factors the rows determine are free (:func:`_select`). Raises
    :class:`ConfigError` when the rows are not concurrent closed batches
    (:func:`row_findings`) or too few to judge a fit.
    """
    import numpy as np
    from scipy.optimize import least_squares

    from llmscale.perf.bounds import factor_ceilings
    from llmscale.perf.catalogue import get_model
    from llmscale.perf.step_time import PerfModel

    base_c = base or load_coefficients()
    odd = row_findings(targets)
    if odd:
        raise ConfigError(
            "these rows are not concurrent closed batches, and the model of one would fit them as "
            "what they are not; leave them out (--framework, --gpu, --tp) or measure with "
            "`vllm bench latency`:\n  " + "\n  ".join(odd)
        )
    fitted = [t for t in targets if t.fit]
    if not fitted:
        raise ConfigError("nothing to fit: every input point is held out")
    if len(fitted) < 2:
        raise ConfigError(
            f"{len(fitted)} fitted point: one point determines no factor with a residual left to judge "
            "the fit (any factor reproduces it exactly); give at least 2 points, better several batch "
            "sizes and lengths"
        )
    notes: list[str] = []
    families = sorted({_family_of(t.gpu) for t in targets})
    # A hair below the ceiling, so that the profile's six written decimals stay within it.
    caps = {k: v * (1.0 - 1e-5) for k, v in factor_ceilings(base_c, families).items()}
    kv_caps = {k: v * (1.0 - 1e-5) for k, v in factor_ceilings(base_c, families, {"bandwidth": 1.0}).items()}
    spec = FACTOR_SPECS
    reread0 = base_c.stack(None).gqa_kv_reread
    gqa = any(get_model(t.model).num_heads > get_model(t.model).num_kv_heads for t in fitted)
    has_prefill = any(t.kind == "prefill" for t in fitted)
    candidates = [n for n in _CANDIDATES if n not in ("compute", "comm", "kv_reread")]
    if gqa:
        candidates.append("kv_reread")
    if has_prefill:
        candidates.append("compute")
    else:
        notes.append(
            "compute kept at 1: no prefill point (a TTFT column or the TTFT file) pins it, and a "
            "closed batch's latency cannot tell a faster FLOP rate from less per-sequence time"
        )
    if any(t.tp > 1 for t in fitted):
        candidates.append("comm")
    params = {
        "host": _Param("host", spec["host"].lo, spec["host"].hi, 1.0, True),
        "per_seq": _Param("per_seq", spec["per_seq"].lo, spec["per_seq"].hi, 1.0, True),
        "bandwidth": _Param(
            "bandwidth", spec["bandwidth"].lo, min(spec["bandwidth"].hi, caps["bandwidth"]), 1.0, True
        ),
        # fitted as the KV read rate itself (bandwidth x kv), so that a box bounds it by the data sheet
        "kv": _Param("kv", spec["kv"].lo, min(spec["kv"].hi, kv_caps["kv"]), 1.0, True),
        "kv_reread": _Param("kv_reread", 0.0, 1.0, reread0, False),
        "compute": _Param("compute", spec["compute"].lo, min(spec["compute"].hi, caps["compute"]), 1.0, True),
        "comm": _Param("comm", spec["comm"].lo, spec["comm"].hi, 1.0, True),
    }

    def to_factors(names: Sequence[str], x: Any) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, v in zip(names, x, strict=True):
            out[name] = float(math.exp(v)) if params[name].log else float(v)
        if "kv" in out:
            out["kv"] = out["kv"] / out.get("bandwidth", 1.0)  # the KV rate relative to bandwidth
        return out

    def x_start(names: Sequence[str]) -> Any:
        return np.array([math.log(params[n].start) if params[n].log else params[n].start for n in names])

    def predictions(factors: dict[str, float], which: Sequence[Target]) -> list[float]:
        c = scale_coefficients(base_c, factors)
        pm = {k: PerfModel(k[0], k[1], k[2], c) for k in {(t.model, t.gpu, t.tp) for t in which}}
        return [t.predict(pm[(t.model, t.gpu, t.tp)]) for t in which]

    measured = np.array([t.measured_s for t in fitted])

    def log_errors(names: Sequence[str], x: Any) -> Any:
        pred = np.array(predictions(to_factors(names, x), fitted))
        return np.log(np.maximum(pred, 1e-12) / measured)

    def jacobian(names: Sequence[str], x: Any, h: float = 1e-3) -> Any:
        cols = []
        for k in range(len(names)):
            up, dn = x.copy(), x.copy()
            up[k] += h
            dn[k] -= h
            cols.append((log_errors(names, up) - log_errors(names, dn)) / (2 * h))
        return np.stack(cols, axis=1)

    # Which factors do the rows determine? Sensitivities at the prior (the committed model).
    j0 = jacobian(candidates, x_start(candidates))
    chosen, why = _select(j0, candidates, len(fitted))
    free = [candidates[k] for k in chosen]
    for name, reason in why.items():
        notes.append(f"{name} kept at its prior: {reason}")
    if not free:
        raise ConfigError(
            "the fitted points determine no factor: " + "; ".join(f"{n}: {r}" for n, r in why.items())
        )

    def residuals(x: Any) -> Any:
        r = log_errors(free, x) / _ROBUST_SCALE
        robust = np.sign(r) * np.sqrt(2.0 * (np.sqrt(1.0 + r * r) - 1.0)) * _ROBUST_SCALE
        prior = _PRIOR_WEIGHT * (np.asarray(x) - x_start(free))
        return np.concatenate([robust, prior])

    lo_b = np.array([math.log(params[n].lo) if params[n].log else params[n].lo for n in free])
    hi_b = np.array([math.log(params[n].hi) if params[n].log else params[n].hi for n in free])
    res = least_squares(
        residuals,
        np.clip(x_start(free), lo_b, hi_b),
        bounds=(lo_b, hi_b),
        method="trf",
        x_scale=1.0,
        ftol=1e-12,
        xtol=1e-12,
        gtol=1e-12,
        max_nfev=400,
    )
    # Every multiplier is written (1: the committed model's, not fitted); kv_reread only when fitted
    # (absent, each stack keeps its own). The uncertainty says which were fitted.
    factors = {f.name: 1.0 for f in FACTOR_SPECS.values() if f.multiplier}
    factors.update(to_factors(free, res.x))
    if "kv" in factors:
        k_lo, k_hi = spec["kv"].lo, spec["kv"].hi
        factors["kv"] = min(k_hi, max(k_lo, factors["kv"]))
    at_bound = [
        n
        for n, v, a, b in zip(free, res.x, lo_b, hi_b, strict=True)
        if min(v - a, b - v) < 1e-6 * max(1.0, abs(v))
    ]
    for n in at_bound:
        # kv is fitted as the KV read rate bandwidth x kv: that product is what hit its edge
        what = "bandwidth x kv" if n == "kv" else n
        value = factors["kv"] * factors["bandwidth"] if n == "kv" else factors[n]
        notes.append(
            f"{what} ended at the edge of its range ({value:.3g}): the rows ask for an engine the "
            "model does not describe there; the points with the largest errors show where"
        )

    # Uncertainty: the Gauss-Newton covariance of the unrobust log errors at the optimum.
    jac = jacobian(free, res.x)
    err = log_errors(free, res.x)
    dof = len(fitted) - len(free)
    s2 = float(np.sum(err * err)) / dof
    info = jac.T @ jac + np.diag(np.full(len(free), _PRIOR_WEIGHT**2))
    cov = s2 * np.linalg.inv(info)
    uncertainty: dict[str, dict[str, Any]] = {}
    for k, name in enumerate(free):
        se = math.sqrt(max(0.0, float(cov[k, k])))
        share = jac[:, k] ** 2 / max(float(np.sum(jac[:, k] ** 2)), 1e-300)
        top = np.argsort(-share)[:3]
        uncertainty[name] = {
            # multipliers: +-x% (one standard error in log space); kv_reread: +-x absolute
            "stderr": round(math.expm1(se) if params[name].log else se, 4),
            "relative": params[name].log,
            "determined_by": [f"{fitted[i].label} ({share[i] * 100:.0f}%)" for i in top],
        }
    rms = math.sqrt(float(np.mean(err * err)))
    if rms > _ABSURD_LOG_ERROR:
        worst = int(np.argmax(np.abs(err)))
        w = fitted[worst]
        raise ConfigError(
            f"after fitting {', '.join(free)} within their physical ranges the points are still off by "
            f"{math.expm1(rms) * 100:.0f}% (rms; worst {w.label}: measured {w.measured_s:.4g} s, "
            f"predicted {math.exp(err[worst]) * w.measured_s:.4g} s): "
            "these are not measurements of this model on this GPU and TP, or the times are in another unit"
        )
    notes.append(
        f"fit: {len(fitted)} points, {len(free)} factors ({', '.join(free)}), {dof} degrees of freedom; "
        f"rms log error {rms * 100:.1f}%"
    )
    after = predictions(factors, targets)
    before = predictions({}, targets)
    held = [(t, a, b) for t, a, b in zip(targets, after, before, strict=True) if not t.fit]
    if held:
        a_med = statistics.median(abs(a / t.measured_s - 1.0) for t, a, _ in held) * 100
        b_med = statistics.median(abs(b / t.measured_s - 1.0) for t, _, b in held) * 100
        if a_med > b_med:
            notes.append(
                f"warning: the profile predicts its held-out points worse ({a_med:.1f}% median) than "
                f"the committed model ({b_med:.1f}%): do not use it"
            )
    first = targets[0]
    return CalibrationProfile(
        model=first.model,
        gpu=first.gpu,
        tp=first.tp,
        factors=MappingProxyType(dict(factors)),
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
        uncertainty=MappingProxyType(uncertainty),
        notes=tuple(notes),
    )
