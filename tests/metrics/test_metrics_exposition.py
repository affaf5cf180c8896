"""Exposition text -> values and histograms: worked pages of every backend, labelled series, bad text."""

from __future__ import annotations

import math

import pytest
from metrics_pages import DCGM_TWO_GPUS, TGI, TRITON, VLLM_NEW, VLLM_OLD, dcgm_node_page

from llmscale.metrics.exposition import (
    ExpositionError,
    aggregation_of,
    parse_exposition,
    parse_exposition_reference,
)
from llmscale.metrics.names import DCGM, VLLM
from llmscale.metrics.names import TGI as TGI_NAMES
from llmscale.metrics.names import VLLM_OLD as VLLM_OLD_NAMES
from llmscale.types import Histogram

INF = math.inf


@pytest.mark.parametrize("parse", [parse_exposition, parse_exposition_reference], ids=["fast", "reference"])
@pytest.mark.parametrize(
    ("text", "values", "histograms", "absent"),
    [
        pytest.param(
            VLLM_NEW,
            {
                VLLM.running: 7.0,  # 4 + 3 over two engines
                VLLM.waiting: 7.0,  # 5 + 2
                VLLM.kv_usage: 0.375,  # (0.5 + 0.25) / 2: a pool usage averages
                VLLM.prompt_tokens: 1500.0,
            },
            {
                # bucket-wise sum of the engines: (2+1, 6+1, 9+3, 10+5); sums 4.5 + 6.0
                VLLM.ttft: Histogram((0.1, 0.5, 1.0, INF), (3.0, 7.0, 12.0, 15.0), 10.5, 15.0),
            },
            ("vllm:prompt_tokens_created", "vllm:time_to_first_token_seconds_created"),
            id="vllm-new-two-engines",
        ),
        pytest.param(
            VLLM_OLD,
            {
                VLLM_OLD_NAMES.running: 2.0,
                VLLM_OLD_NAMES.waiting: 1.0,
                VLLM_OLD_NAMES.kv_usage: 0.75,
                VLLM_OLD_NAMES.generation_tokens: 4096.0,
                "vllm:num_requests_swapped": 0.0,
            },
            {VLLM_OLD_NAMES.itl: Histogram((0.01, 0.025, INF), (10.0, 70.0, 100.0), 2.25, 100.0)},
            (VLLM.kv_usage,),
            id="vllm-old-names",
        ),
        pytest.param(
            TGI,
            {
                TGI_NAMES.waiting: 6.0,
                TGI_NAMES.running: 12.0,
                # declared as a counter without _total: kept as written, as Prometheus stores it
                "tgi_request_count": 340.0,
            },
            {TGI_NAMES.e2e: Histogram((0.5, 1.0, 5.0, INF), (10.0, 30.0, 38.0, 40.0), 61.5, 40.0)},
            ("tgi_request_count_total",),
            id="tgi",
        ),
        pytest.param(
            TRITON,
            {
                "nv_inference_pending_request_count": 7.0,  # 3 + 4 over two models
                "nv_gpu_utilization": 0.7,  # (0.9 + 0.5) / 2
                "nv_inference_request_success": 120.0,
            },
            {},
            (),
            id="triton",
        ),
        pytest.param(
            DCGM_TWO_GPUS,
            {
                DCGM.GPU_UTIL: 60.0,  # (80 + 40) / 2
                DCGM.FB_USED: 141000.0,  # MiB the pod holds on both GPUs
                DCGM.FB_FREE: 21000.0,
                DCGM.DRAM_ACTIVE: 0.5,
            },
            {},
            (),
            id="dcgm-two-gpus",
        ),
    ],
)
def test_worked_pages(parse, text, values, histograms, absent):
    page = parse(text)
    assert page.values.keys() >= values.keys()
    for name, want in values.items():
        assert page.values[name] == pytest.approx(want), name
    assert set(page.histograms) == set(histograms)
    for name, want in histograms.items():
        got = page.histograms[name]
        assert got.bounds == want.bounds
        assert got.cumulative == pytest.approx(want.cumulative)
        assert got.sum == pytest.approx(want.sum)
        assert got.count == pytest.approx(want.count)
        assert got.cumulative[-1] == got.count  # +Inf bucket is the count
    for name in absent:
        assert name not in page.values


@pytest.mark.parametrize(
    ("aggregated", "how"),
    [
        pytest.param(VLLM.waiting, "sum", id="waiting-adds"),
        pytest.param(VLLM.kv_usage, "mean", id="kv-averages"),
        pytest.param(VLLM_OLD_NAMES.kv_usage, "mean", id="old-kv-averages"),
        pytest.param(DCGM.GPU_UTIL, "mean", id="gpu-util-averages"),
        pytest.param(DCGM.SM_ACTIVE, "mean", id="prof-ratio-averages"),
        pytest.param(DCGM.FB_USED, "sum", id="fb-used-adds"),
        pytest.param("vllm:cache_config_info", "max", id="info-max"),
    ],
)
def test_aggregation_rules(aggregated, how):
    assert aggregation_of(aggregated) == how


