"""PageReader: pages of a learnt layout read without the line-by-line reader, always with its result.

Each case reads a first page from a source (the layout is learnt), then a second
page from the same source; the second must come back exactly as
:func:`parse_exposition` reads it (or raise the same :class:`ExpositionError`),
whether it keeps the layout (read through it) or not (read line by line).
"""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from metrics_pages import DCGM_TWO_GPUS, TGI, TRITON, VLLM_NEW, VLLM_OLD, dcgm_node_page, vllm_page
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from llmscale.metrics.exposition import ExpositionError, PageReader, ParsedPage, parse_exposition

_SAMPLE_VALUE = re.compile(r"^([^#\n][^\n]*) (\S+)$", re.MULTILINE)


def revalue(text: str, new: str | None = None, *, scale: float = 2.0) -> str:
    """``text`` with each sample line's value replaced: by ``new``, or the old value times ``scale``."""

    def sub(m: re.Match[str]) -> str:
        value = new if new is not None else repr(float(m.group(2)) * scale + 1.0)
        return f"{m.group(1)} {value}"

    return _SAMPLE_VALUE.sub(sub, text)


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))  # +Inf and -Inf series fold to NaN in both


def same_page(a: ParsedPage, b: ParsedPage) -> bool:
    """Equal values and histograms, NaN equal to NaN."""
    if a.values.keys() != b.values.keys() or a.histograms.keys() != b.histograms.keys():
        return False
    if not all(_same(v, b.values[k]) for k, v in a.values.items()):
        return False
    for name, h in a.histograms.items():
        g = b.histograms[name]
        if len(h.bounds) != len(g.bounds) or len(h.cumulative) != len(g.cumulative):
            return False
        pairs = [
            *zip(h.bounds, g.bounds, strict=True),
            *zip(h.cumulative, g.cumulative, strict=True),
            (h.sum, g.sum),
            (h.count, g.count),
        ]
        if not all(_same(x, y) for x, y in pairs):
            return False
    return True


def read_both(first: str, second: str, **kw):
    """The reader's result for ``second`` after ``first`` (same source), and whether a layout read it."""
    reader = PageReader()
    assert same_page(reader.parse(first, key="pod-a", **kw), parse_exposition(first, **kw))
    before = reader.layout_reads
    page = reader.parse(second, key="pod-a", **kw)
    return page, reader.layout_reads > before


WORKED = {"vllm-new": VLLM_NEW, "vllm-old": VLLM_OLD, "tgi": TGI, "triton": TRITON, "dcgm": DCGM_TWO_GPUS}


@pytest.mark.parametrize("text", [pytest.param(t, id=k) for k, t in WORKED.items()])
def test_new_values_in_a_known_layout_are_read_through_it(text):
    # VLLM_NEW has two engines per family: values fold over several slots (sum, mean) and the
    # TTFT histogram adds up bucket by bucket; TGI's samples carry no labels.
    second = revalue(text)
    page, by_layout = read_both(text, second)
    assert by_layout
    assert page == parse_exposition(second)
    assert page != parse_exposition(text)  # the values did change


