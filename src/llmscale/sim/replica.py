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
"""

from __future__ import annotations

import math
from collections import deque
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any

from llmscale.sim.histogram import BucketHistogram
from llmscale.sim.request import DECODING, DONE, PREFILLING, WAITING, Req
from llmscale.types import Phase

if TYPE_CHECKING:
    from llmscale.sim.fleet import Fleet

__all__ = ["BLOCK_TOKENS", "Replica"]

#: vLLM's default KV block size, in tokens.
BLOCK_TOKENS = 16

# What the replica is doing between events.
IDLE = 0
MIXED = 1  # one iteration that includes prefill chunks
JUMP = 2  # n decode-only iterations in closed form


class Replica:
    """A replica's engine state and its exporter-visible counters."""

    __slots__ = (
        "active_s",
        "affine",
        "blocks_used",
        "busy_s",
        "chunks",
        "counter",
        "created_s",
        "drain_epoch",
        "drain_until_idle",
        "dram_bytes",
        "fin_heap",
        "fleet",
        "gen_tokens_total",
        "gone_s",
        "hist_e2e",
        "hist_itl",
        "hist_queue",
        "hist_tpot",
        "hist_ttft",
        "kind",
        "max_batched_tokens",
        "max_jump",
        "max_seqs",
        "n_dec",
        "name",
        "num_preemptions",
        "order",
        "outstanding",
        "perf",
        "phase",
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
        "prefilling",
        "prompt_tokens_total",
        "requests_finished",
        "sum_kv",
        "timeout_s",
        "total_blocks",
        "version",
        "waiting",
    )

    def __init__(
        self,
        name: str,
        fleet: Fleet,
        perf: Any,
        *,
        total_blocks: int,
        max_seqs: int,
        max_batched_tokens: int,
        timeout_s: float,
        created_s: float,
        phase: Phase,
        histogram_bounds: dict[str, tuple[float, ...]],
        max_jump: int | None = None,
    ) -> None:
        self.name = name
        self.fleet = fleet
        self.perf = perf
        self.affine = perf.decode_affine
        self.total_blocks = total_blocks
        self.max_seqs = max_seqs
        self.max_batched_tokens = max_batched_tokens
        self.timeout_s = timeout_s
        self.max_jump = max_jump
        self.created_s = created_s
        self.phase = phase
        self.phase_since_s = created_s
        self.gone_s = -1.0
        self.drain_until_idle = False
        self.drain_epoch = 0

        self.waiting: deque[Req] = deque()
        self.prefilling: list[Req] = []
        # Running requests in admission order (dict as an ordered set): the last one is preempted first.
        self.order: dict[Req, None] = {}
        self.outstanding = 0  # waiting + running: what the router balances on

        self.n_dec = 0
        self.sum_kv = 0
        self.counter = 0
        self.phase_cnt = [0] * BLOCK_TOKENS
        self.fin_heap: list[tuple[int, int, Req]] = []
        self.blocks_used = 0

        self.kind = IDLE
        self.version = 0
        self.chunks: list[tuple[Req, int]] = []
        self.plan_t0 = 0.0
        self.plan_n = 0
        self.plan_a = 0.0
        self.plan_b = 0.0
        self.plan_end = 0.0
        self.plan_busy_a = 0.0
        self.plan_busy_b = 0.0
        self.plan_bytes_a = 0.0
        self.plan_bytes_b = 0.0

        # Cumulative counters, as an exporter would expose them.
        self.num_preemptions = 0
        self.prompt_tokens_total = 0
        self.gen_tokens_total = 0
        self.requests_finished = 0
        self.busy_s = 0.0  # SM-busy seconds (useful math at achieved peak)
        self.active_s = 0.0  # seconds an iteration was running (a kernel was resident)
        self.dram_bytes = 0.0
        self.hist_ttft = BucketHistogram(histogram_bounds["ttft"])
        self.hist_e2e = BucketHistogram(histogram_bounds["e2e"])
        self.hist_itl = BucketHistogram(histogram_bounds["itl"])
        self.hist_tpot = BucketHistogram(histogram_bounds["itl"])
        self.hist_queue = BucketHistogram(histogram_bounds["e2e"])

    # ------------------------------------------------------------------ views

    @property
    def num_running(self) -> int:
        return len(self.order)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def busy(self) -> bool:
        return self.kind != IDLE

    def kv_usage(self) -> float:
        """Fraction of KV blocks allocated, 0..1 (call :meth:`sync` first for mid-jump accuracy)."""
        return self.blocks_used / self.total_blocks if self.total_blocks else 0.0

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
            self._schedule(now)
        elif kind == JUMP and self.plan_n > 1 and len(self.order) < self.max_seqs:
            # Only worth cutting the jump if the newcomer could be admitted at the next step.
            self._cut_jump(now)

    def _cut_jump(self, now: float) -> None:
        """End the running jump after the step in progress at ``now``."""
        k = self._steps_done_by(now)
        if k:
            self._apply_decode_steps(k)
        if self.plan_n > 1:
            self.plan_n = 1
            self.plan_end = self.plan_t0 + self.plan_a
            self.version += 1
            self.fleet.push_step(self.plan_end, self)

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
        while waiting:
            head = waiting[0]
            if head.first_token_s >= 0.0 or now - head.arrival_s < timeout_s:
                break
            waiting.popleft()
            self.outstanding -= 1
            self.fleet.on_timed_out(head, now)

    # ------------------------------------------------------------- stepping

    def on_step_end(self, now: float) -> None:
        """Apply the iteration(s) that end at ``now`` and schedule the next one."""
        kind = self.kind
        if kind == JUMP:
            self._apply_decode_steps(self.plan_n)
        elif kind == MIXED:
            self._apply_mixed(now)
        self.kind = IDLE
        self._finish_due(now)
        if self.phase == Phase.DRAINING and self.outstanding == 0:
            self.fleet.on_drained(self, now)
            return
        self._schedule(now)

    def _steps_done_by(self, now: float) -> int:
        """Whole steps of the current jump finished by ``now`` (at most plan_n - 1 before plan_end)."""
        dt = now - self.plan_t0
        if dt <= 0.0:
            return 0
        if now >= self.plan_end:
            return self.plan_n
        a = self.plan_a
        b = self.plan_b
        if b <= 0.0:
            k = int(dt / a)
        else:
            h = a - 0.5 * b
            k = int((math.sqrt(h * h + 2.0 * b * dt) - h) / b)
        # Guard float rounding at a step boundary: T(k) <= dt < T(k+1).
        if k > 0 and k * a + b * k * (k - 1) * 0.5 > dt:
            k -= 1
        if k >= self.plan_n:
            k = self.plan_n - 1
        return k

    def _apply_decode_steps(self, k: int) -> None:
        """Advance the decode batch by k steps of the current jump (closed form)."""
        n_dec = self.n_dec
        a = self.plan_a
        b = self.plan_b
        duration = k * a + b * k * (k - 1) * 0.5
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
        tri = k * (k - 1) * 0.5
        self.busy_s += k * self.plan_busy_a + self.plan_busy_b * tri
        self.dram_bytes += k * self.plan_bytes_a + self.plan_bytes_b * tri
        self.active_s += duration
        self.hist_itl.observe_arithmetic(a, b, k, n_dec)
        self.gen_tokens_total += k * n_dec
        self.counter = counter + k
        self.sum_kv += k * n_dec
        self.plan_t0 += duration
        self.plan_a = a + b * k
        self.plan_busy_a += self.plan_busy_b * k
        self.plan_bytes_a += self.plan_bytes_b * k
        self.plan_n -= k

    def _apply_mixed(self, now: float) -> None:
        """Effects of one iteration with prefill chunks, ending at ``now``."""
        n_dec = self.n_dec
        if n_dec:
            self.hist_itl.observe(self.plan_a, n_dec)
            self.gen_tokens_total += n_dec
            self.counter += 1
            self.sum_kv += n_dec
        counter = self.counter
        for req, chunk in self.chunks:
            if req.state != PREFILLING or req.replica is not self:
                continue  # preempted while its chunk ran: its work is lost (recompute)
            req.prefilled += chunk
            if req.prefilled < req.prefill_target:
                continue
            # Prefill done: this iteration produced the next token.
            self.prefilling.remove(req)
            req.generated += 1
            self.gen_tokens_total += 1
            if req.first_token_s < 0.0:
                req.first_token_s = now
                self.hist_ttft.observe(now - req.dispatch_s)
            if req.generated >= req.output_tokens:
                self._release(req, -(-req.prefill_target // BLOCK_TOKENS))
                self._complete(req, now)
                continue
            kv = req.prefill_target
            req.state = DECODING
            req.kv_join = kv
            req.gen_join = req.generated
            req.counter_join = counter
            self.phase_cnt[(kv - counter) & 15] += 1
            self.n_dec += 1
            self.sum_kv += kv
            heappush(self.fin_heap, (counter + req.output_tokens - req.generated, req.idx, req))
        self.chunks = []

    def _finish_due(self, now: float) -> None:
        """Complete every decoding request whose last token was produced by the step that just ended."""
        heap = self.fin_heap
        counter = self.counter
        while heap:
            f, _, req = heap[0]
            if f > counter:
                break
            heappop(heap)
            if req.state != DECODING or req.replica is not self:
                continue
            if f != req.counter_join + req.output_tokens - req.gen_join:
                continue  # stale entry from before a preemption
            steps = counter - req.counter_join
            kv = req.kv_join + steps
            req.generated = req.gen_join + steps
            self.phase_cnt[(req.kv_join - req.counter_join) & 15] -= 1
            self.n_dec -= 1
            self.sum_kv -= kv
            self._release(req, -(-kv // BLOCK_TOKENS))
            self._complete(req, now)

    def _release(self, req: Req, blocks: int) -> None:
        self.blocks_used -= blocks
        del self.order[req]

    def _complete(self, req: Req, now: float) -> None:
        req.state = DONE
        self.outstanding -= 1
        self.requests_finished += 1
        e2e = now - req.dispatch_s
        self.hist_e2e.observe(e2e)
        if req.output_tokens > 1:
            self.hist_tpot.observe((now - req.first_token_s) / (req.output_tokens - 1))
        self.fleet.on_complete(req, now)

    # ------------------------------------------------------------ scheduling

    def _schedule(self, now: float) -> None:
        """Plan the next iteration starting at ``now`` (or go idle)."""
        if self.phase == Phase.DRAINING and self.outstanding == 0:
            return
        # 1. Decodes need a block for the token they are about to write; preempt if short.
        dec_need = 0
        if self.n_dec:
            while True:
                dec_need = self.phase_cnt[(-self.counter) & 15]
                if dec_need <= self.total_blocks - self.blocks_used or not self._preempt_last():
                    break
        # Blocks left for prefill once this step's decode blocks are set aside.
        total_blocks = self.total_blocks - dec_need
        budget = self.max_batched_tokens - self.n_dec
        chunks: list[tuple[Req, int]] = []
        pf_tokens = 0
        pairs = 0.0
        # 2. Running partial prefills keep their place.
        for req in self.prefilling:
            if budget <= 0:
                break
            done = req.prefilled
            c = req.prefill_target - done
            if c > budget:
                c = budget
            blocks = -(-(done + c) // BLOCK_TOKENS) - (-(-done // BLOCK_TOKENS))
            if blocks > total_blocks - self.blocks_used:
                break
            self.blocks_used += blocks
            chunks.append((req, c))
            pf_tokens += c
            pairs += c * (done + (c + 1) * 0.5)
            budget -= c
        # 3. Admit waiting requests first-come-first-served.
        waiting = self.waiting
        if waiting and budget > 0:
            order = self.order
            max_seqs = self.max_seqs
            timeout_s = self.timeout_s
            while waiting and budget > 0 and len(order) < max_seqs:
                req = waiting[0]
                if req.first_token_s < 0.0 and now - req.arrival_s >= timeout_s:
                    waiting.popleft()
                    self.outstanding -= 1
                    self.fleet.on_timed_out(req, now)
                    continue
                c = req.prefill_target
                if c > budget:
                    c = budget
                blocks = -(-c // BLOCK_TOKENS)
                if blocks > total_blocks - self.blocks_used:
                    break
                waiting.popleft()
                self.blocks_used += blocks
                req.state = PREFILLING
                req.prefilled = 0
                if req.scheduled_s < 0.0:
                    req.scheduled_s = now
                    self.hist_queue.observe(now - req.dispatch_s)
                    self.prompt_tokens_total += req.input_tokens
                order[req] = None
                self.prefilling.append(req)
                chunks.append((req, c))
                pf_tokens += c
                pairs += c * (c + 1) * 0.5
                budget -= c
        if chunks:
            n_dec = self.n_dec
            self.blocks_used += dec_need
            cost = self.perf.step(pf_tokens, pairs, len(chunks), n_dec, self.sum_kv)
            d = cost.duration_s * self.fleet.noise()
            self.busy_s += cost.sm_busy_s
            self.dram_bytes += cost.dram_bytes
            self.active_s += d
            self.chunks = chunks
            self.kind = MIXED
            self.plan_a = d
            self.plan_t0 = now
            self.plan_end = now + d
            self.version += 1
            self.fleet.push_step(self.plan_end, self)
            return
        if self.n_dec:
            self._plan_jump(now)
        else:
            self.kind = IDLE

    def _plan_jump(self, now: float) -> None:
        heap = self.fin_heap
        while True:
            f, _, req = heap[0]
            if (
                req.state == DECODING
                and req.replica is self
                and f == req.counter_join + req.output_tokens - req.gen_join
            ):
                break
            heappop(heap)
        n = f - self.counter
        if self.max_jump is not None and n > self.max_jump:
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
        aff = self.affine(n_dec)
        s = self.sum_kv
        noise = self.fleet.noise()
        a = (aff.base_s + aff.per_ctx_s * s) * noise
        b = aff.per_ctx_s * n_dec * noise
        self.plan_a = a
        self.plan_b = b
        self.plan_busy_a = aff.busy_base_s + aff.busy_per_ctx_s * s
        self.plan_busy_b = aff.busy_per_ctx_s * n_dec
        self.plan_bytes_a = aff.bytes_base + aff.bytes_per_ctx * s
        self.plan_bytes_b = aff.bytes_per_ctx * n_dec
        self.plan_n = n
        self.plan_t0 = now
        self.plan_end = now + n * a + b * n * (n - 1) * 0.5
        self.kind = JUMP
        self.version += 1
        self.fleet.push_step(self.plan_end, self)

    def _steps_until_blocks_run_out(self, free: int) -> int:
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
        if not self.order:
            return False
        victim = next(reversed(self.order))
        if victim.state == DECODING:
            steps = self.counter - victim.counter_join
            kv = victim.kv_join + steps
            victim.generated = victim.gen_join + steps
            self.phase_cnt[(victim.kv_join - victim.counter_join) & 15] -= 1
            self.n_dec -= 1
            self.sum_kv -= kv
            self._release(victim, -(-kv // BLOCK_TOKENS))
        else:
            self.prefilling.remove(victim)
            self._release(victim, -(-victim.prefilled // BLOCK_TOKENS))
        # Recompute: the prompt and every generated token are prefilled again.
        victim.prefill_target = victim.input_tokens + victim.generated
        victim.prefilled = 0
        victim.state = WAITING
        self.waiting.appendleft(victim)
        self.num_preemptions += 1
        return True

    # ------------------------------------------------------------ shutdown

    def kill_all(self, now: float) -> list[Req]:
        """Drop every in-flight request (grace period expired); returns them."""
        killed = list(self.order) + list(self.waiting)
        for req in killed:
            req.state = DONE
        self.order.clear()
        self.waiting.clear()
        self.prefilling.clear()
        self.fin_heap.clear()
        self.n_dec = 0
        self.sum_kv = 0
        self.phase_cnt = [0] * BLOCK_TOKENS
        self.blocks_used = 0
        self.outstanding = 0
        self.kind = IDLE
        self.version += 1
        return killed
