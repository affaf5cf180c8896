"""The C scan of a page through its learnt layout (metrics/_scan.c) against the Python reader.

The scan may leave a page to the Python reader (None), but whatever it reads it must read as the
Python reader does: the page has the layout (``_Layout.value_texts`` is not None) and its numbers
are ``float()`` of the same tokens. And it must read the pages it exists for (ASCII exporter
pages with plain numbers), or it is a slower no-op.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from metrics_pages import DCGM_TWO_GPUS, TGI, TRITON, VLLM_NEW, VLLM_OLD
from test_metrics_page_reader import revalue, scrapes

from llmscale._source_first import NATIVE_SOURCES, native
from llmscale.metrics.exposition import _layout_of

_scan = native("llmscale.metrics._scan")
if _scan is None:
    if os.environ.get("LLMSCALE_PURE_PYTHON") == "1":
        pytest.skip(
            "LLMSCALE_PURE_PYTHON=1: the C scan is not built, pages are read in Python",
            allow_module_level=True,
        )
    pytest.fail(
        "llmscale.metrics._scan is not built: run scripts/bootstrap.sh (or set LLMSCALE_PURE_PYTHON=1)",
        pytrace=False,
    )

WORKED = {"vllm-new": VLLM_NEW, "vllm-old": VLLM_OLD, "tgi": TGI, "triton": TRITON, "dcgm": DCGM_TWO_GPUS}


def test_the_scan_is_built_from_the_current_source() -> None:
    assert _scan is not None
    built = Path(str(_scan.__file__))
    source = Path(__file__).resolve().parents[2] / NATIVE_SOURCES["llmscale.metrics._scan"]
    assert source.stat().st_mtime <= built.stat().st_mtime, f"{built.name} is older than {source.name}"


def python_numbers(layout, text: str) -> list[float] | str:
    texts = layout.value_texts(text)
    if texts is None:
        return "another layout"
    try:
        return [float(t) for t in texts]
    except ValueError:
        return "not a number"


def same_numbers(a: list[float], b: list[float]) -> bool:
    if len(a) != len(b):
        return False
    return all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b, strict=True))


def check(layout, text: str) -> list[float] | None:
    """The scan's answer, having checked it against the Python reader's."""
    assert _scan is not None
    got = _scan.layout_numbers(text, layout.prefixes, layout.kinds)
    if got is not None:
        want = python_numbers(layout, text)
        assert isinstance(want, list), f"the scan read a page the Python reader finds {want!r}"
        assert same_numbers(got, want)
    return got


@pytest.mark.parametrize("text", [pytest.param(t, id=k) for k, t in WORKED.items()])
def test_the_scan_reads_the_exporters_pages(text: str) -> None:
    layout = _layout_of(text, None)
    assert layout is not None
    for scale in (1.0, 2.0, 0.5, 1e6):
        assert check(layout, revalue(text, scale=scale)) is not None


@settings(max_examples=80, deadline=None)
@given(scrapes())
def test_the_scan_agrees_over_scrapes(pages: list[str]) -> None:
    layout = _layout_of(pages[0], None)
    if layout is None:
        return
    for text in pages:
        got = check(layout, text)
        if text.isascii() and python_numbers(layout, text) != "another layout":
            assert got is not None or python_numbers(layout, text) == "not a number"


_tokens = st.one_of(
    st.text(min_size=0, max_size=12),
    st.text(alphabet="0123456789.eE+-_ xXabcdfinINFNa\t\r\x0b\x1c\u0663\u00a0", min_size=0, max_size=70),
    st.sampled_from(
        [
            "1_000",
            "0x10",
            "1e",
            "inf",
            "-Inf",
            "+Inf",
            "NaN",
            "nan",
            "-0",
            "1e999",
            "-1e999",
            "1.",
            ".5",
            "1e-400",
            "\u0661\u0662",
            "12 1700000000000",
            "",
            " 1",
            "1 ",
            "infinity",
            "9" * 63,
            "9" * 64,
        ]
    ),
)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(sorted(WORKED)), st.data())
def test_a_hostile_token_is_read_as_python_reads_it_or_left_to_it(name: str, data: st.DataObject) -> None:
    text = WORKED[name]
    layout = _layout_of(text, None)
    assert layout is not None
    lines = text.split("\n")
    samples = [i for i, k in enumerate(layout.kinds) if k]
    i = data.draw(st.sampled_from(samples))
    lines[i] = layout.prefixes[i] + data.draw(_tokens)
    check(layout, "\n".join(lines))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(WORKED)), st.data())
def test_a_damaged_page_is_never_read_differently(name: str, data: st.DataObject) -> None:
    text = WORKED[name]
    layout = _layout_of(text, None)
    assert layout is not None
    at = data.draw(st.integers(0, len(text)))
    cut = data.draw(st.integers(0, 3))
    insert = data.draw(st.text(alphabet=' \n#{}"=_0123456789abcé\r', max_size=3))
    check(layout, text[:at] + insert + text[at + cut :])


@pytest.mark.parametrize("name", sorted(WORKED))
@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda t: t + "\n", id="a-blank-line-after"),
        pytest.param(lambda t: "\n" + t, id="a-blank-line-before"),
        pytest.param(lambda t: t[:-1], id="no-last-line-break"),
        pytest.param(lambda t: t + "x", id="text-after-the-last-line"),
        pytest.param(lambda t: t.replace("\n", "\r\n"), id="crlf"),
        pytest.param(lambda t: t.replace("\n", "\n\n", 1), id="a-blank-line-inside"),
    ],
)
def test_a_page_with_other_lines_is_not_read(name: str, damage) -> None:
    layout = _layout_of(WORKED[name], None)
    assert layout is not None
    assert check(layout, damage(WORKED[name])) is None
