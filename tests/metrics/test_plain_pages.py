"""ParsedPage.plain: what a layout read establishes at once, the vetting does not check again.

A page read through a learnt layout is marked plain when every number on it is finite, within
[0, 2**53], and every kept histogram's counts never fall; ``vet_page`` then checks only the
read values' plausible ranges. The shortcut must never change a verdict: each page, sane or given
one kind of nonsense, is read as a scraper reads it (a packed reader keeping what llmscale reads,
its layout learnt from a sane page) and vetted as read and with ``plain`` cleared.
"""

from __future__ import annotations

import math
import struct
from dataclasses import replace
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from metrics_pages import DCGM_TWO_GPUS, TGI, TRITON, VLLM_NEW, VLLM_OLD
from test_fuzz_page_vetting import FUZZ, bounded, nonsense_pages, sane_pages
from test_metrics_page_reader import revalue

from llmscale._source_first import native
from llmscale.metrics.exposition import ExpositionError, PageReader, ParsedPage, plain_numbers
from llmscale.metrics.vetting import READ_HISTOGRAMS, READ_VALUES, vet_page

WALL_S = 1_700_000_000.0
WORKED = {"vllm-new": VLLM_NEW, "vllm-old": VLLM_OLD, "tgi": TGI, "triton": TRITON, "dcgm": DCGM_TWO_GPUS}


def scraped(text: str, learnt_from: str) -> ParsedPage | None:
    reader = PageReader(keep_values=READ_VALUES, keep_histograms=READ_HISTOGRAMS, packed=True)
    reader.parse(learnt_from, key="pod")
    try:
        return reader.parse(text, key="pod")
    except ExpositionError:
        return None


def verdicts(page: ParsedPage) -> tuple[str | None, str | None]:
    def vet(p: ParsedPage) -> str | None:
        return vet_page(p, WALL_S, max_sample_age_s=60.0, max_clock_ahead_s=10.0)

    return vet(page), vet(replace(page, plain=False))


def holds(page: ParsedPage) -> bool:
    """What ``plain`` claims, checked the long way."""
    numbers = list(page.values.values())
    for h in page.histograms.values():
        cum = list(h.cumulative)
        numbers += [*cum, h.sum, h.count]
        if any(a > b for a, b in pairwise(cum)):
            return False
    return all(0.0 <= x <= 2.0**53 for x in numbers)


@FUZZ
@given(sane=sane_pages(), other=sane_pages())
def test_a_sane_page_read_through_a_layout_is_plain_and_accepted(sane: str, other: str) -> None:
    with bounded():
        page = scraped(other, learnt_from=sane)
        assert page is not None
        as_read, looked_at = verdicts(page)
    assert as_read == looked_at
    if page.plain:
        assert holds(page)


@FUZZ
@given(sane=sane_pages(), bad=nonsense_pages())
def test_plain_never_changes_the_verdict_on_nonsense(sane: str, bad: tuple[str, str]) -> None:
    _, text = bad
    with bounded():
        page = scraped(text, learnt_from=sane)
        if page is None:
            return
        as_read, looked_at = verdicts(page)
    assert as_read == looked_at, text[:2000]
    if page.plain:
        assert holds(page)


@pytest.mark.parametrize("name", sorted(WORKED))
def test_an_exporters_next_page_is_plain_when_each_histogram_is_one_series(name: str) -> None:
    """The shortcut is taken on the pages it exists for (else it is dead code). A histogram summed
    over several series (vLLM's engines: ``vllm-new`` has two) is not: each series may hold up to
    2**53, their sum past it, which the vetting refuses."""
    text = WORKED[name]
    page = scraped(revalue(text, scale=1.0), learnt_from=text)
    assert page is not None
    assert page.plain == (name != "vllm-new")
    as_read, looked_at = verdicts(page)
    assert holds(page) and as_read == looked_at


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda t: t.replace("} 5.0\n", "} -5.0\n", 1), id="negative"),
        pytest.param(lambda t: t.replace("} 5.0\n", "} 1e300\n", 1), id="past-2**53"),
    ],
)
def test_a_page_outside_the_bounds_is_not_plain(bad) -> None:
    text = bad(VLLM_NEW)
    assert text != VLLM_NEW
    page = scraped(text, learnt_from=VLLM_NEW)
    assert page is not None and not page.plain


_floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 2.0**53, 2.0**53 + 2, math.nan, math.inf, -1e-300]),
)


@st.composite
def numbers_and_runs(draw: st.DrawFn) -> tuple[list[float], tuple[tuple[int, int], ...]]:
    vals = draw(st.lists(_floats, max_size=40))
    runs = []
    for _ in range(draw(st.integers(0, 4))):
        a = draw(st.integers(0, len(vals)))
        runs.append((a, draw(st.integers(a, len(vals)))))
    return vals, tuple(runs)


@settings(max_examples=400, deadline=None)
@given(numbers_and_runs())
def test_the_c_check_is_the_python_check(case: tuple[list[float], tuple[tuple[int, int], ...]]) -> None:
    scan = native("llmscale.metrics._scan")
    if scan is None:
        pytest.skip("the C scan is not built (LLMSCALE_PURE_PYTHON=1): pages use the Python check")
    vals, runs = case
    assert scan.plain_numbers(vals, runs, 2.0**53) == plain_numbers(vals, runs, 2.0**53)
    assert scan.doubles(vals) == b"".join(struct.pack("d", v) for v in vals)
