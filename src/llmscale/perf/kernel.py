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
        "flops_per_seq",
        "flops_per_token",
        "gemm_fixed_s",
        "kv_bytes_per_token",
        "kv_s_per_token",
        "launch_s",
        "prefill_iter_s",
        "step_attn_s_per_pair",
        "step_flops_s",
        "tm_pow",
        "weight_stream_bytes",
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
        # math.pow, not **: float ** float is typed Any (it may be complex), which would make mypyc
        # box every operation below; for these positive bases both are the same libm pow().
        gpu = math.pow(math.pow(tc, self.blend_exp) + self.tm_pow, self.blend_inv) + self.gemm_fixed_s
        gpu += n * self.elem_s_per_token + self.elem_fixed_s
        gpu += n * self.ar_s_per_token + self.ar_fixed_s
        serial = self.cpu_fixed_s + self.cpu_per_seq_s * n_seqs
        if num_prefill_seqs > 0.0:
            gpu += self.attn_call_s + prefill_attn_pairs * self.step_attn_s_per_pair
            serial += self.prefill_iter_s
        if num_decode > 0.0:
            gpu += self.attn_call_s
        if self.launch_s > gpu:  # the host issues kernels slower than they run
            duration = serial + self.launch_s + decode_ctx_tokens * self.kv_s_per_token
            overhead = serial + (self.launch_s - gpu)
        else:
            duration = serial + gpu + decode_ctx_tokens * self.kv_s_per_token
            overhead = serial
        busy = (
            flops
            + prefill_attn_pairs * self.attn_flops_per_pair
            + decode_ctx_tokens * self.attn_flops_per_ctx
        ) / self.step_flops_s
        dram = (
            self.weight_stream_bytes
            + n * self.elem_bytes_per_token
            + decode_ctx_tokens * self.kv_bytes_per_token
        )
        return duration, busy, dram, overhead
