"""Malformed Prometheus exposition pages: the parser answers with a page or an ExpositionError.

Pages are built from the lines exporters write (vLLM gauges and histograms, DCGM per-GPU
series, HELP and TYPE lines) and then broken: a line replaced by a hostile one (unclosed
braces, a value that is no number, a histogram bucket without ``le``, a NaN ``le``, stray
bytes, a line 5,000 characters long), lines shuffled or duplicated. Properties:

* only :class:`ExpositionError` escapes :func:`parse_exposition` and :class:`PageReader`, and
  its line, when given, is a line of the page, and the message names the source;
* the page reader, whether it reads through a learnt layout or line by line, gives the same
  answer as :func:`parse_exposition` on every page: the same values, or an error too;
* every folded histogram is shaped as the signals read it: bounds ascending, ``+Inf`` last.

Example counts are bounded so the file runs in seconds.
"""

from __future__ import annotations

import math
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmscale.metrics.exposition import ExpositionError, PageReader, ParsedPage, parse_exposition

_DEEP = int(os.environ.get("LLMSCALE_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=_DEEP or 200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=not _DEEP,
    database=None,
)

SOURCE = "http://127.0.0.1:8001/metrics"

#: lines as exporters write them (vLLM, DCGM, prometheus_client's HELP/TYPE)
GOOD = [
    "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
    "# TYPE vllm:num_requests_waiting gauge",
    'vllm:num_requests_waiting{engine="0",model_name="llama"} 3.0',
    "# TYPE vllm:kv_cache_usage_perc gauge",
    'vllm:kv_cache_usage_perc{engine="0",model_name="llama"} 0.42',
    "# TYPE vllm:time_to_first_token_seconds histogram",
    'vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="llama"} 4.0',
    'vllm:time_to_first_token_seconds_bucket{le="1.0",model_name="llama"} 9.0',
    'vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="llama"} 10.0',
    'vllm:time_to_first_token_seconds_sum{model_name="llama"} 3.5',
    'vllm:time_to_first_token_seconds_count{model_name="llama"} 10.0',
    "# TYPE vllm:prompt_tokens counter",
    'vllm:prompt_tokens_total{model_name="llama"} 12345.0',
    "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",pod="vllm-0"} 40',
    'DCGM_FI_DEV_GPU_UTIL{gpu="1",pod="vllm-1"} 60',
]

HOSTILE = [
    "",
    "#",
    "# TYPE",
    "# TYPE x histogram extra words",
    "# TYPE vllm:kv_cache_usage_perc counter",
    "vllm:num_requests_waiting",
    "vllm:num_requests_waiting abc",
    "vllm:num_requests_waiting 1_000",
    "vllm:num_requests_waiting NaN",
    "vllm:num_requests_waiting +Inf",
    "vllm:num_requests_waiting 1e400",
    "vllm:num_requests_waiting 1 2 3",
    "vllm:num_requests_waiting 1 1.5",
    'vllm:num_requests_waiting{engine="0" 1',
    "vllm:num_requests_waiting{engine=0} 1",
    'vllm:num_requests_waiting{engine="a\\"b"} 1',
    'vllm:num_requests_waiting{="x"} 1',
    "vllm:time_to_first_token_seconds_bucket 4",
    'vllm:time_to_first_token_seconds_bucket{le="fast"} 4',
    'vllm:time_to_first_token_seconds_bucket{le="NaN"} 4',
    'vllm:time_to_first_token_seconds_bucket{le="-Inf"} 4',
    'vllm:time_to_first_token_seconds_bucket{le="0.5"} -1',
    "vllm:time_to_first_token_seconds_count NaN",
    "9starts_with_a_digit 1",
    "name{} 1",
    "\x00\x01\x02",
    "é 1",
    "x" * 5000 + " 1",
    "{}",
    "}",
]
line = st.one_of(st.sampled_from(GOOD), st.sampled_from(HOSTILE), st.text(max_size=40))


def _parse(text: str) -> ParsedPage | ExpositionError:
    try:
        page = parse_exposition(text, source=SOURCE)
    except ExpositionError as e:
        assert SOURCE in str(e), str(e)
        if e.line is not None:
            assert 1 <= e.line <= max(1, len(text.splitlines())), (e.line, str(e))
        return e
    for name, h in page.histograms.items():
        assert list(h.bounds) == sorted(h.bounds) and h.bounds[-1] == math.inf, (name, h)
        assert len(h.cumulative) == len(h.bounds), (name, h)
    return page


def _same(a: ParsedPage | ExpositionError, b: ParsedPage | ExpositionError) -> bool:
    if isinstance(a, ExpositionError) or isinstance(b, ExpositionError):
        return type(a) is type(b)
    if a.values.keys() != b.values.keys() or a.histograms != b.histograms:
        return False
    return all(
        a.values[k] == b.values[k] or (math.isnan(a.values[k]) and math.isnan(b.values[k])) for k in a.values
    )


@FUZZ
@given(lines=st.lists(line, max_size=14), ending=st.sampled_from(["\n", "\r\n", ""]))
def test_any_page_is_parsed_or_refused_with_its_line(lines: list[str], ending: str) -> None:
    _parse("\n".join(lines).replace("\n", ending or "\n") + ending)


@FUZZ
@given(
    first=st.lists(st.sampled_from(GOOD), min_size=1, max_size=len(GOOD)),
    changed=st.lists(st.tuples(st.integers(0, 40), line), max_size=3),
)
def test_the_page_reader_agrees_with_the_parser_on_changed_pages(first, changed) -> None:
    # A source serves a page, then the same page with a few lines replaced: the reader learnt the
    # first page's layout and must notice what no longer fits it.
    reader = PageReader()
    text = "\n".join(first) + "\n"
    want = _parse(text)
    try:
        got: ParsedPage | ExpositionError = reader.parse(text, key="pod-0", source=SOURCE)
    except ExpositionError as e:
        got = e
    assert _same(got, want)
    second = list(first)
    for i, new in changed:
        second[i % len(second)] = new
    text2 = "\n".join(second) + "\n"
    want2 = _parse(text2)
    try:
        got2: ParsedPage | ExpositionError = reader.parse(text2, key="pod-0", source=SOURCE)
    except ExpositionError as e:
        got2 = e
    assert _same(got2, want2), (text2, got2, want2)


@FUZZ
@given(body=st.binary(max_size=300))
def test_bytes_decoded_as_the_scraper_does(body: bytes) -> None:
    _parse(body.decode("utf-8", errors="replace"))
