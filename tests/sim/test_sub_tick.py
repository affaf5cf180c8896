"""Seed 004's 100 ms bandwidth samples and per-second queue samples from the simulator (sim/sub_tick.py)."""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np
import pytest

from llmscale.backtest.runner import BacktestSettings, run_policy
from llmscale.metrics.names import DCGM
from llmscale.metrics.names import VllmMetric as V
from llmscale.perf import get_perf_model
from llmscale.sim.config import SimConfig
from llmscale.sim.exporter import SimMetricSource
from llmscale.sim.fleet import Fleet
from llmscale.sim.sub_tick import StepBuckets
from llmscale.types import Decision, Signals
from llmscale.workloads import make_preset


def test_a_span_is_spread_over_its_buckets():
    log = StepBuckets(0.0)
    log.add(0.17, 0.22, 30e6, 10.0)  # the docstring's example: 0.03 s in bucket 1, 0.02 s in bucket 2
    log.add(0.25, 0.25, 5e6)  # a span of no length: all in its bucket
    log.add(0.29, 0.29, 0.0, 3.0)  # a prefill iteration's tokens, at its end
    end_s, got, tokens = log.take(0.3)
    assert end_s == pytest.approx(0.3)
    assert got == pytest.approx([0.0, 18e6, 17e6])
    assert tokens == pytest.approx([0.0, 6.0, 7.0])
    # the next take starts where this one ended; idle buckets read 0
    log.add(0.31, 0.32, 1e6)
    end_s, got, tokens = log.take(0.55)
    assert end_s == pytest.approx(0.5) and got == pytest.approx([1e6, 0.0]) and tokens == [0.0, 0.0]
    assert log.take(0.55) == (pytest.approx(0.5), [], [])


def test_a_long_span_and_the_part_before_the_log():
    log = StepBuckets(1.0)  # buckets from t = 1.0
    log.add(0.9, 1.3, 4e6)  # 1 MB per 0.1 s; [0.9, 1.0) predates the log
    end_s, got, _ = log.take(2.0)
    assert end_s == pytest.approx(2.0)
    assert got == pytest.approx([1e6, 1e6, 1e6] + [0.0] * 7)


def _fleet(seed: int = 3) -> Fleet:
    w = make_preset("default", seed=seed, duration_s=240.0, rate_rps_mean=25.0)
    return Fleet(
        get_perf_model("llama-3-8b", "h100-80gb", 1),
        SimConfig(gpu_memory_utilization=0.5),
        w.arrival_s,
        w.input_tokens,
        w.output_tokens,
        initial_replicas=3,
        gpus_per_replica=1,
    )


def _drive(fleet: Fleet, source: SimMetricSource, until_s: float, tick_s: float = 15.0) -> list:
    observations = []
    for sec in range(1, int(until_s) + 1):
        t = float(sec)
        fleet.run_until(t)
        if source.sub_tick:
            source.sample_queue(t)
        if t % tick_s == 0.0:
            observations.append(source.observe(t))
    return observations


