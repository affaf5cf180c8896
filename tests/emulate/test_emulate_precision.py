"""``llmscale emulate --quantization fp8 --kv-cache-dtype fp8`` serves FP8 replicas (docs/fp8.md).

A real emulate subprocess per format: its replicas' ``vllm:cache_config_info`` names the KV cache
dtype as vLLM's label does, and an FP8 KV cache holds twice the blocks of a bf16 one (1 byte a
value; FP8 weights free ~7 GB more for it on Llama-3-8B / H100).
"""

from __future__ import annotations

import re
import urllib.request

import pytest

from llmscale.emulate import EmulateConfig
from llmscale.errors import ConfigError
from support.emulate_proc import start_emulate, stop_emulate


def _cache_info(*args: str) -> dict[str, str]:
    ep = start_emulate("--replicas", "1", *args)
    try:
        url = next(iter(ep.replica_urls.values()))
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as resp:
            page = resp.read().decode()
    finally:
        stop_emulate(ep.proc)
    line = next(x for x in page.splitlines() if x.startswith("vllm:cache_config_info{"))
    return dict(re.findall(r'(\w+)="([^"]*)"', line))


def test_fp8_replicas_report_the_fp8_cache_and_hold_twice_the_blocks():
    bf16 = _cache_info()
    fp8 = _cache_info("--quantization", "fp8", "--kv-cache-dtype", "fp8")
    assert bf16["cache_dtype"] == "auto" and fp8["cache_dtype"] == "fp8"
    # bf16: 449,866 tokens in the pool; FP8 weights + KV: 1,006,229 (docs/fp8.md), 16-token blocks
    ratio = int(fp8["num_gpu_blocks"]) / int(bf16["num_gpu_blocks"])
    assert ratio == pytest.approx(1_006_229 / 449_866, rel=0.01)


def test_unknown_formats_are_refused_naming_the_field():
    with pytest.raises(ConfigError, match="kv_cache_dtype = 'int4'"):
        EmulateConfig(kv_cache_dtype="int4")
    assert EmulateConfig(quantization="fp8").precision.label() == "fp8 weights, bf16 KV"