@pytest.mark.parametrize(
    ("second", "by_layout"),  # by_layout: read through the first page's layout
    [
        pytest.param(VLLM_NEW.replace('engine="1"', 'engine="2"'), False, id="label-value-changed"),
        pytest.param(
            VLLM_NEW + 'vllm:num_requests_waiting{engine="9",model_name="llama-8b"} 4.0\n',
            False,
            id="series-added",
        ),
        pytest.param(
            VLLM_NEW.replace("# HELP vllm:num_requests_running Number", "# HELP x y"), False, id="help"
        ),
        pytest.param(
            VLLM_NEW.replace(
                "# TYPE vllm:prompt_tokens_total counter", "# TYPE vllm:prompt_tokens_total gauge"
            ),
            False,
            id="type-changed",
        ),
        pytest.param(VLLM_NEW.replace("} 5.0\n", "} NaN\n"), False, id="nan-value"),
        pytest.param(
            VLLM_NEW.replace("} 5.0\n", "} +Inf\n").replace("} 2.0\n", "} -Inf\n"),
            False,
            id="inf-and-minus-inf",
        ),
        pytest.param(VLLM_NEW.replace("} 5.0\n", "} +Inf\n"), True, id="inf-value"),
        pytest.param(VLLM_NEW.replace("} 5.0\n", "} +5\n"), True, id="plus-sign"),
        pytest.param(VLLM_NEW.replace("} 5.0\n", "} 5.0 1700000000000\n"), False, id="timestamp-added"),
        pytest.param(VLLM_NEW.replace("} 5.0\n", "} 5.0 \n"), False, id="trailing-blank"),
        pytest.param(VLLM_NEW.replace("} 5.0\n", "}  5.0\n"), False, id="two-blanks"),
        pytest.param(VLLM_NEW.replace("\n", "\r\n"), False, id="crlf"),
        pytest.param(VLLM_NEW.replace("} 5.0\n", "} 5\x0cvllm:x 1\n"), False, id="form-feed-splits-the-line"),
        pytest.param(VLLM_NEW.rstrip("\n"), False, id="no-final-newline"),
        pytest.param(
            VLLM_NEW.replace("vllm:num_requests_waiting{", "# vllm:num_requests_waiting{"),
            False,
            id="commented-out",
        ),
        pytest.param(VLLM_NEW + "\n\n", False, id="blank-lines-added"),
        pytest.param("", False, id="empty-page"),
    ],
)
def test_a_changed_page_reads_as_the_line_reader_reads_it(second, by_layout):
    page, used_layout = read_both(VLLM_NEW, second)
    assert same_page(page, parse_exposition(second))
    assert used_layout == by_layout


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(VLLM_NEW.replace('engine="1"', 'engine="2"'), id="label-value-changed"),
        pytest.param(VLLM_NEW + "# TYPE late gauge\nlate 4.0\n", id="series-added"),
        pytest.param(VLLM_NEW.rstrip("\n"), id="no-final-newline"),
    ],
)
def test_a_changed_layout_is_learnt_for_the_next_pages(changed):
    reader = PageReader()
    reader.parse(VLLM_NEW, key="pod-a")
    reader.parse(changed, key="pod-a")
    third = revalue(changed)
    assert reader.parse(third, key="pod-a") == parse_exposition(third)
    assert (reader.layout_reads, reader.line_reads) == (1, 2)


@pytest.mark.parametrize(
    ("second", "line"),
    [
        pytest.param(VLLM_NEW.replace("} 5.0\n", "} 1_000\n", 1), 7, id="underscore-in-value"),
        pytest.param(VLLM_NEW.replace("} 5.0\n", "} five\n", 1), 7, id="value-not-a-number"),
        pytest.param(VLLM_NEW.replace("} 5.0\n", "}\n", 1), 7, id="value-missing"),
        pytest.param(
            VLLM_NEW.replace('engine="0",model_name', "engine=0,model_name", 1), 3, id="unquoted-label"
        ),
    ],
)
def test_malformed_text_in_a_known_layout_raises_as_the_line_reader_does(second, line):
    reader = PageReader()
    reader.parse(VLLM_NEW, key="pod-a")
    with pytest.raises(ExpositionError) as err:
        reader.parse(second, key="pod-a", source="http://10.0.0.7:8000/metrics")
    with pytest.raises(ExpositionError) as want:
        parse_exposition(second, source="http://10.0.0.7:8000/metrics")
    assert err.value.line == want.value.line == line
    assert str(err.value) == str(want.value)
    # The malformed page did not spoil the layout: the next good page is read through it.
    before = reader.layout_reads
    assert reader.parse(revalue(VLLM_NEW), key="pod-a") == parse_exposition(revalue(VLLM_NEW))
    assert reader.layout_reads == before + 1


