"""One simulated vLLM replica: continuous batching, paged KV cache, chunked prefill, preemption.

The engine advances in iterations, as vLLM's does: each iteration schedules
every running decode sequence (one token each), then the running partial
prefills, then admits waiting requests first-come-first-served while the
token budget (``max_num_batched_tokens``), ``max_num_seqs`` and free KV blocks
allow. When a decode step needs a KV block and none is free, the most recently
admitted request is preempted and later recomputed (vLLM's default).

Speed comes from *jumps*. When nothing but decodes can run, the batch is fixed
until the next completion, the next KV-block shortage or the next arrival; its
step time is affine in the batch's total context (``a + b*j`` for step j), so
a run of n steps has a closed-form duration ``n*a + b*n*(n-1)/2`` and the
simulator schedules one event for all n. An arrival cuts the jump short after
the step in progress (an iteration is atomic). Token counts of decoding
requests are lazy: a shared step counter advances and each request remembers
the counter when it joined (see :class:`llmscale.sim.request.Req`).

KV blocks are tracked in aggregate without touching each sequence: a decoding
sequence with ``kv`` cached tokens needs a new block exactly when ``kv % 16 ==
0``; since every sequence's ``kv`` and the step counter both grow by one per
step, ``(kv - counter) % 16`` is fixed per sequence, so a 16-slot count of
sequences per residue gives the blocks needed at any future step in O(1).

The module is compiled with mypyc (setup.py) and typed so that the compiled
code stays native: ``@final`` classes, ``Final`` constants, ``i64`` counters,
no ``Optional`` numbers (sentinels instead), intrusive lists and heaps instead
of tuples, dicts and deques, and the perf model read through unboxed tables.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Final, final

from librt.vecs import vec
from mypy_extensions import i64

from llmscale.perf.kernel import StepKernel
from llmscale.sim.histogram import BucketHistogram
from llmscale.sim.request import DECODING, DONE, PREFILLING, WAITING, PrefillQueue, Req, ReqList
from llmscale.types import Phase

if TYPE_CHECKING:
    from llmscale.sim.fleet import Fleet

__all__ = ["BLOCK_TOKENS", "DecodeCoef", "FinishHeap", "IterationCosts", "Replica", "blocks_for"]

#: vLLM's default KV block size, in tokens.
BLOCK_TOKENS: Final = 16

# What the replica is doing between events.
IDLE: Final = 0
MIXED: Final = 1  # one iteration that includes prefill chunks
JUMP: Final = 2  # n decode-only iterations in closed form
# Woken by an arrival, starting its first iteration at this same instant: requests that arrive
# at the same time (a closed batch, a trace with whole-second timestamps) are all admitted to
# that first iteration, as an engine that finds them queued at its next step would.
WAKE: Final = 3


def blocks_for(tokens: i64) -> i64:
    """KV blocks that hold ``tokens`` tokens (ceiling division; pre: tokens >= 0)."""
    return (tokens + (BLOCK_TOKENS - 1)) // BLOCK_TOKENS


# ---------------------------------------------------------------- step costs


@final
class DecodeCoef:
    """A decode-only iteration of one batch size, affine in the batch's total context S.

    The fields of :class:`llmscale.perf.DecodeAffine`, held as C doubles:
    duration ``base_s + per_ctx_s * S``, and likewise SM-busy seconds and DRAM bytes.
    """

    __slots__ = ("base_s", "busy_base_s", "busy_per_ctx_s", "bytes_base", "bytes_per_ctx", "per_ctx_s")

    def __init__(self, aff: Any) -> None:
        self.base_s = float(aff.base_s)
        self.per_ctx_s = float(aff.per_ctx_s)
        self.busy_base_s = float(aff.busy_base_s)
        self.busy_per_ctx_s = float(aff.busy_per_ctx_s)
        self.bytes_base = float(aff.bytes_base)
        self.bytes_per_ctx = float(aff.bytes_per_ctx)


@final
class IterationCosts:
    """What an iteration costs, as one fleet's replicas read it from the perf model (shared by them).

    ``decode[b]`` holds the decode-only coefficients of batch size b, for every
    b up to ``max_num_seqs`` (a replica never runs more), read once per jump.
    An iteration with prefill chunks is priced by the model's compiled
    :class:`~llmscale.perf.kernel.StepKernel` when it has one (``PerfModel``
    does): a native call with unboxed arguments and results. Any other object
    with the ``PerfModel.step`` signature (the unit tests' affine stand-in)
    goes through an ordinary Python call.
    """

    __slots__ = ("decode", "kernel", "perf")

    def __init__(self, perf: Any, max_batch: int) -> None:
        self.perf = perf
        # Read untyped, not through the KernelPriced protocol: compiled, an attribute read through
        # the narrowed protocol is checked against its declared StepKernel, and a model whose
        # ``kernel`` is something else (a test's stand-in) must fall through to the Python call.
        kernel: object = getattr(perf, "kernel", None)
        self.kernel: StepKernel | None = kernel if isinstance(kernel, StepKernel) else None
        self.decode = [DecodeCoef(perf.decode_affine(b)) for b in range(max_batch + 1)]

    def step(
        self, prefill_tokens: i64, pairs: float, num_prefill: i64, num_decode: i64, decode_ctx: i64
    ) -> tuple[float, float, float]:
        """(duration_s, sm_busy_s, dram_bytes) of one iteration; arguments as ``PerfModel.step``'s."""
        kernel = self.kernel
        if kernel is not None:
            d, busy, dram, _ = kernel.cost(
                float(prefill_tokens), pairs, float(num_prefill), float(num_decode), float(decode_ctx)
            )
            return d, busy, dram
        c = self.perf.step(prefill_tokens, pairs, num_prefill, num_decode, decode_ctx)
        return float(c.duration_s), float(c.sm_busy_s), float(c.dram_bytes)


# -------------------------------------------------------------- finish heap


def _finishes_before(a: Req, b: Req) -> bool:
    # By the step that produces the last token; ties by arrival index, so
    # completions within one step are applied in a fixed order.
    return a.fin_at < b.fin_at or (a.fin_at == b.fin_at and a.idx < b.idx)


@final
class FinishHeap:
    """A replica's decoding requests, earliest finish first: a binary min-heap on ``(fin_at, idx)``.

    Each request knows its slot (``Req.heap_pos``), so a preempted request is
    taken out at once: no stale entries to skip later and no tuple allocated
    per entry.
    """

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: list[Req] = []

    def __len__(self) -> int:
        return len(self.items)

    def first(self) -> Req:
        """The request that finishes first; pre: the heap is not empty."""
        return self.items[0]

    def push(self, req: Req) -> None:
        items = self.items
        items.append(req)
        self._sift_up(req, len(items) - 1)

    def pop(self) -> Req:
        """Remove and return the request that finishes first; pre: the heap is not empty."""
        items = self.items
        top = items[0]
        last = items.pop()
        if items:
            self._sift_down(last, 0)
        top.heap_pos = -1
        return top

    def remove(self, req: Req) -> None:
        """Take ``req`` out; pre: it is in the heap."""
        items = self.items
        pos = req.heap_pos
        last = items.pop()
        req.heap_pos = -1
        if last is req:
            return
        if pos > 0 and _finishes_before(last, items[(pos - 1) >> 1]):
            self._sift_up(last, pos)
        else:
            self._sift_down(last, pos)

    def clear(self) -> None:
        for req in self.items:
            req.heap_pos = -1
        self.items.clear()

    def _sift_up(self, req: Req, pos: i64) -> None:
        items = self.items
        while pos > 0:
            parent = (pos - 1) >> 1
            p = items[parent]
            if not _finishes_before(req, p):
                break
            items[pos] = p
            p.heap_pos = pos
            pos = parent
        items[pos] = req
        req.heap_pos = pos

    def _sift_down(self, req: Req, pos: i64) -> None:
        items = self.items
        n: i64 = len(items)
        while True:
            child = 2 * pos + 1
            if child >= n:
                break
            c = items[child]
            right = child + 1
            if right < n:
                rc = items[right]
                if _finishes_before(rc, c):
                    child = right
                    c = rc
            if not _finishes_before(c, req):
                break
            items[pos] = c
            c.heap_pos = pos
            pos = child
        items[pos] = req
        req.heap_pos = pos


# ------------------------------------------------------------------ replica


@final
class Replica:
    """A replica's engine state and its exporter-visible counters."""

    __slots__ = (
        "_phase",
        "active_s",
        "blocks_used",
        "busy_s",
        "chunked",
        "costs",
        "counter",
        "created_s",
        "decode_steps_by_batch",
        "drain_epoch",
        "drain_until_idle",
        "draining",
        "dram_bytes",
        "finishing",
        "fleet",
        "gen_tokens_total",
        "gone_s",
        "heap_pos",
        "hist_e2e",
        "hist_gen_tokens",
        "hist_itl",
        "hist_mixed_step_tokens",
        "hist_prompt_tokens",
        "hist_queue",
        "hist_tpot",
        "hist_ttft",
        "kind",
        "max_batched_tokens",
        "max_jump",
        "max_seqs",
        "mix_chunks",
        "mix_ctx",
        "mix_dec",
        "mix_pairs",
        "mix_pf",
        "mixed_dec",
        "n_dec",
        "name",
        "num_preemptions",
        "outstanding",
        "phase_cnt",
        "phase_since_s",
        "plan_a",
        "plan_b",
        "plan_busy_a",
        "plan_busy_b",
        "plan_bytes_a",
        "plan_bytes_b",
        "plan_end",
        "plan_n",
        "plan_t0",
        "prefill",
        "prompt_tokens_total",
        "requests_finished",
        "running",
        "start_tier",
        "step_log",
        "step_token_stats",
        "sum_kv",
        "timeout_s",
        "total_blocks",
        "trace",
        "waiting",
    )

    def __init__(
        self,
        name: str,
        fleet: Fleet,
        costs: IterationCosts,
        *,
        total_blocks: int,
        max_seqs: int,
        max_batched_tokens: int,
        timeout_s: float,
        created_s: float,
        phase: Phase,
        histogram_bounds: dict[str, tuple[float, ...]],
        max_jump: int | None = None,
        chunked_prefill: bool = True,
        step_token_stats: bool = False,
    ) -> None:
        self.name = name
        self.fleet = fleet
        self.costs = costs
        self.total_blocks: i64 = total_blocks
        self.max_seqs: i64 = max_seqs
        self.max_batched_tokens: i64 = max_batched_tokens
        self.timeout_s = timeout_s
        self.max_jump: i64 = -1 if max_jump is None else max_jump  # -1: jumps are not capped
        # Chunked prefill (vLLM V1; V0 with --enable-chunked-prefill): prompts are cut to fill the
        # token budget and share iterations with the decodes. Without it (V0's default), a prompt
        # is prefilled whole in a prefill-only iteration and the decodes wait for that iteration.
        self.chunked = chunked_prefill
        self.mixed_dec = False  # whether the MIXED iteration in flight also advances the decodes
        # The MIXED iteration in flight, as priced (set_costs re-prices it when an HBM glitch edge
        # falls inside it): prefill tokens, attention pairs, prefill sequences, decodes, decode context.
        self.mix_pf: i64 = 0
        self.mix_pairs = 0.0
        self.mix_chunks: i64 = 0
        self.mix_dec: i64 = 0
        self.mix_ctx: i64 = 0
        #: When a list: every iteration is appended as (steps, prefill tokens, attention pairs,
        #: prefill sequences, decode sequences, decode context summed over the steps), the inputs
        #: of PerfModel.step (a jump of k decode steps is one entry). The performance fit replays
        #: closed batches once to get their schedule, which does not depend on the step costs.
        self.trace: list[tuple[float, float, float, float, float, float]] | None = None
        self.created_s = created_s
        self._phase = phase
        self.draining = phase == Phase.DRAINING  # read per iteration: a native bool, not an enum compare
        self.phase_since_s = created_s
        self.gone_s = -1.0
        self.drain_until_idle = False
        self.drain_epoch = 0
        #: index into START_TIERS of how this replica started (0 cold, 1 warm node, 2 woken)
        self.start_tier: i64 = 0

        self.waiting = ReqList()
        self.prefill = PrefillQueue()  # running requests with prompt tokens left, in admission order
        self.running = ReqList()  # admission order: the last one is preempted first
        self.outstanding: i64 = 0  # waiting + running: what the router balances on

        self.n_dec: i64 = 0
        self.sum_kv: i64 = 0
        self.counter: i64 = 0
        self.phase_cnt = vec[i64]([0] * BLOCK_TOKENS)
        self.finishing = FinishHeap()
        self.blocks_used: i64 = 0

        self.kind: i64 = IDLE
        self.heap_pos: i64 = -1  # the slot of its next iteration end in the fleet's StepQueue; -1: none
        self.plan_t0 = 0.0
        self.plan_n: i64 = 0
        self.plan_a = 0.0
        self.plan_b = 0.0
        self.plan_end = 0.0
        self.plan_busy_a = 0.0
        self.plan_busy_b = 0.0
        self.plan_bytes_a = 0.0
        self.plan_bytes_b = 0.0

        # Cumulative counters, as an exporter would expose them.
        self.num_preemptions: i64 = 0
        self.prompt_tokens_total: i64 = 0
        self.gen_tokens_total: i64 = 0
        self.requests_finished: i64 = 0
        self.busy_s = 0.0  # SM-busy seconds (useful math at achieved peak)
        self.active_s = 0.0  # seconds an iteration was running (a kernel was resident)
        self.dram_bytes = 0.0
        # Seed 004's 100 ms bandwidth samples and seed 000 2.4's token counts (sim/sub_tick.py's
        # StepBuckets), given each span of iterations with its bytes and tokens; None (the
        # backtest's default) costs one test per span.
        self.step_log: Any = None
        self.hist_ttft = BucketHistogram(histogram_bounds["ttft"])
        self.hist_e2e = BucketHistogram(histogram_bounds["e2e"])
        self.hist_itl = BucketHistogram(histogram_bounds["itl"])
        self.hist_tpot = BucketHistogram(histogram_bounds["itl"])
        self.hist_queue = BucketHistogram(histogram_bounds["e2e"])
        # vllm:request_generation_tokens: output tokens per finished request (vLLM's 1-2-5 buckets);
        # the ``slo`` policy reads its spread (the in-flight context is length-biased)
        gen_bounds = histogram_bounds.get("generation_tokens")
        self.hist_gen_tokens: BucketHistogram | None = (
            BucketHistogram(gen_bounds) if gen_bounds is not None else None
        )
        # vllm:request_prompt_tokens, likewise (the spread of prompts sets the prefill tail)
        prompt_bounds = histogram_bounds.get("prompt_tokens")
        self.hist_prompt_tokens: BucketHistogram | None = (
            BucketHistogram(prompt_bounds) if prompt_bounds is not None else None
        )
        # vLLM's tokens per engine step as its IterationStats counts them: the tokens generated
        # in the step plus, for each request whose first token came in it, its whole prompt
        # (vLLM streams no output for an unfinished prefill chunk); emulate's /metrics exports
        # them. A decode-only step of b sequences carries b tokens: those steps are counted per
        # batch size, an indexed add per jump; mixed steps go in a histogram. Callgrind on
        # Fleet.run_until (30k requests, 24 H100 replicas, 120 req/s): +2.6% instructions for
        # both; a histogram observation per jump as well had cost +4.9%.
        self.decode_steps_by_batch = vec[i64]([0] * (max_seqs + 1))
        self.hist_mixed_step_tokens = BucketHistogram(histogram_bounds["iteration_tokens"])
        # Only the emulator exports the mixed steps' histogram: the backtest skips its bucket
        # search, one per prefill iteration (sim_speed: ~3% of the simulated requests' rate).
        self.step_token_stats = step_token_stats

    # ------------------------------------------------------------------ views

    @property
    def phase(self) -> Phase:
        return self._phase

    @phase.setter
    def phase(self, value: Phase) -> None:
        self._phase = value
        self.draining = value == Phase.DRAINING

    @property
    def num_running(self) -> int:
        return self.running.size

    @property
    def num_waiting(self) -> int:
        return self.waiting.size

    @property
    def busy(self) -> bool:
        return self.kind != IDLE

    def kv_usage(self) -> float:
        """Fraction of KV blocks allocated, 0..1 (call :meth:`sync` first for mid-jump accuracy)."""
        return float(self.blocks_used) / float(self.total_blocks) if self.total_blocks else 0.0

    # ------------------------------------------------------------- admission

    def enqueue(self, req: Req, now: float) -> None:
        """Accept a routed request at ``now``; it is scheduled at the next iteration boundary."""
        req.replica = self
        req.dispatch_s = now
        req.state = WAITING
        self.waiting.append(req)
        self.outstanding += 1
        kind = self.kind
        if kind == IDLE:
            self.kind = WAKE
            self.plan_end = now
            self.fleet.push_step(self)
        elif kind == JUMP and self.plan_n > 1 and self.running.size < self.max_seqs:
            # Only worth cutting the jump if the newcomer could be admitted at the next step.
            self._cut_jump(now)

    def set_costs(self, costs: IterationCosts, now: float) -> None:
        """Price the GPU's work with ``costs`` from ``now`` on (an HBM glitch starts or ends).

        The iteration in flight has its remaining time stretched by the ratio of its
        two prices (the GPU runs the rest of it at the new speed: a 14 ms glitch
        inside a 126 ms glitched step does not cost the whole 126 ms), and a decode
        jump ends after the step in progress so the steps after it are planned at
        the new price. Pre: ``now`` is the fleet's time and the replica's events
        before it have run.
        """
        old = self.costs
        self.costs = costs
        kind = self.kind
        if kind == JUMP:
            self._cut_jump(now)
            if self.plan_n == 1 and self.plan_end > now:
                s = float(self.sum_kv)
                was = old.decode[self.n_dec]
                new = costs.decode[self.n_dec]
                self._stretch(now, (new.base_s + new.per_ctx_s * s) / (was.base_s + was.per_ctx_s * s))
        elif kind == MIXED and self.plan_end > now:
            pf = self.mix_pf
            pairs = self.mix_pairs
            chunks = self.mix_chunks
            n_dec = self.mix_dec
            ctx = self.mix_ctx
            d_new = costs.step(pf, pairs, chunks, n_dec, ctx)[0]
            d_old = old.step(pf, pairs, chunks, n_dec, ctx)[0]
            if d_old > 0.0:
                before = self.plan_a
                self._stretch(now, d_new / d_old)
                self.active_s += self.plan_a - before

    def _stretch(self, now: float, ratio: float) -> None:
        """The single iteration in flight ends ``ratio`` times later, counted from ``now``."""
        self.plan_end = now + (self.plan_end - now) * ratio
        self.plan_a = self.plan_end - self.plan_t0
        self.fleet.push_step(self)

    def set_max_seqs(self, max_seqs: i64, now: float) -> None:
        """Run at most ``max_seqs`` sequences from the next admission on (an adaptive batch change).

        Running sequences above a lowered cap finish normally; admissions wait until
        fewer run. A raised cap with requests waiting ends a decode jump after the
        step in progress, so the next iteration admits them. Pre: 1 <= max_seqs <=
        the configured max_num_seqs (the per-batch tables are sized for it).
        """
        self.max_seqs = max_seqs
        if self.kind == JUMP and self.plan_n > 1 and self.waiting.size and self.running.size < max_seqs:
            self._cut_jump(now)

    def _cut_jump(self, now: float) -> None:
        """End the running jump after the step in progress at ``now``."""
        k = self._steps_done_by(now)
        if k:
            self._apply_decode_steps(k)
        if self.plan_n > 1:
            self.plan_n = 1
            self.plan_end = self.plan_t0 + self.plan_a
            self.fleet.push_step(self)

    def sync(self, now: float) -> None:
        """Bring lazily kept counters up to ``now`` (whole steps finished by then); drop timed-out heads."""
        if self.kind == JUMP:
            k = self._steps_done_by(now)
            if k:
                self._apply_decode_steps(k)
        self._drop_expired_heads(now)

    def _drop_expired_heads(self, now: float) -> None:
        # A client that waited ``timeout_s`` without a first token has gone; vLLM aborts it.
        waiting = self.waiting
        timeout_s = self.timeout_s
        while True:
            head = waiting.first
            if head is None or head.first_token_s >= 0.0 or now - head.arrival_s < timeout_s:
                break
            waiting.remove(head)
            self.outstanding -= 1
            self.fleet.on_timed_out(head, now)

    def expire_waiting(self, now: float) -> list[Req]:
        """Take every waiting request whose client has given up by ``now`` out of the queue; return them."""
        gone = []
        timeout_s = self.timeout_s
        for req in self.waiting.items():
            if req.first_token_s < 0.0 and now - req.arrival_s >= timeout_s:
                self.waiting.remove(req)
                self.outstanding -= 1
                gone.append(req)
        return gone

    # ------------------------------------------------------------- stepping

    def on_step_end(self, now: float) -> None:
        """Apply the iteration(s) that end at ``now`` and schedule the next one."""
        kind = self.kind
        if kind == JUMP:
            self._apply_decode_steps(self.plan_n)
        elif kind == MIXED:
            if self.step_log is None:
                self._apply_mixed(now)
            else:
                generated = self.gen_tokens_total
                self._apply_mixed(now)
                self.step_log.add(now, now, 0.0, float(self.gen_tokens_total - generated))
        self.kind = IDLE
        self._finish_due(now)
        if self.draining and self.outstanding == 0:
            self.fleet.on_drained(self, now)
            return
        self._schedule(now)

    def _steps_done_by(self, now: float) -> i64:
        """Whole steps of the current jump finished by ``now`` (at most plan_n - 1 before plan_end)."""
        dt = now - self.plan_t0
        if dt <= 0.0:
            return 0
        if now >= self.plan_end:
            return self.plan_n
        a = self.plan_a
        b = self.plan_b
        k: i64
        if b <= 0.0:
            k = int(dt / a)
        else:
            h = a - 0.5 * b
            k = int((math.sqrt(h * h + 2.0 * b * dt) - h) / b)
        # Guard float rounding at a step boundary: T(k) <= dt < T(k+1).
        fk = float(k)
        if k > 0 and fk * a + b * fk * (fk - 1.0) * 0.5 > dt:
            k -= 1
        if k >= self.plan_n:
            k = self.plan_n - 1
        return k

    def _apply_decode_steps(self, k: i64) -> None:
        """Advance the decode batch by k steps of the current jump (closed form)."""
        n_dec = self.n_dec
        a = self.plan_a
        b = self.plan_b
        # Counts enter float formulas as exact doubles (whole numbers below 2**53), so each
        # expression rounds exactly as Python's int-times-float does.
        fk = float(k)
        trace = self.trace
        if trace is not None:
            ctx = fk * float(self.sum_kv) + float(n_dec) * fk * (fk - 1.0) * 0.5
            trace.append((fk, 0.0, 0.0, 0.0, float(n_dec), ctx))
        duration = fk * a + b * fk * (fk - 1.0) * 0.5
        # KV blocks: every 16 steps each sequence takes exactly one new block.
        counter = self.counter
        new_blocks = (k >> 4) * n_dec
        rem = k & 15
        if rem:
            cnt = self.phase_cnt
            base = counter + (k - rem)
            for j in range(rem):
                new_blocks += cnt[(-(base + j)) & 15]
        self.blocks_used += new_blocks
        tri = float(k * (k - 1)) * 0.5
        self.busy_s += fk * self.plan_busy_a + self.plan_busy_b * tri
        nbytes = fk * self.plan_bytes_a + self.plan_bytes_b * tri
        self.dram_bytes += nbytes
        self.active_s += duration
        if self.step_log is not None:
            self.step_log.add(self.plan_t0, self.plan_t0 + duration, nbytes, float(k * n_dec))
        self.hist_itl.observe_arithmetic(a, b, k, float(n_dec))
        self.decode_steps_by_batch[n_dec] += k
        self.gen_tokens_total += k * n_dec
        self.counter = counter + k
        self.sum_kv += k * n_dec
        self.plan_t0 += duration
        self.plan_a = a + b * fk
        self.plan_busy_a += self.plan_busy_b * fk
        self.plan_bytes_a += self.plan_bytes_b * fk
        self.plan_n -= k

    def _apply_mixed(self, now: float) -> None:
        """Effects of one iteration with prefill chunks, ending at ``now``."""
        n_dec = self.n_dec
        step_tokens: i64 = 0  # as vLLM counts them: see hist_mixed_step_tokens
        if self.mixed_dec:
            step_tokens = n_dec
            if n_dec:
                self.hist_itl.observe(self.plan_a, float(n_dec))
                self.gen_tokens_total += n_dec
                self.counter += 1
                self.sum_kv += n_dec
        counter = self.counter
        # The chunks in the order they were handed out: the queue is in admission order, and the
        # requests admitted by this iteration are at its end. Those still prefilling go back in.
        prefill = self.prefill
        req = prefill.detach()
        while req is not None:
            nxt = req.pf_next
            c = req.chunk
            if c:
                req.chunk = 0
                req.prefilled += c
            if c == 0 or req.prefilled < req.prefill_target:
                prefill.append(req)
            else:
                # Prefill done: this iteration produced the next token.
                req.pf_next = None
                step_tokens += 1
                if req.first_token_s < 0.0:
                    step_tokens += req.input_tokens
                self._prefill_done(req, counter, now)
            req = nxt
        if step_tokens and self.step_token_stats:
            self.hist_mixed_step_tokens.observe(float(step_tokens))

    def _prefill_done(self, req: Req, counter: i64, now: float) -> None:
        """``req`` computed its last prompt token in the iteration that ended at ``now``."""
        req.generated += 1
        self.gen_tokens_total += 1
        if req.first_token_s < 0.0:
            req.first_token_s = now
            self.hist_ttft.observe(now - req.dispatch_s)
        if req.generated >= req.output_tokens:
            self._release(req, blocks_for(req.prefill_target))
            self._complete(req, now)
            return
        kv = req.prefill_target
        req.state = DECODING
        req.kv_join = kv
        req.gen_join = req.generated
        req.counter_join = counter
        req.fin_at = counter + req.output_tokens - req.generated
        self.phase_cnt[(kv - counter) & 15] += 1
        self.n_dec += 1
        self.sum_kv += kv
        self.finishing.push(req)

    def _finish_due(self, now: float) -> None:
        """Complete every decoding request whose last token was produced by the step that just ended."""
        finishing = self.finishing
        counter = self.counter
        while finishing.items:
            req = finishing.first()
            if req.fin_at > counter:
                break
            finishing.pop()
            steps = counter - req.counter_join
            kv = req.kv_join + steps
            req.generated = req.gen_join + steps
            self.phase_cnt[(req.kv_join - req.counter_join) & 15] -= 1
            self.n_dec -= 1
            self.sum_kv -= kv
            self._release(req, blocks_for(kv))
            self._complete(req, now)

    def _release(self, req: Req, blocks: i64) -> None:
        self.blocks_used -= blocks
        self.running.remove(req)

    def _complete(self, req: Req, now: float) -> None:
        req.state = DONE
        self.outstanding -= 1
        self.requests_finished += 1
        e2e = now - req.dispatch_s
        self.hist_e2e.observe(e2e)
        gen = self.hist_gen_tokens
        if gen is not None:
            gen.observe(float(req.output_tokens))
        prompts = self.hist_prompt_tokens
        if prompts is not None:
            prompts.observe(float(req.input_tokens))
        if req.output_tokens > 1:
            self.hist_tpot.observe((now - req.first_token_s) / float(req.output_tokens - 1))
        self.fleet.on_complete(req, now)

    # ------------------------------------------------------------ scheduling

    def _schedule(self, now: float) -> None:
        """Plan the next iteration starting at ``now`` (or go idle)."""
        if self.draining and self.outstanding == 0:
            return
        if not self.chunked and self._schedule_whole_prefills(now):
            return
        # 1. Decodes need a block for the token they are about to write; preempt if short.
        dec_need: i64 = 0
        if self.n_dec:
            while True:
                dec_need = self.phase_cnt[(-self.counter) & 15]
                if dec_need <= self.total_blocks - self.blocks_used or not self._preempt_last():
                    break
        # Blocks left for prefill once this step's decode blocks are set aside.
        total_blocks = self.total_blocks - dec_need
        budget = self.max_batched_tokens - self.n_dec
        n_chunks: i64 = 0
        pf_tokens: i64 = 0
        pairs = 0.0
        # 2. Running partial prefills keep their place.
        req = self.prefill.first
        while req is not None:
            if budget <= 0:
                break
            done = req.prefilled
            c = req.prefill_target - done
            if c > budget:
                c = budget
            blocks = blocks_for(done + c) - blocks_for(done)
            if blocks > total_blocks - self.blocks_used:
                break
            self.blocks_used += blocks
            req.chunk = c
            n_chunks += 1
            pf_tokens += c
            pairs += float(c) * (float(done) + float(c + 1) * 0.5)
            budget -= c
            req = req.pf_next
        # 3. Admit waiting requests first-come-first-served.
        if self.waiting.size and budget > 0:
            n_chunks, pf_tokens, pairs = self._admit_waiting(
                now, budget, total_blocks, True, n_chunks, pf_tokens, pairs
            )
        if n_chunks:
            self.blocks_used += dec_need
            self._start_mixed(now, pf_tokens, pairs, n_chunks, True)
            return
        if self.n_dec:
            self._plan_jump(now)
        else:
            self.kind = IDLE

    def _start_mixed(self, now: float, pf_tokens: i64, pairs: float, n_chunks: i64, with_dec: bool) -> None:
        """Start one iteration of ``n_chunks`` prefill chunks (and every decode when ``with_dec``)."""
        # Statements, not ``x if with_dec else 0``: mypyc types that expression as a Python int and
        # boxed both i64s on every prefill iteration (with _apply_mixed's alike, 0.07e9 of the
        # 3.2e9 instructions of benchmarks/sim_speed.py's run_policy: benchmarks/sim_callgrind.py).
        n_dec: i64 = 0
        ctx: i64 = 0
        if with_dec:
            n_dec = self.n_dec
            ctx = self.sum_kv
        trace = self.trace
        if trace is not None:
            trace.append((1.0, float(pf_tokens), pairs, float(n_chunks), float(n_dec), float(ctx)))
        duration_s, sm_busy_s, dram_bytes = self.costs.step(pf_tokens, pairs, n_chunks, n_dec, ctx)
        self.mix_pf = pf_tokens
        self.mix_pairs = pairs
        self.mix_chunks = n_chunks
        self.mix_dec = n_dec
        self.mix_ctx = ctx
        d = duration_s * self.fleet.noise()
        self.busy_s += sm_busy_s
        self.dram_bytes += dram_bytes
        self.active_s += d
        if self.step_log is not None:
            self.step_log.add(now, now + d, dram_bytes)
        self.kind = MIXED
        self.mixed_dec = with_dec
        self.plan_a = d
        self.plan_t0 = now
        self.plan_end = now + d
        self.fleet.push_step(self)

    def _schedule_whole_prefills(self, now: float) -> bool:
        """Without chunked prefill: start a prefill-only iteration of whole prompts if any fits.

        vLLM V0's default scheduler runs waiting prompts first: as many whole prompts as
        ``max_num_batched_tokens``, ``max_num_seqs`` and free KV blocks allow, in one iteration
        that the running decodes sit out. False when no prompt can start (then decodes run).
        A prompt longer than the budget never starts; the fleet rejects those at arrival
        (SimConfig requires max_num_batched_tokens >= max_model_len without chunking).
        """
        if not self.waiting.size:
            return False
        n_pf, pf_tokens, pairs = self._admit_waiting(
            now, self.max_batched_tokens, self.total_blocks, False, 0, 0, 0.0
        )
        if n_pf == 0:
            return False
        self._start_mixed(now, pf_tokens, pairs, n_pf, False)
        return True

    def _admit_waiting(
        self,
        now: float,
        budget: i64,
        total_blocks: i64,
        chunked: bool,
        n_chunks: i64,
        pf_tokens: i64,
        pairs: float,
    ) -> tuple[i64, i64, float]:
        """Admit waiting requests first-come-first-served into the iteration starting at ``now``.

        The one admission loop of both schedulers. Each admitted request takes its KV blocks (of
        ``total_blocks``) and a prefill chunk of the ``budget`` tokens; a head whose client gave
        up is dropped on the way. With chunked prefill a prompt longer than what is left of the
        budget starts with a chunk of that size, and admission stops once the budget is spent;
        without it (vLLM V0) a prompt starts only whole, and the first that does not fit ends
        admission (a timed-out head behind a spent budget is still dropped). Returns
        (``n_chunks``, ``pf_tokens``, ``pairs``) with the admitted chunks added in order, so the
        float sum of attention pairs is the one the two loops computed apart.
        """
        waiting = self.waiting
        running = self.running
        max_seqs = self.max_seqs
        timeout_s = self.timeout_s
        while (budget > 0 or not chunked) and running.size < max_seqs:
            head = waiting.first
            if head is None:
                break
            if head.first_token_s < 0.0 and now - head.arrival_s >= timeout_s:
                waiting.remove(head)
                self.outstanding -= 1
                self.fleet.on_timed_out(head, now)
                continue
            c = head.prefill_target
            if c > budget:
                if not chunked:
                    break
                c = budget
            blocks = blocks_for(c)
            if blocks > total_blocks - self.blocks_used:
                break
            waiting.remove(head)
            self.blocks_used += blocks
            head.state = PREFILLING
            head.prefilled = 0
            if head.scheduled_s < 0.0:
                head.scheduled_s = now
                self.hist_queue.observe(now - head.dispatch_s)
                self.prompt_tokens_total += head.input_tokens
            running.append(head)
            self.prefill.append(head)
            head.chunk = c
            n_chunks += 1
            pf_tokens += c
            pairs += float(c * (c + 1)) * 0.5
            budget -= c
        return n_chunks, pf_tokens, pairs

    def _plan_jump(self, now: float) -> None:
        n = self.finishing.first().fin_at - self.counter
        if self.max_jump >= 0 and n > self.max_jump:
            n = self.max_jump
        n_dec = self.n_dec
        free = self.total_blocks - self.blocks_used
        if free < n_dec * ((n + 15) >> 4):
            n_kv = self._steps_until_blocks_run_out(free)
            if n_kv == 0:
                # The very next step needs a block: _schedule preempts.
                if self._preempt_last():
                    self._schedule(now)
                else:
                    self.kind = IDLE
                return
            if n_kv < n:
                n = n_kv
        aff = self.costs.decode[n_dec]
        s = float(self.sum_kv)
        fd = float(n_dec)
        noise = self.fleet.noise()
        a = (aff.base_s + aff.per_ctx_s * s) * noise
        b = aff.per_ctx_s * fd * noise
        self.plan_a = a
        self.plan_b = b
        self.plan_busy_a = aff.busy_base_s + aff.busy_per_ctx_s * s
        self.plan_busy_b = aff.busy_per_ctx_s * fd
        self.plan_bytes_a = aff.bytes_base + aff.bytes_per_ctx * s
        self.plan_bytes_b = aff.bytes_per_ctx * fd
        self.plan_n = n
        self.plan_t0 = now
        fn = float(n)
        self.plan_end = now + fn * a + b * fn * (fn - 1.0) * 0.5
        self.kind = JUMP
        self.fleet.push_step(self)

    def _steps_until_blocks_run_out(self, free: i64) -> i64:
        """How many decode steps can run before one needs a block that is not free."""
        n_dec = self.n_dec
        cycles = free // n_dec
        steps = cycles * 16
        free -= cycles * n_dec
        cnt = self.phase_cnt
        c = self.counter + steps
        for j in range(16):
            need = cnt[(-(c + j)) & 15]
            if need > free:
                return steps + j
            free -= need
        return steps + 16  # unreachable: 16 steps need exactly n_dec > free blocks

    def _preempt_last(self) -> bool:
        """Preempt the most recently admitted running request (recompute). False if none."""
        victim = self.running.last
        if victim is None:
            return False
        if victim.state == DECODING:
            steps = self.counter - victim.counter_join
            kv = victim.kv_join + steps
            victim.generated = victim.gen_join + steps
            self.phase_cnt[(victim.kv_join - victim.counter_join) & 15] -= 1
            self.n_dec -= 1
            self.sum_kv -= kv
            self.finishing.remove(victim)
            self._release(victim, blocks_for(kv))
        else:
            self.prefill.remove(victim)
            victim.chunk = 0
            self._release(victim, blocks_for(victim.prefilled))
        # Recompute: the prompt and every generated token are prefilled again.
        victim.prefill_target = victim.input_tokens + victim.generated
        victim.prefilled = 0
        victim.state = WAITING
        self.waiting.appendleft(victim)
        self.num_preemptions += 1
        return True

    # --------------------------------------------------------------- abort

    def abort(self, req: Req, now: float) -> None:
        """Take ``req`` out at ``now`` (its client went away): its batch slot and KV blocks are free.

        As vLLM frees an aborted request's blocks at once. An iteration under way
        keeps its duration (the GPU computes it anyway) without the request's
        tokens; a decode jump ends after the step in progress, so the next one is
        planned for the smaller batch. Pre: ``req`` is unresolved and on this
        replica, which is synced to ``now`` (:meth:`Fleet.abort` does both).
        """
        state = req.state
        if state == WAITING:
            self.waiting.remove(req)
        elif state == PREFILLING:
            self.prefill.remove(req)
            # A chunk in flight has its blocks already (allocated when it was scheduled).
            self._release(req, blocks_for(req.prefilled + req.chunk))
            req.chunk = 0
        else:
            steps = self.counter - req.counter_join
            kv = req.kv_join + steps
            req.generated = req.gen_join + steps
            self.phase_cnt[(req.kv_join - req.counter_join) & 15] -= 1
            self.n_dec -= 1
            self.sum_kv -= kv
            self.finishing.remove(req)
            if self.kind == MIXED and self.mixed_dec and (kv & 15) == 0:
                kv += 1  # a mixed iteration with the decodes took the block for this step's token
            self._release(req, blocks_for(kv))
        req.state = DONE
        self.outstanding -= 1
        if self.kind == JUMP:
            if self.n_dec == 0:
                self.fleet.cancel_step(self)  # nothing left to decode: no step to finish
                self.kind = IDLE
            else:
                self._cut_jump(now)
        if self.kind == IDLE:
            if self.draining and self.outstanding == 0:
                self.fleet.on_drained(self, now)
            else:
                self._schedule(now)

    # ------------------------------------------------------------ shutdown

    def kill_all(self, now: float) -> list[Req]:
        """Drop every in-flight request (grace period expired); returns them, running then waiting."""
        killed = self.running.items() + self.waiting.items()
        for req in killed:
            req.state = DONE
        self.running.clear()
        self.waiting.clear()
        self.prefill.clear()
        self.finishing.clear()
        self.n_dec = 0
        self.sum_kv = 0
        self.phase_cnt = vec[i64]([0] * BLOCK_TOKENS)
        self.blocks_used = 0
        self.outstanding = 0
        self.kind = IDLE
        self.fleet.cancel_step(self)
        return killed
