"""Duration of one vLLM engine iteration, from roofline physics and fitted efficiencies.

One iteration (continuous batching) runs one forward pass over a batch that
mixes prefill chunks and decode sequences. Its cost is modelled as::

    duration = serial_cpu + max(gpu_time, launch_time) + kv_read_time

* ``gpu_time`` sums, per GPU of the tensor-parallel group,
  - the GEMMs: a roofline blend ``(t_c^p + t_m^p)^(1/p)`` of compute
    ``t_c = 2 x params/tp x tokens / FLOP rate`` and the weight stream
    ``t_m = weights/tp / (HBM x eff)``, plus a fixed time per GEMM kernel.
    The LM head is computed for one token per sequence (vLLM only samples
    the last position). The FLOP rate of a serving step is peak x GEMM
    efficiency x a serving scale (sustained clocks) / (1 + penalty x (tp-1))
    (ranks wait for the slowest at every all-reduce);
  - element-wise kernels (RMSNorm x2, RoPE, SiLU-and-mul, residual add, KV
    write): activation bytes / (HBM x eff) plus a fixed time per kernel;
  - prefill attention: ``4 x heads/tp x head_dim x layers`` FLOPs per
    (query, key) pair at the fitted FlashAttention efficiency, plus a fixed
    time per attention call;
  - two all-reduces per layer of ``tokens x hidden x 2`` bytes (tp > 1):
    latency + bytes / bandwidth, fitted per TP degree to NCCL measurements;
    an engine's own one-shot all-reduce over NVLink replaces the latency,
    growing by a fitted amount per peer beyond two.
* ``launch_time`` = layers x host time to issue one layer's kernels. In an
  eager-mode engine the GPU idles when the host issues kernels slower than
  they run, so the forward pass takes the larger of the two, blended like the
  roofline (``(gpu^p + launch^p)^(1/p)``, p = 20: smooth, so the fit has one
  optimum). This is why a 70B model at TP 8 decodes no faster than at TP 4 in
  the measurements (Splitwise: 29.7 vs 29.6 ms on H100). A decode iteration
  replayed as a CUDA graph (vLLM, up to 256 sequences) never waits on launches.
* The FLOP rate a serving step sustains: peak x GEMM efficiency x the family's
  serving scale x a clock factor (tdp / the family's reference power)^(1/3)
  (a power-limited GPU's clock; GH200's 1,000 W against the H100 SXM's 700 W:
  x1.126), / (1 + penalty x (tp - 1)), and never above the data sheet.
* ``serial_cpu`` = scheduling, input preparation, sampling and output
  processing, which a synchronous engine runs between forward passes:
  fixed + per-sequence terms (+ an extra fixed term when a prefill is present).
  The fixed term holds the sampler's pass over the vocabulary, once an
  iteration: its row-wise kernels run one block per sequence, side by side.
  Every host-side part (all but the sampler's kernels) and the eager launch
  time are multiplied by the fitted host time of the machine's CPU
  (``host_time_scale``: 1 on x86 hosts; a GH200's own Grace CPU is slower).
* ``kv_read_time`` = decode context tokens x KV bytes per token per GPU /
  (HBM x eff): the decode attention stream. It is added outside the max() so
  that a decode-only iteration is *exactly affine* in the total decode
  context (the simulator jumps over many decode steps in closed form).

Worked example (Llama-3-8B, one H100, committed coefficients): a batch-1 decode
step replays a CUDA graph: the 15.0 GB of matmul and LM-head weights stream in
15.0e9 / (3.35e12 x 0.878) = 5.10 ms, the kernels' fixed times add 2.09 ms x
0.378 (the share a graph keeps) = 0.79 ms, the serial phases 1.91 ms (0.50 of it
the sampler's pass over the 128,256-entry vocabulary) + 0.06 ms for the sequence
and the KV reads at 1,000 tokens 0.08 ms: 7.9 ms, against 7.3 ms per output token
measured for Llama-2-7B on an H100 (shared/data/calibration/argonne). On a GH200
the host's part of them (1.41 + 0.05 ms, all but the sampler) takes x1.187 on its
Grace CPU: +0.27 ms a step.
Prefill (Llama-2-7B, 4,096 tokens a V0 iteration): the GEMMs run at 989e12 x 0.688
x 0.970 = 660 TFLOP/s on an H100 (80.3 ms) and x1.126 = 744 TFLOP/s on a GH200
(71.3 ms); four such iterations, TTFT of 16 x 1,024-token prompts: 429 ms on
H100 (measured 422) and 389 ms on GH200 (measured 357).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

from llmscale.errors import ConfigError
from llmscale.perf.catalogue import SUPPORTED_TP, GpuSpec, ModelSpec, get_gpu, get_model, validate_tp
from llmscale.perf.coefficients import PerfCoefficients, load_coefficients
from llmscale.perf.kernel import StepKernel
from llmscale.precision import BF16, Precision

if TYPE_CHECKING:
    from llmscale.perf.profile import FactorScale

__all__ = [
    "DECODE_AFFINE_CACHE_SIZE",
    "POWER_CLOCK_EXP",
    "DecodeAffine",
    "KernelPriced",
    "PerfModel",
    "StepCost",
    "get_perf_model",
]

#: Exponent of the sustained tensor-core clock in the board power (f ~ P^(1/3)).
POWER_CLOCK_EXP = 1.0 / 3.0


@runtime_checkable
class KernelPriced(Protocol):
    """A step-time model that prices iterations with a compiled :class:`StepKernel` (a
    :class:`PerfModel`); the simulator's replica then calls the kernel natively, and any other
    model with :meth:`PerfModel.step`'s signature through an ordinary Python call."""

    @property
    def kernel(self) -> StepKernel: ...


