"""PageReader(keep_values=..., keep_histograms=...): parse_exposition's result with the other names left out.

What a scraper keeps of each page is what llmscale reads (metrics/vetting.py's READ_VALUES and
READ_HISTOGRAMS): the window holds 20 observations of every replica. Whichever path reads a page
(a learnt layout or the line reader), the result must be the line reader's restricted to those
names, and a malformed page must still fail: every line is read, kept or not.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from metrics_pages import DCGM_TWO_GPUS, TGI, TRITON, VLLM_NEW, VLLM_OLD
from test_metrics_page_reader import revalue, same_page, scrapes

from llmscale.metrics.exposition import ExpositionError, PageReader, ParsedPage, parse_exposition
from llmscale.metrics.scrape import PackedHistogram, _packed
from llmscale.metrics.vetting import READ_HISTOGRAMS, READ_VALUES

KEEP: dict[str, Any] = {"keep_values": READ_VALUES, "keep_histograms": READ_HISTOGRAMS}
WORKED = {"vllm-new": VLLM_NEW, "vllm-old": VLLM_OLD, "tgi": TGI, "triton": TRITON, "dcgm": DCGM_TWO_GPUS}


def restricted(page: ParsedPage) -> ParsedPage:
    """The line reader's page with only the read names: written here, not with the reader's code."""
    names = READ_VALUES | READ_HISTOGRAMS
    return ParsedPage(
        {k: v for k, v in page.values.items() if k in READ_VALUES},
        {k: h for k, h in page.histograms.items() if k in READ_HISTOGRAMS},
        frozenset(n for n in page.nan if n in names),
        {k: t for k, t in page.stamped_s.items() if k in names},
        {k: t for k, t in page.stamped_newest_s.items() if k in names},
        page.series,
        page.duplicates,
    )


@pytest.mark.parametrize("text", [pytest.param(t, id=k) for k, t in WORKED.items()])
def test_both_paths_keep_only_the_read_names(text: str) -> None:
    reader = PageReader(**KEEP)
    first = reader.parse(text, key="a")
    assert first == restricted(parse_exposition(text))
    second = revalue(text)
    before = reader.layout_reads
    page = reader.parse(second, key="a")
    assert reader.layout_reads == before + 1  # through the layout
    assert page == restricted(parse_exposition(second))
    assert page.values or page.histograms  # every worked page has read names
    full = parse_exposition(second)
    dropped = (full.values.keys() - page.values.keys()) | (full.histograms.keys() - page.histograms.keys())
    assert not dropped & (READ_VALUES | READ_HISTOGRAMS)


def test_the_emulators_page_keeps_what_the_docstring_says() -> None:
    """PageReader's docstring: of the emulate page's 280 folded numbers, 164 are kept."""
    import httpx

    from llmscale.emulate import EmulateConfig, EmulatorThread

    with EmulatorThread(EmulateConfig(replicas=1, port=0)) as fleet:
        port = next(iter(fleet.call(lambda s: s.replica_ports()).values()))
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    full, kept = parse_exposition(text), PageReader(**KEEP).parse(text, key="a")

    def numbers(p: ParsedPage) -> int:
        return len(p.values) + sum(len(h.cumulative) + 2 for h in p.histograms.values())

    assert (numbers(full), len(full.values), len(full.histograms)) == (280, 22, 13)
    assert (numbers(kept), len(kept.values), len(kept.histograms)) == (164, 17, 7)


@pytest.mark.parametrize(
    "second",
    [
        pytest.param(VLLM_NEW.replace("} 5.0\n", "} NaN\n"), id="nan-value"),
        pytest.param(VLLM_NEW.replace("} 5.0\n", "} 5.0 1700000000000\n"), id="timestamp-added"),
        pytest.param(VLLM_NEW + "# TYPE late gauge\nlate 4.0\n", id="unread-series-added"),
    ],
)
def test_a_changed_page_is_the_restricted_line_read(second: str) -> None:
    reader = PageReader(**KEEP)
    reader.parse(VLLM_NEW, key="a")
    assert reader.parse(second, key="a") == restricted(parse_exposition(second))


@pytest.mark.parametrize("bad", ["} five\n", "} 1_000\n"])
def test_a_malformed_value_of_an_unread_name_still_fails(bad: str) -> None:
    unread = VLLM_NEW + '# TYPE not_read gauge\nnot_read{x="1"} 5.0\n'
    reader = PageReader(**KEEP)
    reader.parse(unread, key="a")
    with pytest.raises(ExpositionError):
        reader.parse(unread.replace('not_read{x="1"} 5.0\n', 'not_read{x="1"' + bad), key="a")


@settings(max_examples=60, deadline=None)
@given(scrapes())
def test_kept_reader_equals_the_restricted_line_reader_over_scrapes(pages: list[str]) -> None:
    reader = PageReader(**KEEP)
    for text in pages:
        try:
            want = restricted(parse_exposition(text))
        except ExpositionError:
            with pytest.raises(ExpositionError):
                reader.parse(text, key="a")
            continue
        assert same_page(reader.parse(text, key="a"), want)


def test_packed_histograms_read_as_the_parsed_ones() -> None:
    page = parse_exposition(VLLM_NEW)
    packed = _packed(page.histograms)
    assert packed.keys() == page.histograms.keys()
    for name, h in page.histograms.items():
        p = packed[name]
        assert isinstance(p, PackedHistogram) and p.bounds is h.bounds
        assert tuple(p.cumulative) == h.cumulative and (p.sum, p.count) == (h.sum, h.count)


@pytest.mark.parametrize("text", [pytest.param(t, id=k) for k, t in WORKED.items()])
def test_a_packed_reader_gives_what_packing_the_plain_readers_page_gives(text: str) -> None:
    """PageReader(packed=True), the scraper's: a layout page's histograms are sliced from its values
    straight into PackedHistogram; the numbers must be those of packing the plain reader's page."""
    plain, packed = PageReader(**KEEP), PageReader(**KEEP, packed=True)
    for k, page_text in enumerate((text, revalue(text), revalue(text, scale=3.0))):
        want, got = plain.parse(page_text, key="a"), packed.parse(page_text, key="a")
        assert got.values == want.values and got.series == want.series and got.nan == want.nan
        assert got.histograms.keys() == want.histograms.keys()
        for name, h in want.histograms.items():
            p = got.histograms[name]
            if k:  # read through the layout (the first page is learnt, read line by line)
                assert isinstance(p, PackedHistogram), name
            assert p.bounds == h.bounds and tuple(p.cumulative) == tuple(h.cumulative), name
            assert (p.sum, p.count) == (h.sum, h.count), name
        assert _packed(got.histograms) == _packed(want.histograms)
    assert packed.layout_reads == plain.layout_reads