@pytest.mark.parametrize(
    ("text", "histograms"),
    [
        pytest.param(
            '# TYPE h histogram\nh_bucket{le="1"} 3\nh_sum 7\nh_count 6\n', {"h"}, id="no-inf-uses-count"
        ),
        pytest.param('# TYPE h histogram\nh_bucket{le="1"} 3\nh_sum 7\n', set(), id="no-inf-no-count"),
        pytest.param('# TYPE h histogram\nh_bucket{le="+Inf"} 3\nh_count 3\n', {"h"}, id="no-sum"),
        pytest.param(
            '# TYPE lat summary\nlat{quantile="0.5"} 0.2\nlat_sum 12.5\nlat_count 40\n'
            "# TYPE c_created gauge\nc_created 17e8\n# TYPE i_info gauge\n"
            'i_info{v="a"} 1\ni_info{v="b"} 1\n',
            set(),
            id="summary-created-info",
        ),
    ],
)
def test_histogram_and_summary_shapes(text, histograms):
    second = revalue(text)
    page, by_layout = read_both(text, second)
    assert by_layout
    assert page == parse_exposition(second)
    assert set(page.histograms) == histograms


@pytest.mark.parametrize("pod", ["vllm-a", "vllm-b", "vllm-z"])
def test_a_shared_dcgm_page_keeps_one_layout_per_selected_pod(pod):
    first = dcgm_node_page([("0", "vllm-a", 90), ("1", "vllm-a", 50), ("2", "vllm-b", 10), ("3", "", 99)])
    second = dcgm_node_page([("0", "vllm-a", 30), ("1", "vllm-a", 20), ("2", "vllm-b", 70), ("3", "", 1)])
    reader = PageReader()
    for p in ("vllm-a", "vllm-b", "vllm-z"):
        reader.parse(first, key="node-1", select=("pod", p))
    assert len(reader) == 3
    page = reader.parse(second, key="node-1", select=("pod", pod))
    assert page == parse_exposition(second, select=("pod", pod))
    assert reader.layout_reads == 1


def test_sources_do_not_share_layouts_and_gone_ones_are_forgotten():
    reader = PageReader()
    a = vllm_page(waiting=1, running=2, kv=0.2, ttft_cumulative=(0, 1, 2, 3), ttft_sum=1.5)
    b = vllm_page(waiting=4, running=5, kv=0.6, ttft_cumulative=(1, 2, 3, 4), ttft_sum=2.5)
    reader.parse(a, key="pod-a")
    reader.parse(TGI, key="pod-b")
    assert reader.parse(b, key="pod-a") == parse_exposition(b)
    assert reader.layout_reads == 1
    assert reader.parse(b, key="pod-b") == parse_exposition(b)  # pod-b's layout was TGI's
    assert reader.layout_reads == 1
    reader.retain({"pod-b"})
    assert len(reader) == 1


def test_sources_with_pages_of_one_shape_share_the_layout_the_first_learnt():
    """A fleet of one deployment: the first replica's page teaches the layout; every other
    replica's first page is read through it (not learnt again), exactly as the line reader reads it."""
    reader = PageReader()
    a = vllm_page(waiting=1, running=2, kv=0.2, ttft_cumulative=(0, 1, 2, 3), ttft_sum=1.5)
    b = vllm_page(waiting=4, running=5, kv=0.6, ttft_cumulative=(1, 2, 3, 4), ttft_sum=2.5)
    assert reader.parse(a, key="pod-a") == parse_exposition(a)
    assert reader.parse(b, key="pod-b") == parse_exposition(b)
    assert (reader.layout_reads, reader.line_reads) == (1, 1)
    assert reader.parse(a, key="pod-b") == parse_exposition(a)  # pod-b keeps the shared layout
    assert (reader.layout_reads, reader.line_reads) == (2, 1)
    # Same skeleton, a value the layout does not fold (NaN): read line by line, as before.
    nan = revalue(b, "NaN")
    assert same_page(reader.parse(nan, key="pod-c"), parse_exposition(nan))
    assert reader.layout_reads == 2
    # Another shape (TGI's page) is learnt, not forced through vLLM's layout.
    assert reader.parse(TGI, key="pod-d") == parse_exposition(TGI)
    assert reader.layout_reads == 2


