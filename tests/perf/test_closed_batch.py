"""Closed batches: a recorded schedule prices exactly what the simulator simulates, with any coefficients."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from llmscale.errors import ConfigError
from llmscale.offline.closed_batch import EngineSettings, schedule, simulate_makespan_s
from llmscale.perf import get_perf_model
from llmscale.perf.coefficients import load_coefficients
from llmscale.perf.step_time import PerfModel
from llmscale.sim.config import SimConfig
from llmscale.sim.fleet import Fleet

V0 = EngineSettings.vllm_v0(4096)
V1 = EngineSettings()


@pytest.mark.parametrize(
    ("model", "gpu", "tp", "length", "batch", "engine"),
    [
        pytest.param("llama-2-7b", "h100", 1, 128, 1, V0, id="batch1-v0"),
        pytest.param("llama-2-7b", "h100", 1, 512, 64, V0, id="batch64-v0"),
        pytest.param("llama-2-7b", "a100-40gb", 1, 2048, 64, V0, id="preempting-v0"),
        pytest.param("llama-2-7b", "h100", 4, 1024, 32, V1, id="tp4-chunked"),
        pytest.param("mixtral-8x7b", "a100-40gb", 4, 256, 16, V1, id="moe-chunked"),
    ],
)
def test_schedule_prices_exactly_what_the_simulator_simulates(
    model: str, gpu: str, tp: int, length: int, batch: int, engine: EngineSettings
) -> None:
    sched = schedule(model, gpu, tp, length, length, batch, engine)
    simulated = simulate_makespan_s(model, gpu, tp, length, length, batch, engine)
    assert sched.makespan_s(get_perf_model(model, gpu, tp)) == pytest.approx(simulated, rel=1e-9)
    # With other coefficients the replay still matches a simulation with those coefficients:
    # the schedule does not depend on how long an iteration takes.
    c = load_coefficients()
    slow = replace(c, cpu_iter_s=c.cpu_iter_s + 0.004, attn_kv_bw_eff=c.attn_kv_bw_eff / 2)
    pm = PerfModel(model, gpu, tp, slow)
    cfg = engine.sim_config(timeout_s=float("inf"), pending_s=0.0, loading_s=0.0, warmup_s=0.0)
    fleet = Fleet(
        pm,
        cfg,
        np.zeros(batch),
        np.full(batch, length, dtype=np.int64),
        np.full(batch, length, dtype=np.int64),
        initial_replicas=1,
        gpus_per_replica=tp,
    )
    fleet.run_until(1e7)
    assert sched.makespan_s(pm) == pytest.approx(float(np.nanmax(np.asarray(fleet.finish_at_s))), rel=1e-9)


def test_requests_arriving_together_share_the_first_iteration() -> None:
    # Sixteen 1,024-token prompts sent at once: without chunking and a 4,096-token budget vLLM V0
    # prefills them four to an iteration; the first iteration must not run one prompt alone.
    sched = schedule("llama-2-7b", "h100", 1, 1024, 1, 16, V0)
    prefill_rows = sched.steps[sched.steps[:, 3] > 0]
    assert prefill_rows[:, 3].tolist() == [4.0, 4.0, 4.0, 4.0]
    assert sched.iterations == 4


def test_without_chunked_prefill_decodes_wait_for_prefill_only_iterations() -> None:
    v0 = schedule("llama-2-7b", "h100", 1, 512, 64, 64, V0)
    assert not np.any((v0.steps[:, 3] > 0) & (v0.steps[:, 4] > 0)), "a V0 prefill iteration carried decodes"
    v1 = schedule("llama-2-7b", "h100", 1, 512, 64, 64, V1)
    assert np.any((v1.steps[:, 3] > 0) & (v1.steps[:, 4] > 0)), "chunked prefill never mixed decodes in"


def test_kv_shortage_preempts_on_a_40gb_card_and_not_on_an_80gb_one() -> None:
    # 64 x (2,048 + 2,048) tokens of Llama-2-7B's 512 KiB/token KV: 128 GiB, far beyond either card.
    small = schedule("llama-2-7b", "a100-40gb", 1, 2048, 2048, 64, V0)
    assert small.preemptions > 0
    # Mistral's GQA cache (128 KiB/token) needs 32 GiB: fits an 80 GB H100.
    assert schedule("mistral-7b", "h100", 1, 2048, 2048, 64, EngineSettings.vllm_v0(32768)).preemptions == 0


def test_unchunked_budget_below_the_context_is_refused_like_vllm() -> None:
    with pytest.raises(ConfigError, match="max_num_batched_tokens"):
        schedule(
            "llama-3-8b",
            "h100",
            1,
            100,
            100,
            2,
            EngineSettings(max_num_batched_tokens=2048, chunked_prefill=False),
        )
    with pytest.raises(ConfigError):
        schedule("llama-2-7b", "h100", 1, 0, 10, 1, V0)
    assert SimConfig().chunked_prefill is True
