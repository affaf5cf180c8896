"""dynamo-sla's capacity search beside ai-dynamo 1.6.1's own, in process (optional).

``dynamo/planner/core/perf_model/engine_query.py`` of the ``ai-dynamo==1.6.1``
wheel is loaded on its own (not through ``dynamo.planner``, whose package
imports the Kubernetes and runtime connectors) with stubs for the three
imports it cannot run here: ``msgspec``, the Rust simulator SDK
(``aisimulate_core.sdk``) and ``dynamo.common.forward_pass_metrics``. Its
``AISCoreEnginePerfModel`` then searches an aggregated engine's capacity with
its iteration time answered by the same linear stub llmscale's port is given,
so the batch sizes tried, the balance rule, the SLO test and the selection are
Dynamo's own and every result must be equal.

``./run-tests`` installs the wheel (``pip install --no-deps ai-dynamo==1.6.1``: its dependencies
are the Rust runtime; none is needed for this module); without it the tests fail, never skip.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmscale.policies.dynamo.capacity import agg_engine_capacity, capacity_batch_sizes

pytestmark = pytest.mark.peers


def _engine_query_path() -> Path | None:
    spec = importlib.util.find_spec("dynamo")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "planner/core/perf_model/engine_query.py"
    return path if path.is_file() else None


@dataclass(frozen=True)
class LinearStep:
    """base + per prompt token + per decode-context token, as both sides are asked."""

    base_s: float = 0.01
    per_prefill_token_s: float = 1e-4
    per_ctx_token_s: float = 1e-5

    def seconds(self, prefill_tokens: float, decode_kv: float) -> float:
        return self.base_s + self.per_prefill_token_s * prefill_tokens + self.per_ctx_token_s * decode_kv

    # llmscale's StepModel
    def step(self, prefill_tokens, prefill_attn_pairs, num_prefill_seqs, num_decode, decode_ctx_tokens):
        return types.SimpleNamespace(duration_s=self.seconds(prefill_tokens, decode_ctx_tokens))


@pytest.fixture
def engine_query(monkeypatch):
    path = _engine_query_path()
    if path is None:
        # ./run-tests installs it (scripts/bootstrap.sh --test): missing is a broken set-up, not a skip
        pytest.fail("needs the ai-dynamo 1.6.1 wheel: pip install --no-deps ai-dynamo==1.6.1")
    stubs = {
        "msgspec": types.ModuleType("msgspec"),
        "aisimulate_core": types.ModuleType("aisimulate_core"),
        "aisimulate_core.sdk": types.ModuleType("aisimulate_core.sdk"),
        "dynamo.common.forward_pass_metrics": types.ModuleType("dynamo.common.forward_pass_metrics"),
    }
    stubs["aisimulate_core.sdk"].RustForwardPassPerfModel = object  # type: ignore[attr-defined]
    fpm = stubs["dynamo.common.forward_pass_metrics"]
    fpm.FPM_VERSION = 1  # type: ignore[attr-defined]
    for name in ("ForwardPassMetrics", "QueuedRequestMetrics", "ScheduledRequestMetrics"):
        setattr(fpm, name, type(name, (), {}))
    for name, module in stubs.items():
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location("dynamo_1_6_1_engine_query", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def dynamo_capacity(eq, step: LinearStep, isl, osl, ttft_sla_s, itl_sla_s, mbt, max_kv, max_seqs):
    limits = eq.EnginePerfLimits(max_num_batched_tokens=mbt, max_num_seqs=max_seqs, max_kv_tokens=max_kv)
    engine = eq.AISCoreEnginePerfModel(
        model=None, worker_type="aggregated", limits=limits, attention_dp_size=1, max_observations=8
    )
    # Dynamo asks its simulator for a mixed iteration of (prefill tokens, decodes, decode KV).
    engine._mixed_time = lambda prefill, _decodes, decode_kv: step.seconds(prefill, decode_kv)
    request = eq.EngineCapacityRequest(isl=isl, osl=osl, ttft_sla_s=ttft_sla_s, itl_sla_s=itl_sla_s)
    return engine.find_engine_capacity_rps(request)


@pytest.mark.parametrize("max_batch", [1, 5, 127, 128, 129, 256, 1000, 8191])
def test_batch_sizes_equal_dynamos(engine_query, max_batch):
    assert capacity_batch_sizes(max_batch) == engine_query._capacity_batch_sizes(max_batch)


@pytest.mark.parametrize(
    ("step", "isl", "osl", "ttft_sla_s", "itl_sla_s", "mbt", "max_kv", "max_seqs"),
    [
        pytest.param(LinearStep(), 1000, 100, 2.0, 0.05, 8192, 10**7, 256, id="itl-binds"),
        pytest.param(LinearStep(), 1000, 100, 0.15, 0.1, 8192, 10**7, 256, id="ttft-binds"),
        pytest.param(LinearStep(), 1000, 100, 2.0, 0.01, 8192, 10**7, 256, id="unreachable-best-rate"),
        pytest.param(LinearStep(), 3000, 150, 0.5, 0.05, 8192, 450_000, 256, id="dynamo-defaults-kv-cap"),
        pytest.param(LinearStep(0.01, 0.0, 0.0), 100, 1, 10.0, 10.0, 8192, 10**7, 256, id="balance-rule"),
        pytest.param(LinearStep(0.005, 2e-5, 2e-6), 1150, 210, 2.0, 0.1, 8192, 600_000, 1024, id="1024-seqs"),
        pytest.param(LinearStep(), 9000, 50, 5.0, 0.2, 8192, 10**7, 256, id="prompt-over-a-chunk"),
    ],
)
def test_capacity_equals_dynamos(engine_query, step, isl, osl, ttft_sla_s, itl_sla_s, mbt, max_kv, max_seqs):
    theirs = dynamo_capacity(engine_query, step, isl, osl, ttft_sla_s, itl_sla_s, mbt, max_kv, max_seqs)
    ours = agg_engine_capacity(step, float(isl), float(osl), ttft_sla_s, itl_sla_s, mbt, max_kv, max_seqs)
    assert theirs is not None
    assert ours.engine_rps == pytest.approx(theirs.rps, rel=1e-12)
    assert ours.itl_s == pytest.approx(theirs.itl_s, rel=1e-12)
    assert ours.ttft_s == pytest.approx(theirs.ttft_s, rel=1e-12)
    assert ours.eligible == theirs.eligible
