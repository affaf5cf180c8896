"""The tail model's in-flight context and bursty arrivals (perf/replica_tails.py, docs/tail-model.md)."""

from __future__ import annotations

import pytest

from llmscale.perf import get_perf_model
from llmscale.perf.replica_tails import TailModel, replica_capacity


@pytest.fixture(scope="module")
def tails() -> TailModel:
    return TailModel(get_perf_model("llama-3.1-8b", "h100-80gb", 1))


def test_the_batch_is_sized_at_the_in_flight_context(tails):
    # Reasoning-like outputs (600 / 2,000 tokens): at the same rate, outputs of CV 1 hold a mean
    # context of 600 + 2,000 = 2,600 tokens in flight, CV 0 (every output 2,000) 600 + 1,000 =
    # 1,600: the decode step is longer with the spread, the batch at the same rate larger.
    wide = tails.at(1.5, 600.0, 2000.0, 2.0, 0.1, output_cv=1.0)
    narrow = tails.at(1.5, 600.0, 2000.0, 2.0, 0.1, output_cv=0.0)
    assert wide.decode_step_s > narrow.decode_step_s
    assert wide.batch > narrow.batch
    assert tails.capacity_rps(600.0, 2000.0, 2.0, 0.1, output_cv=1.0) < tails.capacity_rps(
        600.0, 2000.0, 2.0, 0.1, output_cv=0.0
    )


def test_the_mean_mode_keeps_the_arriving_context(tails):
    # capacity-calibrated's mode sizes by an arriving request's occupancy (seed 000 4.2): the
    # output spread does not move its decode step.
    wide = tails.at(1.5, 600.0, 2000.0, 2.0, 0.1, output_cv=1.0, tails=False)
    inflight = tails.at(1.5, 600.0, 2000.0, 2.0, 0.1, output_cv=1.0)
    assert wide.decode_step_s < inflight.decode_step_s


def test_poisson_is_dispersion_one(tails):
    a = tails.capacity_rps(2000.0, 30.0, 2.0, 0.1, replicas=4)
    assert tails.capacity_rps(2000.0, 30.0, 2.0, 0.1, replicas=4, dispersion=1.0) == a
    # a burst of D dealt over k = D replicas is one request each: Poisson again per replica
    assert tails.capacity_rps(2000.0, 30.0, 2.0, 0.1, replicas=4, dispersion=4.0) == a


@pytest.mark.parametrize("shape", [(1155.0, 211.0), (2000.0, 30.0)], ids=["chat", "code"])
def test_bursts_lower_what_a_replica_holds(tails, shape):
    p, o = shape
    caps = [tails.capacity_rps(p, o, 2.0, 0.1, replicas=2, dispersion=d) for d in (1.0, 6.0, 12.0)]
    assert caps[0] >= caps[1] >= caps[2]
    assert caps[2] < caps[0]


def test_the_entry_point_buckets_the_new_inputs():
    a = replica_capacity(
        "llama-3-8b", "h100-80gb", 1, 1155.0, 211.0, 2.0, 0.1, output_cv=0.96, dispersion=1.0
    )
    b = replica_capacity(
        "llama-3-8b", "h100-80gb", 1, 1155.0, 211.0, 2.0, 0.1, output_cv=1.04, dispersion=0.7
    )
    assert a == b  # CV to 0.1, a dispersion below 1 is Poisson