#: decode_affine() keeps a list entry for every batch size up to this one.
DECODE_AFFINE_CACHE_SIZE = 1024

_GIB = 1024**3


class StepCost(NamedTuple):
    """Cost of one engine iteration on one replica (per GPU of its TP group)."""

    #: Wall-clock duration of the iteration, s.
    duration_s: float
    #: Time the SMs spend on useful math: FLOPs / the FLOP rate large GEMMs sustain
    #: in a serving run (peak x GEMM efficiency x serving scale / TP sync), s.
    #: The DCGM counters are derived from it (:mod:`llmscale.sim.gpu_counters`): FLOPs =
    #: ``sm_busy_s`` x the step's FLOP rate, for the tensor pipe and SM activity.
    sm_busy_s: float
    #: Bytes moved to/from HBM per GPU: weights + KV reads/writes + activations.
    dram_bytes: float
    #: Part of ``duration_s`` spent on the host: serial CPU phases + kernel-launch stalls, s.
    overhead_s: float


class DecodeAffine(NamedTuple):
    """A decode-only iteration of fixed batch size as affine functions of its total context.

    ``step(0, 0, 0, B, S).duration_s == base_s + per_ctx_s * S`` (and likewise
    for ``sm_busy_s`` and ``dram_bytes``), up to float rounding.
    """

    base_s: float
    per_ctx_s: float
    busy_base_s: float
    busy_per_ctx_s: float
    bytes_base: float
    bytes_per_ctx: float