def test_shared_layouts_go_when_no_source_reads_with_them():
    reader = PageReader()
    a = vllm_page(waiting=1, running=2, kv=0.2, ttft_cumulative=(0, 1, 2, 3), ttft_sum=1.5)
    reader.parse(a, key="pod-a")
    reader.retain(set())
    assert reader.parse(a, key="pod-b") == parse_exposition(a)
    assert (reader.layout_reads, reader.line_reads) == (0, 2)  # learnt afresh


def test_a_page_without_a_layout_is_retried_after_a_few_pages():
    stamped = "# TYPE g gauge\ng 1 1700000000000\n"  # a timestamp: the fast reader has no slot for it
    reader = PageReader()
    for _ in range(6):
        assert reader.parse(stamped, key="pod-a") == parse_exposition(stamped)
    assert (reader.layout_reads, reader.line_reads) == (0, 6)
    plain = "# TYPE g gauge\ng 2\n"
    for _ in range(6):
        reader.parse(plain, key="pod-a")  # line by line until the retry learns the layout
    assert (reader.layout_reads, reader.line_reads) == (1, 11)


# -------------------------------------------------------------------------------------------------
# Property: successive scrapes of random exporters (rendered by prometheus_client)

_names = st.sampled_from(
    [
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "DCGM_FI_DEV_GPU_UTIL",
        "vllm:prompt_tokens",
        "vllm:time_to_first_token_seconds",
        "tgi_request_duration",
        "nv_inference_pending_request_count",
        "build_info",
    ]
)
_label_values = st.text(alphabet="abcxyz019-_.:/ ", min_size=0, max_size=6)
_values = st.one_of(
    st.floats(min_value=-1e9, max_value=1e12, allow_nan=False),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-9]),
)


@st.composite
def scrapes(draw):
    """Three pages of one exporter: its series move between scrapes, and may gain a series."""
    reg = CollectorRegistry()
    setters = []
    used = set()
    for _ in range(draw(st.integers(1, 5))):
        name = draw(_names)
        if name in used:
            continue
        used.add(name)
        kind = draw(st.sampled_from(["gauge", "counter", "histogram"]))
        labelnames = draw(st.sampled_from([(), ("engine",), ("model_name", "engine"), ("gpu", "pod")]))
        label_sets = draw(
            st.lists(st.tuples(*[_label_values] * len(labelnames)), min_size=1, max_size=3, unique=True)
        )
        if kind == "gauge":
            g = Gauge(name, "doc", labelnames, registry=reg)
            children = [g.labels(*ls) if labelnames else g for ls in label_sets]
            setters += [lambda v, c=c: c.set(v) for c in children]
        elif kind == "counter":
            c = Counter(name, "doc", labelnames, registry=reg)
            children = [c.labels(*ls) if labelnames else c for ls in label_sets]
            setters += [lambda v, c=c: c.inc(abs(v) if math.isfinite(v) else 1.0) for c in children]
        else:
            bounds = sorted(set(draw(st.lists(st.floats(1e-4, 1e4), min_size=1, max_size=6))))
            h = Histogram(name, "doc", labelnames, buckets=bounds, registry=reg)
            children = [h.labels(*ls) if labelnames else h for ls in label_sets]
            setters += [lambda v, c=c: c.observe(abs(v) if math.isfinite(v) else 1.0) for c in children]
    pages = []
    for k in range(3):
        for setter in setters:
            setter(draw(_values))
        if k == 2 and draw(st.booleans()):
            Gauge(f"late_gauge_{k}", "appears on a later scrape", registry=reg).set(draw(_values))
        pages.append(generate_latest(reg).decode())
    return pages


@settings(max_examples=60, deadline=None)
@given(scrapes())
def test_reader_equals_the_line_reader_over_scrapes(pages):
    reader = PageReader()
    for k, text in enumerate(pages):
        before = reader.layout_reads
        assert same_page(reader.parse(text, key="pod-a"), parse_exposition(text))
        values = [float(v) for _, v in _SAMPLE_VALUE.findall(text)]
        same_layout = k > 0 and revalue(pages[k - 1], "0") == revalue(text, "0")
        if same_layout and not math.isnan(sum(values)):
            assert reader.layout_reads == before + 1  # the common case takes the fast path