def test_every_byte_lands_in_one_100ms_sample_and_observing_changes_nothing():
    fleet = _fleet()
    source = SimMetricSource(fleet, sub_tick=True)
    observations = _drive(fleet, source, 240.0)
    cap = 3.35e12 * 0.1  # an H100's HBM peak over 100 ms
    for r in fleet.replicas:
        series = [
            s.sub_tick[DCGM.DRAM_ACTIVE] for o in observations for s in o.replicas if s.replica == r.name
        ]
        # contiguous: each tick's samples start where the previous tick's ended, 100 ms apart
        ends = [e for s in series for e in s.ends_s()]
        assert np.allclose(np.diff(ends), 0.1)
        assert ends[0] == pytest.approx(0.1) and 239.8 <= ends[-1] <= 240.0
        values = [v for s in series for v in s.values]
        assert max(values) < 1.0  # nothing clamped, so the bytes add up
        pending = sum(r.step_log._buf)  # a prefill iteration's bytes past the last sample
        assert sum(values) * cap + pending == pytest.approx(r.dram_bytes, rel=1e-9)
        # every generated token too: in a sample, or in a bucket still open
        tokens = [
            v
            for o in observations
            for s in o.replicas
            if s.replica == r.name
            for v in s.sub_tick[V.GENERATION_TOKENS].values
        ]
        assert sum(tokens) + sum(r.step_log._tok) == pytest.approx(r.gen_tokens_total, rel=1e-12)
        # a decode-bound replica's 100 ms readings spread around the tick means (0.3-0.6 here)
        assert 0.2 < float(np.mean(values)) < 0.7
    # the queue every second: 15 samples per tick, the gateway plus the serving replicas' waiting
    q = [o.queue_per_s for o in observations]
    assert all(
        s is not None and len(s.values) == 15 and s.end_s == o.time_s
        for s, o in zip(q, observations, strict=True)
    )
    # sampling at 100 ms and every second leaves the simulation as it was (observed at the same ticks:
    # an observation syncs the replicas, which rounds a decode jump's times differently, ~1e-15 s)
    plain = _fleet()
    _drive(plain, SimMetricSource(plain), 240.0)
    np.testing.assert_array_equal(plain.ttft_s, fleet.ttft_s)
    np.testing.assert_array_equal(plain.e2e_s, fleet.e2e_s)


@dataclass(frozen=True)
class _Recorder:
    """A policy that holds and keeps the notes of the two signals (reads them at their resolution)."""

    notes: list[tuple[str, str]] = field(default_factory=list)
    name: str = "recorder"
    tick_s: float = 15.0
    reads: frozenset[str] = frozenset({"bw_saturation_p95", "queue_entropy", "generation_tps_adaptive"})
    rates: list[tuple[float | None, float | None]] = field(default_factory=list)

    def initial_state(self) -> None:
        return None

    def decide(self, signals: Signals, state: None, now_s: float) -> tuple[Decision, None]:
        self.notes.append((signals.values["bw_saturation_p95"].note, signals.values["queue_entropy"].note))
        self.rates.append((signals.get("generation_tps_adaptive"), signals.get("generation_tps")))
        return Decision(signals.fleet.spec_replicas, "hold"), None


def test_a_backtest_policy_that_reads_them_gets_600_samples_a_minute():
    w = make_preset("bandwidth-bound", seed=1, duration_s=180.0)
    settings = BacktestSettings(min_replicas=2, max_replicas=2, initial_replicas=2)
    policy = _Recorder()
    run_policy(w, "recorder", settings, policy=policy)
    bw, ent = zip(*policy.notes[4:12], strict=True)  # from t = 75 s (a full minute), while arrivals last
    for note in bw:
        per_replica = float(note.split(" replica(s), ")[1].split(" ")[0])
        assert 598.0 <= per_replica <= 600.0, note
        assert "100 ms samples" in note
    assert all(n.startswith("30 one-second sample(s)") for n in ent), ent
    # tokens/s over a window of 200-1000 ms against the counter rate over the last minute: a steady
    # 15 req/s of long answers on 2 replicas generate ~11,000 tokens/s either way, give or take a burst
    for adaptive, per_minute in policy.rates[4:12]:
        assert adaptive is not None and per_minute is not None
        assert 0.75 * per_minute < adaptive < 1.25 * per_minute  # measured: 0.93-1.09


def test_sampling_them_changes_no_result():
    """A run that samples them (a decision log is written) stops every simulated second; it ends at
    the same stop and gives the same results as one that does not (knative-kpa's 2 s ticks: a stop
    after the last request finished but before the next tick would have ended it early)."""
    w = make_preset("default", seed=0, duration_s=600.0)
    settings = BacktestSettings(min_replicas=1, max_replicas=16, initial_replicas=2).with_cold_start()
    stops: tuple[list[float], list[float]] = ([], [])
    plain = run_policy(w, "knative-kpa", settings, progress=stops[0].append)
    sampled = run_policy(w, "knative-kpa", settings, decisions_out=io.StringIO(), progress=stops[1].append)
    assert {**sampled.summary, "wall_s": 0.0} == {**plain.summary, "wall_s": 0.0}
    assert sampled.series == plain.series
    assert stops[1] == stops[0]  # the same ticks and samples, the last one included
