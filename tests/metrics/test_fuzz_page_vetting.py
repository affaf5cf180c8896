"""Fuzzing a replica's page from parse to verdict (issue 19): no crash, no hang, no nonsense accepted.

Pages are built as a vLLM replica writes them with random sane values, then either kept sane
(a clock a few seconds off, a few engines, duplicated series of a name llmscale does not read)
or given one kind of nonsense the issue found taking ``slo`` to its maximum: an implausible
value of a read name, buckets that fall, a read series written twice (labels maybe reordered),
a label explosion, samples stamped in the future, a negative, NaN or infinite read value.
Properties, each example under a 5 s alarm (a hang fails it, it does not stall the suite):

* parsing (the line reader and the page reader, learnt layout or not) raises nothing but
  :class:`ExpositionError`, and both readers agree on the page's values, series and duplicates;
* :func:`vet_page` raises nothing on any parsed page;
* a sane page is accepted, a page with nonsense refused;
* :class:`CounterHistory`: counters that only grow are accepted; one that falls other than to
  near zero is refused at that page, and so is a second restart within a minute.

Example counts are bounded so the file runs in seconds (``LLMSCALE_FUZZ_EXAMPLES`` for more).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmscale.metrics.exposition import ExpositionError, PageReader, ParsedPage, parse_exposition
from llmscale.metrics.names import VLLM
from llmscale.metrics.vetting import CounterHistory, vet_page

_DEEP = int(os.environ.get("LLMSCALE_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=_DEEP or 150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=not _DEEP,
    database=None,
)
WALL_S = 1_700_000_000.0
AGE_S, AHEAD_S = 60.0, 10.0
BOUNDS = ("0.1", "0.5", "1.0", "5.0", "+Inf")
LABELS = 'engine="0",model_name="llama"'


class Hang(Exception):
    """An example ran past its alarm."""


@contextlib.contextmanager
def bounded(seconds: float = 5.0) -> Iterator[None]:
    """Raise :class:`Hang` in the main thread if the block runs longer than ``seconds``."""

    def ring(signum: int, frame: object) -> None:
        raise Hang(f"still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@st.composite
def sane_lines(draw: st.DrawFn) -> list[str]:
    """A vLLM page's sample and TYPE lines with random plausible values."""
    waiting = draw(st.floats(0, 1e5))
    running = draw(st.floats(0, 1e4))
    kv = draw(st.floats(0, 1))
    tokens = draw(st.floats(0, 1e12))
    steps = draw(st.lists(st.integers(0, 10**6), min_size=len(BOUNDS), max_size=len(BOUNDS)))
    cum = [float(sum(steps[: i + 1])) for i in range(len(steps))]
    lines = [
        f"# TYPE {VLLM.waiting} gauge",
        f"{VLLM.waiting}{{{LABELS}}} {waiting!r}",
        f"# TYPE {VLLM.running} gauge",
        f"{VLLM.running}{{{LABELS}}} {running!r}",
        f"# TYPE {VLLM.kv_usage} gauge",
        f"{VLLM.kv_usage}{{{LABELS}}} {kv!r}",
        f"# TYPE {VLLM.generation_tokens} counter",
        f"{VLLM.generation_tokens}{{{LABELS}}} {tokens!r}",
        f"# TYPE {VLLM.e2e} histogram",
        *(f'{VLLM.e2e}_bucket{{{LABELS},le="{b}"}} {c!r}' for b, c in zip(BOUNDS, cum, strict=True)),
        f"{VLLM.e2e}_count{{{LABELS}}} {cum[-1]!r}",
        f"{VLLM.e2e}_sum{{{LABELS}}} {cum[-1] * 0.4!r}",
    ]
    engines = draw(st.integers(0, 7))  # a few data-parallel engines: more series, each its own labels
    lines += [f'{VLLM.waiting}{{engine="{i}",model_name="llama"}} 1.0' for i in range(1, engines + 1)]
    if draw(st.booleans()):  # a name llmscale does not read, written twice: none of its business
        lines += ['process_cpu_seconds_total{x="1"} 3.0', 'process_cpu_seconds_total{x="1"} 3.0']
    return lines


