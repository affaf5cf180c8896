"""The fast exposition reader agrees with prometheus_client's parser (the reference) on exporters' text.

Pages are rendered by prometheus_client itself from random registries
(gauges, counters, histograms, label sets, values including NaN and
infinities), so they look like vLLM's. The fast reader must accept them
without falling back (that is its purpose: speed on the common case) and
fold them exactly as the reference does.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from llmscale.metrics import exposition
from llmscale.metrics.exposition import parse_exposition_reference

_names = st.sampled_from(
    [
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "tgi_queue_size",
        "vllm:prompt_tokens",
        "vllm:time_to_first_token_seconds",
        "nv_inference_pending_request_count",
    ]
)
_label_values = st.text(alphabet="abcxyz019-_.:/ ", min_size=0, max_size=8)
_values = st.one_of(
    st.floats(min_value=-1e9, max_value=1e12, allow_nan=False),
    st.sampled_from([math.nan, math.inf, 0.0, 1e-9]),
)


@st.composite
def registries(draw):
    reg = CollectorRegistry()
    used = set()
    for _ in range(draw(st.integers(1, 6))):
        name = draw(_names)
        kind = draw(st.sampled_from(["gauge", "counter", "histogram"]))
        if name in used:
            continue
        used.add(name)
        labelnames = draw(st.sampled_from([(), ("engine",), ("model_name", "engine"), ("gpu", "pod")]))
        label_sets = draw(
            st.lists(st.tuples(*[_label_values] * len(labelnames)), min_size=1, max_size=3, unique=True)
        )
        if kind == "gauge":
            g = Gauge(name, "doc", labelnames, registry=reg)
            for ls in label_sets:
                (g.labels(*ls) if labelnames else g).set(draw(_values))
        elif kind == "counter":
            c = Counter(name, "doc", labelnames, registry=reg)
            for ls in label_sets:
                (c.labels(*ls) if labelnames else c).inc(draw(st.floats(0, 1e9)))
        else:
            bounds = sorted(set(draw(st.lists(st.floats(1e-4, 1e4), min_size=1, max_size=6))))
            h = Histogram(name, "doc", labelnames, buckets=bounds, registry=reg)
            for ls in label_sets:
                for v in draw(st.lists(st.floats(0, 2e4), max_size=8)):
                    (h.labels(*ls) if labelnames else h).observe(v)
    return reg


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


@settings(max_examples=40, deadline=None)
@given(registries())
def test_fast_reader_equals_reference(reg):
    text = generate_latest(reg).decode()
    folder = exposition._Folder()
    exposition._fast(text, None, folder)  # must not fall back on prometheus_client's own output
    fast = folder.page()
    ref = parse_exposition_reference(text)
    assert fast.values.keys() == ref.values.keys()
    for k, v in ref.values.items():
        assert _same(fast.values[k], v), (k, fast.values[k], v)
    assert fast.histograms == ref.histograms


@settings(max_examples=40, deadline=None)
@given(registries())
def test_page_reader_through_a_learnt_layout_equals_reference(reg):
    text = generate_latest(reg).decode()
    reader = exposition.PageReader()
    reader.parse(text, key="pod")  # learns the layout
    page = reader.parse(
        text, key="pod"
    )  # read through it (unless a NaN or +/-Inf pair needs the line reader)
    ref = parse_exposition_reference(text)
    assert page.values.keys() == ref.values.keys()
    for k, v in ref.values.items():
        assert _same(page.values[k], v), (k, page.values[k], v)
    assert page.histograms == ref.histograms
