"""Cold-start defaults against the published vLLM start-up figures."""

from __future__ import annotations

import pytest

from llmscale.errors import ConfigError
from llmscale.perf import ColdStart, cold_start


def test_llama2_7b_a100_matches_published_45_s() -> None:
    cs = cold_start("llama-2-7b", "a100", 1)
    assert isinstance(cs, ColdStart)
    # Published: about 45 s wall for bootstrap + weights + compile + graphs.
    assert 40.0 <= cs.loading_s + cs.warmup_s <= 55.0
    # Weight load of 13.5 GB in ~7.6 s after a ~10 s bootstrap.
    assert cs.loading_s == pytest.approx(10.0 + 7.6, abs=0.1)
    assert cs.pending_s == 60.0
    assert cs.total_s == pytest.approx(cs.pending_s + cs.loading_s + cs.warmup_s)


def test_llama2_13b_a100_matches_published_59_s() -> None:
    cs = cold_start("meta-llama/Llama-2-13b-hf", "a100-80gb", 1)
    assert cs.loading_s + cs.warmup_s == pytest.approx(59.0, abs=1.0)


def test_bigger_shards_start_slower_and_tp_shards_load_in_parallel() -> None:
    small = cold_start("llama-3-8b", "h100", 1)
    big = cold_start("llama-2-70b", "a100", 4)
    assert big.loading_s > small.loading_s
    assert big.warmup_s > small.warmup_s
    tp8 = cold_start("llama-2-70b", "a100", 8)
    assert tp8.loading_s < big.loading_s


def test_pending_is_a_parameter_and_validated() -> None:
    assert cold_start("llama-3-8b", "h100", 1, pending_s=5.0).pending_s == 5.0
    with pytest.raises(ConfigError):
        cold_start("llama-3-8b", "h100", 1, pending_s=-1.0)
    with pytest.raises(ConfigError):
        cold_start("llama-3-8b", "h100", 3)
    with pytest.raises(ConfigError):
        cold_start("nope", "h100", 1)