def _stamp(lines: list[str], t_s: float) -> list[str]:
    return [ln if ln.startswith("#") else f"{ln} {int(t_s * 1000)}" for ln in lines]


@st.composite
def sane_pages(draw: st.DrawFn) -> str:
    lines = draw(sane_lines())
    if draw(st.booleans()):  # stamped, with a clock a little behind or ahead
        lines = _stamp(lines, WALL_S + draw(st.floats(-AGE_S + 1, AHEAD_S - 1)))
    return "\n".join(lines) + "\n"


READ_SAMPLES = (VLLM.waiting, VLLM.running, VLLM.kv_usage, VLLM.generation_tokens, f"{VLLM.e2e}_bucket")


def _index_of(lines: list[str], prefix: str) -> int:
    return next(i for i, ln in enumerate(lines) if ln.startswith(prefix + "{"))


def _set_value(lines: list[str], name: str, value: str) -> list[str]:
    i = _index_of(lines, name)
    out = list(lines)
    out[i] = out[i].rsplit(" ", 1)[0] + " " + value
    return out


@st.composite
def nonsense_pages(draw: st.DrawFn) -> tuple[str, str]:
    """(kind, page): a sane page given one kind of nonsense."""
    lines = draw(sane_lines())
    kind = draw(
        st.sampled_from(
            ["implausible", "falling-buckets", "duplicate", "explosion", "future", "negative", "nan", "inf"]
        )
    )
    if kind == "implausible":
        name = draw(st.sampled_from([VLLM.waiting, VLLM.running]))
        lines = _set_value(lines, name, repr(draw(st.floats(1.001e6, 1e300))))
    elif kind == "falling-buckets":
        first = _index_of(lines, f"{VLLM.e2e}_bucket")
        i = draw(st.integers(1, len(BOUNDS) - 1))
        before = float(lines[first + i - 1].rsplit(" ", 1)[1])
        here = float(lines[first + i].rsplit(" ", 1)[1])
        total = float(lines[first + len(BOUNDS) - 1].rsplit(" ", 1)[1])
        # Bucket i - 1 raised above bucket i by more than a torn scrape's slack (2 + 0.1% of the
        # total, which raising a bucket below +Inf leaves as it was); the buckets below stay under it.
        fall = 3.0 + 0.002 * total + draw(st.floats(0, 1e6))
        raised = max(before, here + fall)
        lines[first + i - 1] = lines[first + i - 1].rsplit(" ", 1)[0] + f" {raised!r}"
    elif kind == "duplicate":
        name = draw(st.sampled_from(READ_SAMPLES))
        line = lines[_index_of(lines, name)]
        if draw(st.booleans()):  # the same series with its labels in another order
            head, value = line.rsplit(" ", 1)
            n, labels = head[:-1].split("{", 1)
            pairs = labels.split(",")
            line = f"{n}{{{','.join(reversed(pairs))}}} {value}"
        lines.insert(draw(st.integers(0, len(lines))), line)
    elif kind == "explosion":
        k = draw(st.integers(257, 3000))
        lines += [f'{VLLM.waiting}{{pod="x",shard="{i}"}} 0.0' for i in range(k)]
    elif kind == "future":
        lines = _stamp(lines, WALL_S + draw(st.floats(AHEAD_S + 1, 1e9)))
    else:
        name = draw(st.sampled_from([VLLM.waiting, VLLM.running, VLLM.kv_usage, VLLM.generation_tokens]))
        value = {"negative": repr(-draw(st.floats(1e-6, 1e9))), "nan": "NaN", "inf": "+Inf"}[kind]
        lines = _set_value(lines, name, value)
    return kind, "\n".join(lines) + "\n"


