"""Calibration points built from the public latency measurements in ``shared/data/calibration``.

Only the fit script, the fidelity benchmark and the fidelity test use this
module; the run-time model never reads these files.

Each :class:`CalPoint` is one measured quantity, in seconds, with what the
model needs to predict it (``kind`` + ``args``):

===================  ===============================================================
source               what is measured (and how the model predicts it)
===================  ===============================================================
vidur_gemm           Vidur per-layer QKV + O + gate/up + down GEMM kernel times
                     x layers vs tokens and TP (A100: Llama-2-7B/70B, Llama-3-8B/70B,
                     CodeLlama-34B; H100: Llama-2-7B/70B): ``gemm_time_s``.
vidur_elementwise    Vidur per-layer norms + RoPE + SiLU-and-mul + add x layers
                     + embedding: ``elementwise_time_s``.
vidur_attention      Vidur FlashAttention kernel time per layer (CodeLlama-34B TP2
                     A100): prefill vs chunk and cached prefix, decode vs batch and
                     context: ``attention_layer_time_s``.
vidur_allreduce      NCCL all-reduce time vs payload bytes on DGX-A100 / DGX-H100 (one
                     node, 2/4/8 GPUs; CUDA-graph timings).
vidur_cpu            Per-iteration CPU phases (schedule + prepare inputs + sampler +
                     process outputs, medians) vs batch size and TP.
splitwise_prompt     Prompt (prefill) time of ``batch`` prompts of ``prompt_size``
                     tokens, Llama-2-70B (TP 2/4/8) and BLOOM-176B (TP 8), DGX-A100/H100.
splitwise_token      Mean decode step time at ``batch``, context prompt + tokens/2.
sarathi_decode       Sarathi-Serve Fig. 2: decode step vs batch, Yi-34B TP2 A100-PCIe,
                     1,024-token requests (context ~1,022).
sarathi_prefill      Fig. 2: prefill-only iteration vs prompt tokens.
sarathi_chunked      Fig. 9a: whole prefill of 2k-16k tokens in chunks of 512-16k
                     (sum of chunk iterations; tests the attention-pairs term).
sarathi_mixed        Table 2: decode-only, prefill-only and one hybrid batch.
argonne_e2e          End to end, vLLM (2024) serving a closed batch of B requests of L
                     prompt and L output tokens (L 128-2048, B 1-64) on A100-40GB,
                     H100 and GH200, TP 1/2/4: the latency until the batch finished,
                     predicted by replaying the batch on the simulator with vLLM
                     V0's scheduler settings (:mod:`llmscale.offline.closed_batch`).
argonne_ttft         vLLM's time to first token of 16 prompts of 1,024 tokens.
===================  ===============================================================

The Argonne rows are the only *end-to-end* measurements: everything else times
kernels or single iterations. Engines other than vLLM in that file (TensorRT-LLM,
DeepSpeed-MII, llama.cpp) are not fitted: they are what ``llmscale calibrate``
is for, and its test fits one of them.

Excluded, with reasons: Splitwise ``tensor_parallel = 2`` rows at batch 64
(broken: prompt time drops 8x), ``h100-80gb-pcap`` rows (power-capped H100, not
a catalogue GPU), Vidur ``send_recv`` (no pipeline parallelism here) and the
multi-node all-reduce rows (devices_per_node < num_workers).

Held-out split (deterministic): within every source the points are sorted by
their key and every 5th (index 4, 9, ...) is held out; in addition whole
configurations are held out as out-of-sample *model* tests: all BLOOM-176B
Splitwise rows (the only non-Llama architecture: MHA, ALiBi, plain GELU MLP),
Vidur's CodeLlama-34B GEMM / element-wise profiles, and of the end-to-end rows
every configuration of Mistral-7B (A100-40GB and H100, TP 1/2/4), Qwen2-72B on
4 H100s and Llama-2-7B on GH200: whole models, a big TP-4 replica and a GPU the
fit never sees.
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmscale.errors import ConfigError, NoDataError

__all__ = [
    "HELD_OUT_CONFIGS",
    "SOURCES",
    "CalPoint",
    "default_calibration_dir",
    "load_points",
]

SOURCES = (
    "argonne_e2e",
    "argonne_ttft",
    "vidur_gemm",
    "vidur_elementwise",
    "vidur_attention",
    "vidur_allreduce",
    "vidur_cpu",
    "splitwise_prompt",
    "splitwise_token",
    "sarathi_decode",
    "sarathi_prefill",
    "sarathi_chunked",
    "sarathi_mixed",
)

#: (source prefix, config substring) pairs whose points are all held out.
HELD_OUT_CONFIGS = (
    ("splitwise_", "bloom-176b"),
    ("vidur_gemm", "codellama-34b"),
    ("vidur_elementwise", "codellama-34b"),
    ("argonne_", "mistral-7b/"),
    ("argonne_", "qwen2-72b/"),
    ("argonne_", "llama-2-7b/gh200/"),
)

#: Argonne's hardware names -> catalogue GPUs. Their A100s are 40 GB cards (see the data README).
ARGONNE_GPUS = {"Nvidia A100 GPU": "a100-40gb", "Nvidia H100 GPU": "h100-80gb", "Nvidia GH200 GPU": "gh200"}
#: Argonne's model ids -> catalogue models (the others in the file are architectures the
#: catalogue does not describe: DeciLM's variable GQA, GPT-J, OPT, BLOOM-7B, Aquila, Qwen1.5).
ARGONNE_MODELS = {
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "meta-llama/Llama-2-70b-hf": "llama-2-70b",
    "mistralai/Mistral-7B-v0.1": "mistral-7b",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
    "Qwen/Qwen2-7B": "qwen2-7b",
    "Qwen/Qwen2-72B": "qwen2-72b",
}

_VIDUR_MODELS = {
    "Llama-2-7b-hf": "llama-2-7b",
    "Llama-2-70b-hf": "llama-2-70b",
    "Meta-Llama-3-8B": "llama-3-8b",
    "Meta-Llama-3-70B": "llama-3-70b",
    "CodeLlama-34b-Instruct-hf": "codellama-34b",
}
_VIDUR_GPUS = {"a100": "a100-80gb", "h100": "h100-80gb"}
_SPLITWISE_MODELS = {"llama2-70b": "llama-2-70b", "bloom-176b": "bloom-176b"}
_SPLITWISE_GPUS = {"a100-80gb": "a100-80gb", "h100-80gb": "h100-80gb"}
_GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
_ELEMENTWISE_OPS = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")
_CPU_PHASES = (
    "schedule_median",
    "sampler_e2e_median",
    "prepare_inputs_e2e_median",
    "process_model_outputs_median",
)

_MS = 1e-3


@dataclass(frozen=True, slots=True)
class CalPoint:
    """One measured time (s) and how to predict it.

    ``kind`` is one of ``gemm``, ``elementwise``, ``attention``, ``allreduce``,
    ``cpu``, ``steps``; ``config`` names the (model, gpu, tp[, stack])
    configuration; ``args`` holds the kind's inputs (for ``steps``: a tuple of
    ``step()`` argument tuples whose durations add up to the measurement).
    """

    source: str
    config: str
    key: tuple[Any, ...]
    kind: str
    model: str
    gpu: str
    tp: int
    stack: str
    args: tuple[Any, ...]
    measured_s: float
    held_out: bool = False


def default_calibration_dir() -> Path:
    """``<repo>/../shared/data/calibration`` for a source checkout of llmscale."""
    repo = Path(__file__).resolve().parents[3]
    return repo.parent / "shared" / "data" / "calibration"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _mk(
    source: str,
    model: str,
    gpu: str,
    tp: int,
    kind: str,
    args: tuple[Any, ...],
    measured_s: float,
    *,
    stack: str = "vllm",
    key: tuple[Any, ...] = (),
) -> CalPoint:
    config = f"{model}/{gpu}/tp{tp}" + (f"/{stack}" if kind in ("steps", "schedule") else "")
    return CalPoint(source, config, (config, *key), kind, model, gpu, tp, stack, args, measured_s)


def _vidur_compute(root: Path) -> Iterable[CalPoint]:
    from llmscale.perf.catalogue import get_model

    for gpu_dir in sorted((root / "vidur" / "compute").iterdir()):
        gpu = _VIDUR_GPUS[gpu_dir.name]
        for model_dir in sorted(gpu_dir.iterdir()):
            model = _VIDUR_MODELS[model_dir.name]
            layers = get_model(model).num_layers
            acc: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
            for r in _rows(model_dir / "mlp.csv"):
                n = int(r["num_tokens"])
                tp = int(r["num_tensor_parallel_workers"])
                gemm = sum(float(r[f"time_stats.{op}.median"]) for op in _GEMM_OPS)
                elem = sum(float(r[f"time_stats.{op}.median"]) for op in _ELEMENTWISE_OPS)
                emb = float(r["time_stats.emb.median"])
                acc[(tp, n)].append((gemm * layers, elem * layers + emb))
            for (tp, n), vals in sorted(acc.items()):
                # Repeated profiles of one shape: take the median of each.
                g_ms = statistics.median(v[0] for v in vals)
                e_ms = statistics.median(v[1] for v in vals)
                yield _mk("vidur_gemm", model, gpu, tp, "gemm", (n,), g_ms * _MS, key=(n,))
                yield _mk("vidur_elementwise", model, gpu, tp, "elementwise", (n,), e_ms * _MS, key=(n,))


def _vidur_attention(root: Path) -> Iterable[CalPoint]:
    acc: dict[tuple[str, int, int, int], list[float]] = defaultdict(list)
    for r in _rows(root / "vidur" / "old" / "a100_attention.csv"):
        if r["n_q_head"] != "64" or r["n_kv_head"] != "8" or r["n_embd"] != "8192":
            continue  # the file profiles CodeLlama-34B's shape only
        tp = int(r["num_tensor_parallel_workers"])
        kv = int(r["kv_cache_size"])
        if r["is_prefill"] == "True":
            chunk = int(r["prefill_chunk_size"])
            t = r["time_stats.attn_prefill.median"]
            if t:
                acc[("prefill", tp, chunk, kv)].append(float(t))
        else:
            b = int(r["batch_size"])
            t = r["time_stats.attn_decode.median"]
            if t:
                acc[("decode", tp, b, kv)].append(float(t))
    for (phase, tp, x, kv), vals in sorted(acc.items()):
        ms = statistics.median(vals)
        if phase == "prefill":
            pairs = x * (kv + (x + 1) / 2.0)
            args: tuple[Any, ...] = (pairs, 0.0, True, False)
        else:
            args = (0.0, float(x * kv), False, True)
        yield _mk(
            "vidur_attention",
            "codellama-34b",
            "a100-80gb",
            tp,
            "attention",
            args,
            ms * _MS,
            key=(phase, x, kv),
        )


def _vidur_allreduce(root: Path) -> Iterable[CalPoint]:
    for sub, gpu in (("a100_dgx", "a100-80gb"), ("h100_dgx", "h100-80gb")):
        acc: dict[tuple[int, int], list[float]] = defaultdict(list)
        for r in _rows(root / "vidur" / "network" / sub / "all_reduce.csv"):
            workers = int(r["num_workers"])
            if int(r["devices_per_node"]) != workers or workers not in (2, 4, 8):
                continue  # multi-node rings are not a single-replica TP group
            acc[(workers, int(r["size"]))].append(float(r["time_stats.all_reduce.median"]))
        for (tp, size), vals in sorted(acc.items()):
            # Vidur's own predictor reads `size` as bytes (num_tokens = size / hidden / 2),
            # and only bytes are physical: as fp16 elements, 8 A100s would reach a bus
            # bandwidth of 2 x 7/8 x 2 x 64 MiB / 0.675 ms = 348 GB/s > NVLink 3's 300 GB/s.
            payload_bytes = size
            yield _mk(
                "vidur_allreduce",
                "-",
                gpu,
                tp,
                "allreduce",
                (float(payload_bytes),),
                statistics.median(vals) * _MS,
                key=(size,),
            )


def _vidur_cpu(root: Path) -> Iterable[CalPoint]:
    acc: dict[tuple[str, int, int], list[float]] = defaultdict(list)
    for r in _rows(root / "vidur" / "old" / "a100_cpu_overheads_57720ca.csv"):
        total_ms = sum(float(r[c]) for c in _CPU_PHASES)
        acc[(r["model_name"], int(r["tensor_parallel_degree"]), int(r["batch_size"]))].append(total_ms)
    for (name, tp, b), vals in sorted(acc.items()):
        yield _mk(
            "vidur_cpu",
            name.split("/")[-1].lower(),
            "a100-80gb",
            tp,
            "cpu",
            (b,),
            statistics.median(vals) * _MS,
            key=(b,),
        )


def _splitwise(root: Path) -> Iterable[CalPoint]:
    prompt: dict[tuple[str, str, int, int, int], list[float]] = defaultdict(list)
    token: dict[tuple[str, str, int, int, int, int], list[float]] = defaultdict(list)
    for r in _rows(root / "splitwise" / "perf_model.csv"):
        model = _SPLITWISE_MODELS.get(r["model"])
        gpu = _SPLITWISE_GPUS.get(r["hardware"])
        if model is None or gpu is None:
            continue  # h100-80gb-pcap: power-capped H100
        tp = int(r["tensor_parallel"])
        b = int(r["batch_size"])
        if tp == 2 and b == 64:
            continue  # broken rows (see data README)
        p = int(r["prompt_size"])
        t = int(r["token_size"])
        prompt[(model, gpu, tp, p, b)].append(float(r["prompt_time"]))
        token[(model, gpu, tp, p, b, t)].append(float(r["token_time"]))
    for (model, gpu, tp, p, b), vals in sorted(prompt.items()):
        step = (p * b, b * p * (p + 1) / 2.0, b, 0, 0)
        yield _mk(
            "splitwise_prompt",
            model,
            gpu,
            tp,
            "steps",
            (step,),
            statistics.median(vals) * _MS,
            stack="splitwise",
            key=(p, b),
        )
    for (model, gpu, tp, p, b, t), vals in sorted(token.items()):
        ctx = p + t // 2  # mean context over the generation
        step = (0, 0.0, 0, b, b * ctx)
        yield _mk(
            "splitwise_token",
            model,
            gpu,
            tp,
            "steps",
            (step,),
            statistics.median(vals) * _MS,
            stack="splitwise",
            key=(p, b, t),
        )


def _sarathi(root: Path) -> Iterable[CalPoint]:
    d = root / "sarathi"
    model, gpu, tp, stack = "yi-34b", "a100-80gb-pcie", 2, "sarathi"

    def pt(source: str, steps: Sequence[tuple[Any, ...]], ms: float, key: tuple[Any, ...]) -> CalPoint:
        return _mk(source, model, gpu, tp, "steps", tuple(steps), ms * _MS, stack=stack, key=key)

    # Fig. 2 decode: 1,024-token requests, prefill:decode = 255:1 -> ~1,020 prompt
    # + 4 generated tokens, so the context during decode is ~1,022.
    for r in _rows(d / "figure-2_decode.csv"):
        b = round(float(r["batch_size"]))
        yield pt("sarathi_decode", [(0, 0.0, 0, b, b * 1022)], float(r["batch_execution_time"]) * 1e3, (b,))
    for r in _rows(d / "figure-2_prefill.csv"):
        n = int(r["batch_num_prefill_tokens"])
        yield pt(
            "sarathi_prefill", [(n, n * (n + 1) / 2.0, 1, 0, 0)], float(r["batch_execution_time"]) * 1e3, (n,)
        )
    for r in _rows(d / "figure-9_chunking-overhead.csv"):
        total = int(r["prefill_length"])
        chunk = int(r["chunk_size"])
        steps: list[tuple[Any, ...]] = []
        done = 0
        while done < total:
            c = min(chunk, total - done)
            steps.append((c, c * (done + (c + 1) / 2.0), 1, 0, 0))
            done += c
        yield pt("sarathi_chunked", steps, float(r["prefill_execution_time"]), (total, chunk))
    # Table 2: 1,024-token prompts generating 16 tokens: decode context ~1,032.
    for r in _rows(d / "table-2_results.csv"):
        npf = int(r["batch_num_prefill_tokens"])
        nd = int(r["batch_num_decode_tokens"])
        step = (npf, npf * (npf + 1) / 2.0, 1 if npf else 0, nd, nd * 1032)
        yield pt("sarathi_mixed", [step], float(r["batch_execution_time"]), (npf, nd))


def argonne_rows(path: Path, framework: str = "vLLM") -> list[tuple[str, str, int, int, int, float]]:
    """(model, gpu, tp, length, batch, latency_s) of one engine's end-to-end rows (medians of repeats).

    Rows of models or GPUs the catalogue does not know are left out, and so are rows whose
    latency is physically impossible (GH200 rows at L = 2,048 report 0.04 s for 64 x 4,096
    tokens: a broken run).
    """
    acc: dict[tuple[str, str, int, int, int], list[float]] = defaultdict(list)
    for r in _rows(path):
        if r["Framework"] != framework:
            continue
        model = ARGONNE_MODELS.get(r["Model"])
        gpu = ARGONNE_GPUS.get(r["Hardware"])
        if model is None or gpu is None:
            continue
        length = int(r["Input Output Length"])
        batch = int(r["Batch Size"])
        latency = float(r["Latency"])
        # At least one output token per request and iteration: >= 1 ms per token is a floor
        # no engine beats for 7B+ models (weights alone stream in > 3 ms per step).
        if latency < length * 1e-3:
            continue
        acc[(model, gpu, int(r["Num of Hardware"]), length, batch)].append(latency)
    return [(m, g, tp, ln, b, statistics.median(v)) for (m, g, tp, ln, b), v in sorted(acc.items())]


def _argonne(root: Path) -> Iterable[CalPoint]:
    from llmscale.offline.closed_batch import EngineSettings, schedule
    from llmscale.perf.catalogue import get_model

    d = root / "argonne"
    if not d.is_dir():
        return
    for model, gpu, tp, length, batch, latency in argonne_rows(d / "e2e_batch_latency.csv"):
        engine = EngineSettings.vllm_v0(get_model(model).max_context_tokens)
        try:
            sched = schedule(model, gpu, tp, length, length, batch, engine)
        except ConfigError:
            continue  # does not fit these GPUs in the model's memory accounting
        yield _mk("argonne_e2e", model, gpu, tp, "schedule", (sched,), latency, key=(length, batch))
    for r in _rows(d / "ttft_batch16_in1024.csv"):
        ttft_model = ARGONNE_MODELS.get(r["Model"])
        ttft_gpu = ARGONNE_GPUS.get(r["Hardware"])
        if r["Framework"] != "vLLM" or ttft_model is None or ttft_gpu is None:
            continue
        tp = int(r["Num of Hardware"])
        n_in, batch = int(r["Input Length"]), int(r["Batch Size"])
        engine = EngineSettings.vllm_v0(get_model(ttft_model).max_context_tokens)
        # One output token: the batch's latency is its last request's time to first token.
        sched = schedule(ttft_model, ttft_gpu, tp, n_in, 1, batch, engine)
        yield _mk(
            "argonne_ttft",
            ttft_model,
            ttft_gpu,
            tp,
            "schedule",
            (sched,),
            float(r["TTFT Latency"]),
            key=(n_in, batch),
        )


def _split(points: list[CalPoint]) -> list[CalPoint]:
    out: list[CalPoint] = []
    by_source: dict[str, list[CalPoint]] = defaultdict(list)
    for p in points:
        by_source[p.source].append(p)
    for source in SOURCES:
        pts = sorted(by_source.get(source, []), key=lambda q: tuple(map(str, q.key)))
        for i, p in enumerate(pts):
            whole = any(source.startswith(s) and c in p.config for s, c in HELD_OUT_CONFIGS)
            held = whole or i % 5 == 4
            out.append(
                CalPoint(
                    p.source,
                    p.config,
                    p.key,
                    p.kind,
                    p.model,
                    p.gpu,
                    p.tp,
                    p.stack,
                    p.args,
                    p.measured_s,
                    held,
                )
            )
    return out


def load_points(calibration_dir: Path | str | None = None) -> list[CalPoint]:
    """All calibration points, with the deterministic fit / held-out split applied.

    Raises :class:`~llmscale.errors.NoDataError` if the directory is missing.
    """
    root = Path(calibration_dir) if calibration_dir is not None else default_calibration_dir()
    if not (root / "vidur").is_dir() or not (root / "splitwise").is_dir():
        raise NoDataError(f"calibration data not found under {root}")
    points: list[CalPoint] = []
    points.extend(_vidur_compute(root))
    points.extend(_vidur_attention(root))
    points.extend(_vidur_allreduce(root))
    points.extend(_vidur_cpu(root))
    points.extend(_splitwise(root))
    points.extend(_sarathi(root))
    points.extend(_argonne(root))
    return _split(points)