class PerfModel:
    """Step-time model of one replica: ``model`` on ``tp`` x ``gpu`` with fitted ``coeffs``.

    ``stack`` picks the serving-stack overhead coefficients (default: the
    fit's ``default_stack``, "vllm"). Construction precomputes every constant
    so that :meth:`step` is a few dozen float operations, evaluated by
    ``kernel`` (a compiled :class:`~llmscale.perf.kernel.StepKernel`, which the
    simulator calls directly).
    """

    __slots__ = (
        "_ar_fixed_s",
        "_ar_s_per_token",
        "_attn_call_s",
        "_attn_flops_per_ctx",
        "_attn_flops_per_pair",
        "_attn_s_per_pair",
        "_blend_exp",
        "_blend_inv",
        "_cpu_fixed_s",
        "_cpu_per_seq_s",
        "_decode_cache",
        "_elem_bytes_per_token",
        "_elem_fixed_s",
        "_elem_s_per_token",
        "_flops_per_seq",
        "_flops_per_token",
        "_flops_s",
        "_gemm_fixed_s",
        "_kv_bytes_per_token",
        "_kv_profile_s_per_token",
        "_kv_read_bytes_per_token",
        "_kv_s_per_token",
        "_launch_s",
        "_peak_gemm_flops_s",
        "_prefill_iter_s",
        "_step_attn_s_per_pair",
        "_step_flops_s",
        "_tm_pow",
        "_weight_stream_bytes",
        "_weights_bytes",
        "coeffs",
        "gpu",
        "kernel",
        "model",
        "precision",
        "stack",
        "tp",
    )

    def __init__(
        self,
        model: ModelSpec | str,
        gpu: GpuSpec | str,
        tp: int,
        coeffs: PerfCoefficients | None = None,
        *,
        stack: str | None = None,
        precision: Precision | None = None,
    ) -> None:
        m = get_model(model)
        g = get_gpu(gpu)
        validate_tp(m, tp)
        tp = int(tp)  # numpy integers welcome
        if tp > 1 and ":" in g.name:
            # A MIG slice has no NVLink or PCIe peer-to-peer (`nvidia-smi mig -lgip`: P2P No).
            raise ConfigError(
                f"{g.name} is a MIG slice: no peer-to-peer between slices, tp must be 1 (got {tp})"
            )
        c = load_coefficients() if coeffs is None else coeffs
        fam = c.family(g.family)
        st = c.stack(stack)
        self.model = m
        self.gpu = g
        self.tp = tp
        self.coeffs = c
        self.stack = c.default_stack if stack is None else stack
        prec = BF16 if precision is None else precision
        self.precision = prec

        bpp = m.bytes_per_param
        # FP8 (precision.py): linear-layer weights at 1 byte (embeddings and LM head stay
        # bf16), KV values at 1 byte. Every FP8 term below is an addition of exactly 0.0 or a
        # separate branch under the default precision, so bf16 results are bit-for-bit the fitted
        # model's (tests/perf/test_precision.py pins it). Llama-3-8B tp1, fp8 weights: streamed
        # bytes 32 x 218.1M x 1 B + 525.3M x 2 B = 8.03 GB instead of 15.0 GB.
        fp8_w = prec.weight_bytes != bpp
        wbpp = prec.weight_bytes if fp8_w else bpp
        kv_scale = prec.kv_bytes / prec.activation_bytes
        layers = m.num_layers
        h = m.hidden_size
        hbm = g.hbm_bandwidth_bytes_s
        q_dim = m.num_heads * m.head_dim
        kv_dim = m.num_kv_heads * m.head_dim

        # GEMMs. Weights streamed once per iteration: all layers' matmuls + LM head,
        # e.g. Llama-3-8B tp1: (32 x 218.1M + 525.3M) x 2 B = 15.0 GB. A mixture of experts
        # streams its attention and LM head every iteration and each expert's MLP only if a
        # token of the batch was routed to it (StepKernel.cost); FLOPs follow the active path.
        lin_per_layer = m.linear_params_per_layer / tp
        lm_head = h * m.vocab_size / tp
        if fp8_w:
            self._weight_stream_bytes = wbpp * layers * lin_per_layer + bpp * lm_head
        else:
            self._weight_stream_bytes = bpp * (layers * lin_per_layer + lm_head)
        self._weights_bytes = float(m.weights_bytes)
        if fp8_w:
            # all linear weights at 1 byte; embeddings, LM head and norms (the rest) at 2:
            # Llama-3-8B: 6.98e9 x 1 + (8.03e9 - 6.98e9) x 2 = 9.08 GB instead of 16.06 GB
            linear = m.num_layers * m.linear_params_per_layer
            self._weights_bytes = float(linear * wbpp + (m.param_count - linear) * bpp)
        # GEMMs of FP8 weights run at the FP8 tensor-core rate where the GPU has one (W8A8,
        # H100: 1,979 TFLOP/s dense = 2 x 989); an A100 has none, so vLLM runs them weight-only
        # (W8A16, Marlin) at the bf16 rate. The fitted efficiency (fraction of peak) is kept:
        # not refitted on FP8 measurements, which are the held-out check (docs/fp8.md).
        peak_gemm_flops = g.peak_fp8_flops if fp8_w and g.peak_fp8_flops > 0.0 else g.peak_bf16_flops
        self._flops_s = peak_gemm_flops * fam.gemm_flops_eff
        self._peak_gemm_flops_s = float(peak_gemm_flops)
        self._flops_per_token = 2.0 * layers * m.active_linear_params_per_layer / tp
        self._flops_per_seq = 2.0 * lm_head
        tm = self._weight_stream_bytes / (hbm * fam.weight_bw_eff)
        if m.is_moe:
            if fp8_w:
                shared_bytes = wbpp * layers * m.attn_params_per_layer / tp + bpp * lm_head
            else:
                shared_bytes = bpp * (layers * m.attn_params_per_layer / tp + lm_head)
            expert_bytes = wbpp * layers * m.expert_params / tp
            moe_experts = float(m.num_experts)
            moe_miss = 1.0 - m.experts_per_token / m.num_experts
            weight_tm_s = shared_bytes / (hbm * fam.weight_bw_eff)
            expert_tm_s = expert_bytes / (hbm * fam.weight_bw_eff)
            kernel_stream_bytes = shared_bytes
        else:
            expert_bytes = moe_experts = moe_miss = weight_tm_s = expert_tm_s = 0.0
            kernel_stream_bytes = self._weight_stream_bytes
        self._blend_exp = c.gemm_blend_exp
        self._blend_inv = 1.0 / c.gemm_blend_exp
        self._tm_pow = tm**c.gemm_blend_exp
        # 4 GEMMs a layer (QKV, O, gate+up, down) + the LM head.
        self._gemm_fixed_s = (4 * layers + 1) * fam.gemm_kernel_s

        # Element-wise traffic per token per layer, in elements: 2 RMSNorms (read +
        # write h each), the residual add (2 reads + 1 write), SiLU-and-mul (reads
        # 2 x I/tp, writes I/tp; plain GELU: 1 + 1), RoPE on Q and K (read + write),
        # and the KV-cache write; + the embedding gather once.
        # Llama-3-8B tp1: (4h + 3h + 3I + 2(q + kv) + 2kv) x 2 B = 168 KB per token per layer.
        act_mult = 3 if m.gated_mlp else 2
        per_layer_elems = (
            7 * h + act_mult * m.intermediate_size / tp + (2 * (q_dim + kv_dim) + 2 * kv_dim) / tp
        )
        self._elem_bytes_per_token = bpp * (layers * per_layer_elems + 2 * h)
        # An FP8 KV cache writes 1 byte per K or V value, not 2: 2 x kv_dim/tp values a layer.
        self._elem_bytes_per_token += (prec.kv_bytes - bpp) * layers * 2 * kv_dim / tp
        self._elem_s_per_token = self._elem_bytes_per_token / (hbm * fam.act_bw_eff)
        # 5 element-wise kernels a layer (2 norms, RoPE, activation, KV write).
        self._elem_fixed_s = 5 * layers * fam.elementwise_kernel_s

        # Attention. QK^T and PV: 2 x 2 x head_dim FLOPs per (query, key) pair per head.
        self._attn_flops_per_pair = 4.0 * layers * q_dim / tp
        self._attn_s_per_pair = self._attn_flops_per_pair / (g.peak_bf16_flops * c.attn_prefill_flops_eff)
        self._attn_flops_per_ctx = self._attn_flops_per_pair
        self._kv_bytes_per_token = m.kv_bytes_per_token * kv_scale / tp
        self._kv_profile_s_per_token = self._kv_bytes_per_token / (hbm * c.attn_kv_bw_eff)
        # A decode attention kernel that runs one thread block per *query* head reads a KV head
        # once per query head sharing it, partly from L2: grouped-query models (Mistral, Llama-3:
        # 4 query heads per KV head) save less KV traffic than their cache size suggests.
        # gqa_kv_reread is the engine's share of those extra reads that reach HBM.
        group = m.num_heads / m.num_kv_heads
        self._kv_read_bytes_per_token = self._kv_bytes_per_token * (1.0 + st.gqa_kv_reread * (group - 1.0))
        self._kv_s_per_token = self._kv_read_bytes_per_token / (hbm * c.attn_kv_bw_eff)
        self._attn_call_s = layers * c.attn_kernel_s
        # A serving run sustains a lower FLOP rate than short kernel profiles (power and
        # clock limits), and a multi-GPU forward pass loses more to synchronisation.
        # A GPU with another power limit than the one the family was fitted on sustains another
        # tensor-core clock: dynamic power ~ f x V^2 with V ~ f, so f ~ P^(1/3). GH200 (1,000 W
        # module) against the H100 SXM (700 W): (1000 / 700)^(1/3) = 1.126; A100 PCIe (300 W)
        # against SXM (400 W): 0.909. Never beyond the data-sheet peak.
        clock = 1.0
        if fam.reference_power_w > 0.0:
            clock = (g.tdp_w / fam.reference_power_w) ** POWER_CLOCK_EXP
        penalty = c.tp_compute_penalty if st.tp_compute_penalty is None else st.tp_compute_penalty
        sync = (1.0 + penalty * (tp - 1)) / (fam.serving_flops_scale * clock)
        self._step_flops_s = min(peak_gemm_flops, self._flops_s / sync)
        sync = self._flops_s / self._step_flops_s
        self._step_attn_s_per_pair = self._attn_s_per_pair * sync

        # Tensor-parallel all-reduce: after attention and after the MLP of every layer.
        if tp > 1:
            lat = fam.allreduce_latency_s.get(tp)
            bw = fam.allreduce_bw_bytes_s.get(tp)
            if lat is None or bw is None:
                raise ConfigError(f"no fitted all-reduce coefficients for tp = {tp} on {g.name}")
            if st.allreduce_latency_s > 0.0 and g.nvlink_bandwidth_bytes_s > 0.0:
                # The engine's own small-message all-reduce, over NVLink (vLLM falls back to NCCL
                # on PCIe-only GPUs such as the L40S); one-shot, it waits on every peer.
                lat = st.allreduce_latency_s + st.allreduce_peer_s * (tp - 2)
            self._ar_fixed_s = 2 * layers * lat
            self._ar_s_per_token = 2 * layers * h * bpp / bw
        else:
            self._ar_fixed_s = 0.0
            self._ar_s_per_token = 0.0

        # The host's share of an iteration runs at the speed of the machine's CPU: every term
        # below but the sampler's (GPU kernels) is Python or kernel launches on the host.
        # On x86 hosts the factor is exactly 1 (bit-for-bit the sums without it); a GH200's
        # Grace host, fitted on Qwen2-7B's GH200 rows, takes longer for the same work
        # (docs/performance-model-fit.md, "Host CPU").
        host = c.host_scale(g.host_cpu)
        self._launch_s = layers * fam.launch_per_layer_s * host
        self._cpu_fixed_s = (
            c.cpu_iter_s + (c.cpu_tp_s if tp > 1 else 0.0) + st.iter_s
        ) * host + st.sample_s_per_vocab * m.vocab_size
        self._cpu_per_seq_s = (c.cpu_per_seq_s + st.per_seq_s) * host + st.sample_s_per_logit * m.vocab_size
        self._prefill_iter_s = st.prefill_iter_s * host
        self._decode_cache: list[DecodeAffine | None] = [None] * (DECODE_AFFINE_CACHE_SIZE + 1)
        self.kernel = StepKernel(
            flops_per_token=self._flops_per_token,
            flops_per_seq=self._flops_per_seq,
            step_flops_s=self._step_flops_s,
            blend_exp=self._blend_exp,
            blend_inv=self._blend_inv,
            tm_pow=self._tm_pow,
            gemm_fixed_s=self._gemm_fixed_s,
            elem_s_per_token=self._elem_s_per_token,
            elem_fixed_s=self._elem_fixed_s,
            ar_s_per_token=self._ar_s_per_token,
            ar_fixed_s=self._ar_fixed_s,
            cpu_fixed_s=self._cpu_fixed_s,
            cpu_per_seq_s=self._cpu_per_seq_s,
            attn_call_s=self._attn_call_s,
            step_attn_s_per_pair=self._step_attn_s_per_pair,
            prefill_iter_s=self._prefill_iter_s,
            launch_s=self._launch_s,
            kv_s_per_token=self._kv_s_per_token,
            attn_flops_per_pair=self._attn_flops_per_pair,
            attn_flops_per_ctx=self._attn_flops_per_ctx,
            weight_stream_bytes=kernel_stream_bytes,
            elem_bytes_per_token=self._elem_bytes_per_token,
            kv_bytes_per_token=self._kv_read_bytes_per_token,
            graph_max_batch=float(st.cuda_graph_max_batch),
            graph_fixed_scale=st.graph_kernel_scale,
            moe_experts=moe_experts,
            moe_miss=moe_miss,
            weight_tm_s=weight_tm_s,
            expert_tm_s=expert_tm_s,
            weight_expert_bytes=expert_bytes,
        )

    def __repr__(self) -> str:
        extra = "" if self.precision.is_default else f", precision={self.precision.label()!r}"
        return f"PerfModel({self.model.name!r}, {self.gpu.name!r}, tp={self.tp}, stack={self.stack!r}{extra})"

    # -- the hot path ---------------------------------------------------------
    def step(
        self,
        prefill_tokens: int,
        prefill_attn_pairs: float,
        num_prefill_seqs: int,
        num_decode: int,
        decode_ctx_tokens: int,
    ) -> StepCost:
        """Cost of one iteration.

        ``prefill_tokens``: new prompt tokens in the batch (all chunks);
        ``prefill_attn_pairs``: sum over chunks of c*(p + (c+1)/2) for a chunk of
        c tokens whose sequence already has p tokens in the KV cache;
        ``num_prefill_seqs``: sequences with a prefill chunk; ``num_decode``:
        decoding sequences (one token each); ``decode_ctx_tokens``: sum of
        their context lengths. An empty batch costs nothing.
        """
        # float(): numpy scalars welcome (the kernel's parameters are C doubles).
        return StepCost(
            *self.kernel.cost(
                float(prefill_tokens),
                float(prefill_attn_pairs),
                float(num_prefill_seqs),
                float(num_decode),
                float(decode_ctx_tokens),
            )
        )

    def decode_affine(self, num_decode: int) -> DecodeAffine:
        """Affine coefficients of a decode-only iteration of ``num_decode`` sequences (cached)."""
        if 0 <= num_decode <= DECODE_AFFINE_CACHE_SIZE:
            hit = self._decode_cache[num_decode]
            if hit is not None:
                return hit
        base = self.step(0, 0.0, 0, num_decode, 0)
        if num_decode > 0:
            per_ctx = self._kv_s_per_token
            busy_per_ctx = self._attn_flops_per_ctx / self._step_flops_s
            bytes_per_ctx = self._kv_read_bytes_per_token
        else:
            per_ctx = busy_per_ctx = bytes_per_ctx = 0.0
        aff = DecodeAffine(
            base.duration_s, per_ctx, base.sm_busy_s, busy_per_ctx, base.dram_bytes, bytes_per_ctx
        )
        if 0 <= num_decode <= DECODE_AFFINE_CACHE_SIZE:
            self._decode_cache[num_decode] = aff
        return aff

    # -- components (used by the fit against per-kernel profiles) ---------------
    # Plain arithmetic only, so the fit can also pass numpy arrays.
    def gemm_time_s(self, tokens: float, seqs: float = 0.0) -> float:
        """GEMM time of one forward pass over ``tokens`` tokens, LM head on ``seqs`` of them, s."""
        tc = (self._flops_per_token * tokens + self._flops_per_seq * seqs) / self._flops_s
        if seqs == 0:
            # Without the LM head (as in per-layer kernel profiles): its weights are not streamed.
            share = self._flops_per_token / (self._flops_per_token + self._flops_per_seq)
            tm_pow = self._tm_pow * share**self._blend_exp
            t: float = (tc**self._blend_exp + tm_pow) ** self._blend_inv
            return t + self._gemm_fixed_s - self._gemm_kernel_s()
        t = (tc**self._blend_exp + self._tm_pow) ** self._blend_inv
        return t + self._gemm_fixed_s

    def _gemm_kernel_s(self) -> float:
        return self._gemm_fixed_s / (4 * self.model.num_layers + 1)

    def elementwise_time_s(self, tokens: float) -> float:
        """Element-wise kernels' time (norms, RoPE, activation, residual, KV write) for ``tokens``, s."""
        return tokens * self._elem_s_per_token + self._elem_fixed_s

    def attention_layer_time_s(
        self, prefill_attn_pairs: float, decode_ctx_tokens: float, prefill: bool, decode: bool
    ) -> float:
        """Attention kernel time of ONE layer, s (prefill pairs and decode context as in :meth:`step`)."""
        layers = self.model.num_layers
        t = (int(prefill) + int(decode)) * self._attn_call_s
        t += prefill_attn_pairs * self._attn_s_per_pair + decode_ctx_tokens * self._kv_profile_s_per_token
        return t / layers

    # -- convenience helpers ----------------------------------------------------
    def prefill(self, prompt_tokens: int, cached_tokens: int = 0) -> StepCost:
        """One prefill-only iteration of a single prompt of ``prompt_tokens`` new tokens.

        ``cached_tokens`` already sit in the KV cache (prefix hit or earlier chunks).
        """
        c = prompt_tokens
        return self.step(c, c * (cached_tokens + (c + 1) / 2.0), 1, 0, 0)

    def decode(self, batch: int, ctx_tokens_each: int) -> StepCost:
        """One decode-only iteration of ``batch`` sequences of ``ctx_tokens_each`` context each."""
        return self.step(0, 0.0, 0, batch, batch * ctx_tokens_each)

    @property
    def weights_bytes_per_gpu(self) -> float:
        """Weight bytes resident on each GPU: all parameters / tp (Llama-2-70B tp4: 34.5 GB).

        With FP8 weights the linear layers count 1 byte a parameter (Llama-3-8B: 9.08 GB).
        """
        return self._weights_bytes / self.tp

    @property
    def peak_gemm_flops_s(self) -> float:
        """Data-sheet peak of the tensor cores the GEMMs run on (H100: 989e12 bf16, 1,979e12 FP8)."""
        return self._peak_gemm_flops_s

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes of one token on each GPU (Llama-3-8B tp1: 131,072 B)."""
        return self._kv_bytes_per_token

    def activation_reserve_bytes(self, max_num_batched_tokens: int = 8192, max_num_seqs: int = 256) -> float:
        """Memory held back from the KV cache besides weights, per GPU, bytes.

        vLLM sizes the KV cache after a profiling forward pass at the largest
        batch, so the reserve is that pass's peak activations plus memory that
        is not PyTorch's. Modelled as:

        * 1 GiB fixed: CUDA context, NCCL buffers and CUDA-graph pools;
        * ``max_num_batched_tokens x 2 B x (4 x hidden + 2 x intermediate/tp)``:
          residual stream, norm output, QKV/attention output and the gate/up
          product alive at the MLP peak;
        * ``max_num_seqs x vocab x 4 B``: fp32 logits for sampling.

        Llama-3-8B tp1: 1.07e9 + 8192 x 2 x (16,384 + 28,672) + 256 x 128,256 x 4
        = 1.07 + 0.74 + 0.13 = 1.94 GB.
        """
        m = self.model
        tokens_peak = max_num_batched_tokens * 2.0 * (4 * m.hidden_size + 2 * m.intermediate_size / self.tp)
        logits = max_num_seqs * m.vocab_size * 4.0
        return float(_GIB) + tokens_peak + logits

    def kv_capacity_tokens(
        self,
        gpu_memory_utilization: float = 0.9,
        *,
        max_num_batched_tokens: int = 8192,
        max_num_seqs: int = 256,
    ) -> int:
        """KV-cache capacity of the replica in tokens (before rounding to blocks)."""
        if not 0.0 < gpu_memory_utilization <= 1.0:
            raise ConfigError(f"gpu_memory_utilization = {gpu_memory_utilization}, must be in (0, 1]")
        usable = self.gpu.memory_bytes * gpu_memory_utilization
        weights = self.weights_bytes_per_gpu
        reserve = self.activation_reserve_bytes(max_num_batched_tokens, max_num_seqs)
        free = usable - weights - reserve
        if free <= 0:
            raise ConfigError(
                f"{self.model.name} needs {self._weights_bytes / 1e9:.0f} GB of weights; "
                f"{self.tp} x {self.gpu.name} has {usable / 1e9:.0f} GB usable per GPU "
                f"(gpu_memory_utilization={gpu_memory_utilization}) for {weights / 1e9:.1f} GB of weights "
                f"and a {reserve / 1e9:.1f} GB activation reserve per GPU: "
                + self._tp_hint(gpu_memory_utilization, max_num_batched_tokens, max_num_seqs)
            )
        return int(free // self._kv_bytes_per_token)

    def kv_capacity_blocks(
        self,
        gpu_memory_utilization: float = 0.9,
        block_size: int = 16,
        *,
        max_num_batched_tokens: int = 8192,
        max_num_seqs: int = 256,
    ) -> int:
        """KV-cache blocks of ``block_size`` tokens the replica holds.

        (GPU memory x ``gpu_memory_utilization`` - weights/tp - activation
        reserve) / KV bytes per token per GPU / ``block_size``. Llama-3-8B on one
        H100: (76.97 - 16.06 - 1.94) GB / 131,072 B = 449,866 tokens = 28,116 blocks.
        Raises :class:`ConfigError` when the weights do not fit.
        """
        if block_size <= 0:
            raise ConfigError(f"block_size = {block_size}, must be > 0")
        tokens = self.kv_capacity_tokens(
            gpu_memory_utilization, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs
        )
        return tokens // block_size

    def _tp_hint(self, gpu_memory_utilization: float, max_num_batched_tokens: int, max_num_seqs: int) -> str:
        if ":" in self.gpu.name:
            return "use a MIG profile with more memory, or a whole GPU (a slice serves at tp 1)"
        for tp in SUPPORTED_TP:
            if tp <= self.tp or self.model.num_heads % tp or self.model.num_kv_heads % tp:
                continue
            other = PerfModel(
                self.model, self.gpu, tp, self.coeffs, stack=self.stack, precision=self.precision
            )
            free = (
                self.gpu.memory_bytes * gpu_memory_utilization
                - other.weights_bytes_per_gpu
                - other.activation_reserve_bytes(max_num_batched_tokens, max_num_seqs)
            )
            if free > 0:
                return f"use --tp {tp} or more"
        return "use a GPU with more memory (no supported --tp fits)"

    def prefill_capacity_tokens_s(self, chunk_tokens: int = 2048, prompt_tokens: int = 2048) -> float:
        """Prefill throughput (prompt tokens/s) of prefill-only iterations.

        Prompts of ``prompt_tokens`` are processed in chunks of ``chunk_tokens``
        (the last chunk may be shorter); each chunk is one iteration.
        """
        if chunk_tokens <= 0 or prompt_tokens <= 0:
            raise ConfigError("chunk_tokens and prompt_tokens must be > 0")
        done = 0
        total_s = 0.0
        while done < prompt_tokens:
            c = min(chunk_tokens, prompt_tokens - done)
            total_s += self.prefill(c, done).duration_s
            done += c
        return prompt_tokens / total_s

    def decode_throughput(self, batch: int, mean_ctx_tokens: int) -> float:
        """Decode tokens/s of a steady decode-only batch of ``batch`` sequences."""
        if batch <= 0:
            return 0.0
        aff = self.decode_affine(batch)
        return batch / (aff.base_s + aff.per_ctx_s * batch * mean_ctx_tokens)

    def max_decode_batch_for_tpot(self, tpot_s: float, mean_ctx_tokens: int, max_batch: int = 1024) -> int:
        """Largest decode batch whose step time stays within ``tpot_s`` (0 if none).

        Also capped by KV capacity (``mean_ctx_tokens`` per sequence) and
        ``max_batch``. Step time grows with the batch, so a binary search over
        :meth:`decode_affine` suffices.
        """
        try:
            cap = self.kv_capacity_tokens() // max(1, mean_ctx_tokens)
        except ConfigError:
            return 0
        hi = min(max_batch, cap)

        def ok(b: int) -> bool:
            a = self.decode_affine(b)
            return a.base_s + a.per_ctx_s * b * mean_ctx_tokens <= tpot_s

        if hi < 1 or not ok(1):
            return 0
        lo = 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if ok(mid):
                lo = mid
            else:
                hi = mid - 1
        return lo


_MODELS_CACHE: dict[tuple[str, str, int, str | None, str | None, int, Precision], PerfModel] = {}
#: models of online-adjusted factors (:class:`~llmscale.perf.profile.FactorScale`), most recent last.
#: Bounded: a live controller adapting its factors asks for a new scale every few ticks for a
#: while (1% steps, see ``llmscale.perf.drift``), and only the latest few are ever used again.
_SCALED_CACHE: dict[tuple[object, ...], PerfModel] = {}
_SCALED_CACHE_SIZE = 16


def get_perf_model(
    model: str,
    gpu: str,
    tp: int,
    *,
    stack: str | None = None,
    calibration: str | None = None,
    scale: FactorScale | None = None,
    precision: Precision | None = None,
) -> PerfModel:
    """The :class:`PerfModel` of ``model`` on ``tp`` x ``gpu`` with the committed coefficients.

    ``precision`` is the served model's number formats (vLLM's ``--dtype``, ``--quantization``,
    ``--kv-cache-dtype``; :mod:`llmscale.precision`); None is bf16 throughout.

    ``calibration`` is the path of a profile written by ``llmscale calibrate``: its factors
    scale the committed coefficients (:mod:`llmscale.perf.profile`). ``scale`` multiplies the
    profile's factors further (the live controller's online drift adjustment; None or all 1:
    the profile as written). Coefficients are read on first use from the package (no
    ``../shared`` needed); models are memoised (per profile file version and scale), so
    repeated calls share the decode cache.
    """
    m = get_model(model)
    g = get_gpu(gpu)
    validate_tp(m, tp)
    mtime = 0
    if calibration is not None:
        from pathlib import Path

        try:
            mtime = Path(calibration).stat().st_mtime_ns
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"{calibration}: calibration profile not found ({getattr(exc, 'strerror', None) or exc})"
            ) from exc
    prec = BF16 if precision is None else precision
    key = (m.name, g.name, int(tp), stack, calibration, mtime, prec)
    if calibration is not None and key not in _MODELS_CACHE:
        from llmscale.perf.profile import check_profile_target

        check_profile_target(calibration, m.name, g.name, int(tp))
    if scale is not None and not scale.identity:
        return _scaled_model(m, g, int(tp), stack, calibration, mtime, scale, prec)
    pm = _MODELS_CACHE.get(key)
    if pm is None:
        coeffs = None
        if calibration is not None:
            from llmscale.perf.bounds import check_physical
            from llmscale.perf.profile import load_profile, profile_coefficients

            # The profile was checked against its own GPU's data sheet when loaded; a profile
            # of an H100 engine run on an A100 is checked again here, against the A100's.
            check_physical(load_coefficients(), load_profile(calibration).factors, [g.family], calibration)
            coeffs = profile_coefficients(calibration)
        pm = PerfModel(m, g, tp, coeffs, stack=stack, precision=prec)
        _MODELS_CACHE[key] = pm
    return pm


def _scaled_model(
    m: ModelSpec,
    g: GpuSpec,
    tp: int,
    stack: str | None,
    calibration: str | None,
    mtime: int,
    scale: FactorScale,
    precision: Precision = BF16,
) -> PerfModel:
    from llmscale.perf.profile import profile_coefficients

    key: tuple[object, ...] = (m.name, g.name, tp, stack, calibration, mtime, scale, precision)
    pm = _SCALED_CACHE.pop(key, None)
    if pm is None:
        coeffs = profile_coefficients(calibration, scale, family=g.family)
        pm = PerfModel(m, g, tp, coeffs, stack=stack, precision=precision)
        while len(_SCALED_CACHE) >= _SCALED_CACHE_SIZE:
            del _SCALED_CACHE[next(iter(_SCALED_CACHE))]
    _SCALED_CACHE[key] = pm  # re-inserted: the most recently used is last
    return pm