def _parse_both(text: str, learnt_from: str | None = None) -> ParsedPage | None:
    """The page as both readers read it (None: refused with ExpositionError by both)."""
    try:
        want: ParsedPage | None = parse_exposition(text, source="fuzz")
    except ExpositionError:
        want = None
    reader = PageReader()
    try:
        if learnt_from is not None:
            reader.parse(learnt_from, key="pod")
        got: ParsedPage | None = reader.parse(text, key="pod", source="fuzz")
    except ExpositionError:
        got = None
    assert (got is None) == (want is None)
    if got is not None and want is not None:
        assert (got.series, got.duplicates) == (want.series, want.duplicates)
        assert got.values.keys() == want.values.keys()
    return want


def _verdict(page: ParsedPage) -> str | None:
    return vet_page(page, WALL_S, max_sample_age_s=AGE_S, max_clock_ahead_s=AHEAD_S)


@FUZZ
@given(text=sane_pages())
def test_a_sane_page_is_accepted(text: str) -> None:
    with bounded():
        page = _parse_both(text)
        assert page is not None
        assert _verdict(page) is None, text


@FUZZ
@given(sane=sane_pages(), bad=nonsense_pages())
def test_a_page_with_nonsense_is_refused_whichever_reader_reads_it(sane: str, bad: tuple[str, str]) -> None:
    kind, text = bad
    with bounded():
        page = _parse_both(text, learnt_from=sane)
        if page is None:
            return  # refused by the parser: never load either
        why = _verdict(page)
    assert why is not None, (kind, text[:2000])


@FUZZ
@given(
    body=st.one_of(
        st.binary(max_size=2000),
        st.lists(st.sampled_from(["{", "}", '"', "=", ",", " ", "\n", "le", "+Inf", "NaN", "#", "1e999"]))
        .map("".join)
        .map(str.encode),
    )
)
def test_any_bytes_parse_or_fail_typed_and_vet_without_raising(body: bytes) -> None:
    text = body.decode("utf-8", errors="replace")
    with bounded():
        page = _parse_both(text)
        if page is not None:
            _verdict(page)


def _counter_page(done: float) -> ParsedPage:
    return parse_exposition(f"{VLLM.generation_tokens}{{{LABELS}}} {done!r}\n")


@FUZZ
@given(steps=st.lists(st.floats(0, 1e9), min_size=1, max_size=20), start=st.floats(0, 1e12))
def test_counters_that_only_grow_are_accepted(steps: list[float], start: float) -> None:
    history = CounterHistory()
    value = start
    for k, step in enumerate(steps):
        value += step
        assert history.went_back("pod", _counter_page(value), k * 2.0) is None


@FUZZ
@given(
    start=st.floats(1000.0, 1e12),
    share=st.floats(0.1001, 0.9999),
)
def test_a_counter_that_falls_short_of_zero_is_refused(start: float, share: float) -> None:
    history = CounterHistory()
    assert history.went_back("pod", _counter_page(start), 0.0) is None
    assert history.went_back("pod", _counter_page(start * share), 2.0) is not None


@FUZZ
@given(gap_s=st.floats(0.5, 59.0), near_zero=st.floats(0, 10))
def test_a_second_restart_within_a_minute_is_refused(gap_s: float, near_zero: float) -> None:
    history = CounterHistory()
    assert history.went_back("pod", _counter_page(5000.0), 0.0) is None
    assert history.went_back("pod", _counter_page(near_zero), 2.0) is None  # a restart
    assert history.went_back("pod", _counter_page(near_zero + 4000.0), 2.0 + gap_s / 2) is None
    assert history.went_back("pod", _counter_page(near_zero), 2.0 + gap_s) is not None


def test_the_alarm_catches_a_hang() -> None:
    with pytest.raises(Hang), bounded(0.2):
        while True:
            math.sqrt(2.0)
