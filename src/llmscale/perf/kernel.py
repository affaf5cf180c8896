"""The cost of one engine iteration, compiled: the formula behind :meth:`PerfModel.step`.

:class:`~llmscale.perf.step_time.PerfModel` derives the constants (from the
model, GPU and fitted coefficients; see step_time's docstring for the physics)
and evaluates every iteration through :meth:`StepKernel.cost`. This module is
compiled with mypyc (setup.py) so that the simulator, which prices about one
prefill iteration per request, calls it natively: arguments and the returned
tuple stay unboxed C doubles. Through the interpreted ``PerfModel.step`` the
call used to cost more than the rest of the simulator's work per request.
"""

from __future__ import annotations

import math
from typing import final

__all__ = ["StepKernel"]


@final
class StepKernel:
    """Per-iteration cost, given the precomputed constants of one model on one GPU group.

    Every constant is per GPU of the tensor-parallel group, in seconds, FLOPs or bytes.
    """

    __slots__ = (
        "ar_fixed_s",
        "ar_s_per_token",
        "attn_call_s",
        "attn_flops_per_ctx",
        "attn_flops_per_pair",
        "blend_exp",
        "blend_inv",
        "cpu_fixed_s",
        "cpu_per_seq_s",
        "elem_bytes_per_token",
        "elem_fixed_s",
        "elem_s_per_token",
        "expert_tm_s",
        "flops_per_seq",
        "flops_per_token",
        "gemm_fixed_s",
        "graph_fixed_scale",
        "graph_max_batch",
        "kv_bytes_per_token",
        "kv_s_per_token",
        "launch_s",
        "moe_experts",
        "moe_miss",
        "prefill_iter_s",
        "step_attn_s_per_pair",
        "step_flops_s",
        "tm_pow",
        "weight_expert_bytes",
        "weight_stream_bytes",
        "weight_tm_s",
    )

    def __init__(
        self,
        *,
        flops_per_token: float,
        flops_per_seq: float,
        step_flops_s: float,
        blend_exp: float,
        blend_inv: float,
        tm_pow: float,
        gemm_fixed_s: float,
        elem_s_per_token: float,
        elem_fixed_s: float,
        ar_s_per_token: float,
        ar_fixed_s: float,
        cpu_fixed_s: float,
        cpu_per_seq_s: float,
        attn_call_s: float,
        step_attn_s_per_pair: float,
        prefill_iter_s: float,
        launch_s: float,
        kv_s_per_token: float,
        attn_flops_per_pair: float,
        attn_flops_per_ctx: float,
        weight_stream_bytes: float,
        elem_bytes_per_token: float,
        kv_bytes_per_token: float,
        graph_max_batch: float = 0.0,
        graph_fixed_scale: float = 1.0,
        moe_experts: float = 0.0,
        moe_miss: float = 0.0,
        weight_tm_s: float = 0.0,
        expert_tm_s: float = 0.0,
        weight_expert_bytes: float = 0.0,
    ) -> None:
        self.flops_per_token = flops_per_token
        self.flops_per_seq = flops_per_seq
        self.step_flops_s = step_flops_s
        self.blend_exp = blend_exp
        self.blend_inv = blend_inv
        self.tm_pow = tm_pow
        self.gemm_fixed_s = gemm_fixed_s
        self.elem_s_per_token = elem_s_per_token
        self.elem_fixed_s = elem_fixed_s
        self.ar_s_per_token = ar_s_per_token
        self.ar_fixed_s = ar_fixed_s
        self.cpu_fixed_s = cpu_fixed_s
        self.cpu_per_seq_s = cpu_per_seq_s
        self.attn_call_s = attn_call_s
        self.step_attn_s_per_pair = step_attn_s_per_pair
        self.prefill_iter_s = prefill_iter_s
        self.launch_s = launch_s
        self.kv_s_per_token = kv_s_per_token
        self.attn_flops_per_pair = attn_flops_per_pair
        self.attn_flops_per_ctx = attn_flops_per_ctx
        self.weight_stream_bytes = weight_stream_bytes
        self.elem_bytes_per_token = elem_bytes_per_token
        self.kv_bytes_per_token = kv_bytes_per_token
        #: Decode-only iterations of at most this many sequences replay a captured CUDA graph:
        #: the host issues one graph, not every kernel, so they are never launch-bound (0: eager).
        self.graph_max_batch = graph_max_batch
        self.graph_fixed_scale = graph_fixed_scale
        #: Mixture of experts (0: dense): experts per layer, and the chance (1 - k/E) that one
        #: token leaves a given expert unused. ``weight_tm_s`` streams the weights every
        #: iteration reads (attention, LM head); ``expert_tm_s`` / ``weight_expert_bytes`` one
        #: expert's MLP weights over all layers, read once per iteration if any token used it.
        self.moe_experts = moe_experts
        self.moe_miss = moe_miss
        self.weight_tm_s = weight_tm_s
        self.expert_tm_s = expert_tm_s
        self.weight_expert_bytes = weight_expert_bytes

    def cost(
        self,
        prefill_tokens: float,
        prefill_attn_pairs: float,
        num_prefill_seqs: float,
        num_decode: float,
        decode_ctx_tokens: float,
    ) -> tuple[float, float, float, float]:
        """(duration_s, sm_busy_s, dram_bytes, overhead_s) of one iteration; see ``PerfModel.step``.

        Counts are floats (whole numbers) so that one signature serves ints
        and numpy scalars alike; float arithmetic on whole numbers below 2**53
        is exact, so the result is bit-for-bit that of int arguments.
        """
        n = prefill_tokens + num_decode
        if n <= 0.0:
            return 0.0, 0.0, 0.0, 0.0
        n_seqs = num_prefill_seqs + num_decode
        flops = self.flops_per_token * n + self.flops_per_seq * n_seqs
        tc = flops / self.step_flops_s
        tm_pow = self.tm_pow
        weight_bytes = self.weight_stream_bytes
        if self.moe_experts > 0.0:
            # Experts the batch's n tokens touch, with uniform routing: E x (1 - (1 - k/E)^n).
            # Mixtral-8x7B: 2 of 8 at one token, 7.2 at 8 tokens, all 8 from ~24 tokens on, so a
            # decode step streams 2.1x the weights at batch 16 that it streams at batch 1.
            touched = self.moe_experts * (1.0 - math.pow(self.moe_miss, n))
            tm_pow = math.pow(self.weight_tm_s + self.expert_tm_s * touched, self.blend_exp)
            weight_bytes = weight_bytes + self.weight_expert_bytes * touched
        # math.pow, not **: float ** float is typed Any (it may be complex), which would make mypyc
        # box every operation below; for these positive bases both are the same libm pow().
        graph = num_prefill_seqs == 0.0 and num_decode <= self.graph_max_batch
        # Fixed time per kernel (launch latency, tail wave), per iteration. A replayed CUDA graph
        # issues its kernels back to back from the GPU, so only a fraction of it remains.
        fixed = self.gemm_fixed_s + self.elem_fixed_s
        if num_prefill_seqs > 0.0:
            fixed += self.attn_call_s
        if num_decode > 0.0:
            fixed += self.attn_call_s
        if graph:
            fixed *= self.graph_fixed_scale
        gpu = math.pow(math.pow(tc, self.blend_exp) + tm_pow, self.blend_inv) + fixed
        gpu += n * self.elem_s_per_token
        gpu += n * self.ar_s_per_token + self.ar_fixed_s
        serial = self.cpu_fixed_s + self.cpu_per_seq_s * n_seqs
        if num_prefill_seqs > 0.0:
            gpu += prefill_attn_pairs * self.step_attn_s_per_pair
            serial += self.prefill_iter_s
        if not graph and self.launch_s > 0.25 * gpu:
            # The host issues kernels about as fast as, or slower than, they run: the forward
            # pass takes the larger of the two, blended like the roofline ((g^p + l^p)^(1/p),
            # p = 20: 3.5% above max() where they are equal, 1e-13 of it at l = 0.25 g, below
            # which the blend is skipped). Smooth, so the fit of launch_per_layer_s has one
            # optimum instead of a kink per calibration row (docs/performance-model-fit.md).
            fwd = math.pow(
                math.pow(gpu, self.blend_exp) + math.pow(self.launch_s, self.blend_exp), self.blend_inv
            )
            duration = serial + fwd + decode_ctx_tokens * self.kv_s_per_token
            overhead = serial + (fwd - gpu)
        else:
            duration = serial + gpu + decode_ctx_tokens * self.kv_s_per_token
            overhead = serial
        busy = (
            flops
            + prefill_attn_pairs * self.attn_flops_per_pair
            + decode_ctx_tokens * self.attn_flops_per_ctx
        ) / self.step_flops_s
        dram = weight_bytes + n * self.elem_bytes_per_token + decode_ctx_tokens * self.kv_bytes_per_token
        return duration, busy, dram, overhead
