"""Disaggregated prefill/decode pools (``sim/disagg.py``): the transfer, the TTFT path, conservation."""

from __future__ import annotations

import numpy as np
import pytest

from llmscale.errors import ConfigError
from llmscale.perf import get_perf_model
from llmscale.sim.config import SimConfig
from llmscale.sim.disagg import INTERCONNECTS, DisaggFleet, KvLoadedPerf, get_interconnect, kv_transfer_s
from llmscale.sim.fleet import Fleet
from llmscale.types import Status

PERF = get_perf_model("llama-3-8b", "h100-80gb", 1)


def _fleet(arr, inp, out, link="infiniband", p=1, d=1, cfg=None):
    return DisaggFleet(
        PERF,
        cfg or SimConfig(),
        np.asarray(arr, dtype=np.float64),
        np.asarray(inp, dtype=np.int64),
        np.asarray(out, dtype=np.int64),
        prefill_replicas=p,
        decode_replicas=d,
        gpus_per_replica=1.0,
        link=get_interconnect(link),
    )


def test_llama_8b_kv_bytes_per_token():
    # 2 (K and V) x 32 layers x 8 KV heads x 128 head dim x 2 bytes (bf16)
    assert PERF.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131_072


@pytest.mark.parametrize(
    ("link", "expected_s"),
    [
        pytest.param("nvlink", 2048 * 131_072 / 450e9 + 20e-6, id="nvlink4-0.62ms"),
        pytest.param("infiniband", 2048 * 131_072 / 50e9 + 50e-6, id="ndr-ib-5.42ms"),
        pytest.param("ethernet", 2048 * 131_072 / 12.5e9 + 100e-6, id="100gbe-21.6ms"),
    ],
)
def test_transfer_time_of_a_2048_token_prompt(link, expected_s):
    got = float(kv_transfer_s(2048, PERF.kv_bytes_per_token, INTERCONNECTS[link]))
    assert got == pytest.approx(expected_s, rel=1e-12)


def test_tp_shards_the_transfer():
    # At TP 2 each GPU holds and sends half of every token's KV over its own link.
    tp2 = get_perf_model("llama-3-8b", "h100-80gb", 2)
    link = INTERCONNECTS["infiniband"]
    one = float(kv_transfer_s(4096, PERF.kv_bytes_per_token, link)) - link.latency_s
    two = float(kv_transfer_s(4096, tp2.kv_bytes_per_token, link)) - link.latency_s
    assert two == pytest.approx(one / 2)


def test_unknown_interconnect_names_the_choices():
    with pytest.raises(ConfigError, match=r"interconnect = 'pcie'.*nvlink, infiniband, ethernet"):
        get_interconnect("pcie")


def test_decode_pool_prices_a_prompt_as_one_decode_slot():
    kv = KvLoadedPerf(PERF)
    got = kv.step(2048, 2048 * 2049 / 2, 1, 3, 900)
    want = PERF.step(0, 0.0, 0, 4, 2948)
    assert got.duration_s == want.duration_s
    # ... and far cheaper than computing the prompt
    assert got.duration_s < PERF.step(2048, 2048 * 2049 / 2, 1, 3, 900).duration_s / 3
    assert kv.kv_capacity_blocks is not None and kv.model is PERF.model


@pytest.mark.parametrize("link", list(INTERCONNECTS))
def test_ttft_is_prefill_plus_transfer_plus_first_decode_step(link):
    p, o = 2048, 10
    f = _fleet([1.0], [p], [o], link=link)
    f.run_until(100.0)
    out = f.outcomes()
    prefill_s = PERF.step(p, p * (p + 1) / 2, 1, 0, 0).duration_s
    transfer_s = float(kv_transfer_s(p, PERF.kv_bytes_per_token, INTERCONNECTS[link]))
    first_decode_s = PERF.step(0, 0.0, 0, 1, p).duration_s
    assert out["status"][0] == Status.COMPLETED
    assert f.handoff_s[0] == pytest.approx(1.0 + prefill_s + transfer_s, abs=1e-9)
    assert out["ttft_s"][0] == pytest.approx(prefill_s + transfer_s + first_decode_s, abs=1e-9)
    assert out["e2e_s"][0] > out["ttft_s"][0]
    assert f.decode.num_requests == 1