@pytest.mark.parametrize("parse", [parse_exposition, parse_exposition_reference], ids=["fast", "reference"])
@pytest.mark.parametrize(
    ("pod", "want_util"),
    [
        pytest.param("vllm-a", 70.0, id="pod-with-two-gpus"),  # (90 + 50) / 2
        pytest.param("vllm-b", 10.0, id="pod-with-one-gpu"),
        pytest.param("vllm-z", None, id="pod-without-gpu-on-node"),
    ],
)
def test_dcgm_node_page_selects_the_pods_gpus(parse, pod, want_util):
    text = dcgm_node_page([("0", "vllm-a", 90), ("1", "vllm-a", 50), ("2", "vllm-b", 10), ("3", "", 99)])
    page = parse(text, select=("pod", pod))
    assert page.values.get(DCGM.GPU_UTIL) == want_util


def test_select_keeps_a_page_without_the_label_whole():
    # A per-pod DCGM endpoint carries no pod label: it is the replica's own page.
    page = parse_exposition(DCGM_TWO_GPUS, select=("pod", "vllm-a"))
    assert page.values[DCGM.GPU_UTIL] == pytest.approx(60.0)


@pytest.mark.parametrize("parse", [parse_exposition, parse_exposition_reference], ids=["fast", "reference"])
def test_nan_summary_quantiles_and_untyped(parse):
    text = (
        "# TYPE g gauge\n"
        'g{a="1"} NaN\n'
        'g{a="2"} 3\n'
        "# TYPE lat summary\n"
        'lat{quantile="0.5"} 0.2\n'
        'lat{quantile="0.99"} 0.9\n'
        "lat_sum 12.5\n"
        "lat_count 40\n"
        "untyped_thing 5 1700000000000\n"
    )
    page = parse(text)
    assert page.values == {"g": 3.0, "lat_sum": 12.5, "lat_count": 40.0, "untyped_thing": 5.0}
    # Left out of the values, but said: a scraper must not read a NaN as "nothing to report".
    assert page.nan == frozenset({"g"})
    assert page.stamped_s == {"untyped_thing": 1_700_000_000.0}


@pytest.mark.parametrize("parse", [parse_exposition, parse_exposition_reference], ids=["fast", "reference"])
def test_nan_and_timestamps_of_histograms_name_the_family(parse):
    text = (
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        'vllm:e2e_request_latency_seconds_bucket{le="1"} NaN 1700000000000\n'
        'vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 4 1700000060000\n'
        "vllm:e2e_request_latency_seconds_sum 3 1700000060000\n"
        "vllm:e2e_request_latency_seconds_count 4 1700000060000\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        "vllm:num_requests_waiting 2 1700000030500\n"
        "vllm:num_requests_waiting_created 1600000000 1600000000000\n"
    )
    page = parse(text)
    assert page.nan == frozenset({VLLM.e2e})
    # The oldest stamp of each name; a _created series is no measurement and has none.
    assert page.stamped_s == {VLLM.e2e: 1_700_000_000.0, VLLM.waiting: 1_700_000_030.5}
    assert page.values[VLLM.waiting] == 2.0


def test_a_page_without_nan_or_stamps_says_so():
    page = parse_exposition(VLLM_NEW)
    assert page.nan == frozenset() and page.stamped_s == {}


@pytest.mark.parametrize("parse", [parse_exposition, parse_exposition_reference], ids=["fast", "reference"])
def test_histogram_without_inf_bucket_uses_count(parse):
    text = '# TYPE h histogram\nh_bucket{le="1"} 3\nh_bucket{le="2"} 5\nh_sum 7\nh_count 6\n'
    assert parse(text).histograms["h"] == Histogram((1.0, 2.0, INF), (3.0, 5.0, 6.0), 7.0, 6.0)


def test_escaped_label_values_go_through_the_reference_parser():
    # A backslash in a label value is outside the fast reader's grammar; the answer must not change.
    text = (
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{model_name="a \\"quoted\\" name",engine="0"} 2\n'
        'vllm:num_requests_waiting{model_name="b}\\\\",engine="0"} 3\n'
    )
    assert parse_exposition(text).values == {VLLM.waiting: 5.0}


@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param('# TYPE g gauge\ng 1\ng{a="1" 2\n', 3, id="unclosed-brace"),
        pytest.param("# TYPE g gauge\ng 1\ng{a=1} 2\n", 3, id="unquoted-label"),
        pytest.param("g 1\n\ng one\n", 3, id="value-not-a-number"),
        pytest.param("# TYPE g gauge\ng 1_000\n", 2, id="underscore-in-value"),
        pytest.param("9g 1\n", 1, id="name-starts-with-digit"),
        pytest.param("<html><body>502 Bad Gateway</body></html>\n", 1, id="html-error-page"),
        pytest.param('# TYPE h histogram\nh_bucket{le="x"} 1\nh_count 1\n', None, id="le-not-a-number"),
    ],
)
def test_malformed_text_raises_with_the_line(text, line):
    with pytest.raises(ExpositionError) as err:
        parse_exposition(text, source="http://10.0.0.7:8000/metrics")
    assert err.value.line == line
    assert "http://10.0.0.7:8000/metrics" in str(err.value)
    if line is not None:
        assert f"line {line}" in str(err.value)