def test_a_slower_link_costs_exactly_the_transfer_difference():
    ttft = {}
    for link in ("nvlink", "ethernet"):
        f = _fleet([0.5], [4000], [50], link=link)
        f.run_until(60.0)
        ttft[link] = f.outcomes()["ttft_s"][0]
    diff = 4000 * 131_072 * (1 / 12.5e9 - 1 / 450e9) + (100e-6 - 20e-6)
    assert ttft["ethernet"] - ttft["nvlink"] == pytest.approx(diff, abs=1e-9)


def test_conservation_and_single_token_requests_skip_decode():
    rng = np.random.default_rng(7)
    n = 400
    arr = np.sort(rng.uniform(0.0, 40.0, n))
    inp = rng.integers(50, 3000, n)
    out = rng.integers(1, 200, n)
    out[::5] = 1  # 80 requests with nothing to decode
    f = _fleet(arr, inp, out, p=2, d=2)
    for t in np.arange(1.0, 300.0, 7.0):  # uneven steps: the hand-offs cross tick boundaries
        f.run_until(float(t))
    f.finish(300.0)
    res = f.outcomes()
    assert f.unresolved == 0 and f.arrivals_done
    assert np.all(res["status"] == Status.COMPLETED)
    # every request with tokens to decode reached the decode pool exactly once; the others never
    assert f.decode.num_requests == int((out > 1).sum())
    assert np.all((f.decode_idx >= 0) == (out > 1))
    assert sorted(f.decode_idx[f.decode_idx >= 0].tolist()) == list(range(f.decode.num_requests))
    # prefill replicas only prefill: one token per request, no inter-token latency observed
    assert np.all(np.isnan(np.asarray(f.prefill.tpot_s)))
    # the decode pool's arrivals are the prefill ends plus each prompt's transfer
    handed = f.decode_idx >= 0
    ends = np.asarray(f.prefill.finish_at_s)[handed]
    assert np.allclose(f.handoff_s[handed], ends + f.transfer_s[handed])
    assert np.all(res["ttft_s"] > 0) and np.all(res["e2e_s"] >= res["ttft_s"])


def test_same_work_as_an_aggregated_fleet_fewer_prefill_interruptions():
    # The same trace on 2+2 disaggregated replicas and on 4 aggregated ones: both complete it all,
    # and decode steps on the decode pool are never stretched by prompt chunks, so the P99 TPOT
    # is lower than the aggregated fleet's, where long prompts share iterations with decodes.
    rng = np.random.default_rng(3)
    n = 1500
    arr = np.sort(rng.uniform(0.0, 150.0, n))
    inp = rng.integers(1000, 6000, n)
    out = rng.integers(50, 300, n)
    f = _fleet(arr, inp, out, p=2, d=2)
    f.run_until(400.0)
    f.finish(400.0)
    agg = Fleet(PERF, SimConfig(), arr, inp, out, initial_replicas=4, gpus_per_replica=1.0)
    agg.run_until(400.0)
    agg.finish(400.0)
    res = f.outcomes()
    assert np.all(res["status"] == Status.COMPLETED)
    assert agg.counts[Status.COMPLETED] == n
    assert np.nanpercentile(res["tpot_s"], 99) < np.nanpercentile(np.asarray(agg.tpot_s), 99)
    assert f.gpu_seconds(400.0) == {"prefill": 800.0, "decode": 800.0}


def test_glitch_windows_are_refused():
    from llmscale.sim.faults import HbmGlitch

    cfg = SimConfig(hbm_glitches=(HbmGlitch(start_s=1.0, duration_s=1.0),))
    with pytest.raises(ConfigError, match="hbm_glitches"):
        _fleet([0.0], [10], [10], cfg=cfg)
