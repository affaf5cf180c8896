"""Prometheus text exposition -> a replica's ``values`` and ``histograms``, as the simulator shapes them.

The result follows the contract of docs/notes/live-controller-contracts.md:

* ``values`` is keyed by the sample name as the page writes it, which is
  also the name Prometheus stores (vLLM's counters under their ``_total``
  name, as :mod:`llmscale.metrics.names` spells them; TGI's and Triton's
  counters without it);
* ``histograms`` maps a family name to a cumulative :class:`Histogram` shaped
  like the simulator's (``sim/histogram.py``): ``bounds`` ascending with
  ``+Inf`` last and ``cumulative`` of the same length, which is what
  :func:`llmscale.signals.histograms.histogram_quantile` reads.

One page may hold several series of a family (vLLM labels every series with
``model_name`` and ``engine``; the DCGM exporter one per ``gpu``). They are
folded into one number per name, by what the number means:

* counts and counters add up (two engines with 3 waiting requests each: 6);
* ratios and percentages are averaged (two GPUs at 40 % and 60 %: 50 %),
  see :func:`aggregation_of`;
* ``*_info`` gauges carry their data in labels and are 1: the max is kept;
* histograms add up bucket by bucket, as PromQL's ``sum by (le)``.

NaN samples are left out of the values (the exporter has no value), and so are
``*_created`` series (a creation time, not a measurement). The page says which
names had a NaN sample (``ParsedPage.nan``) and the oldest explicit timestamp of
each name that carries one (``ParsedPage.stamped_s``): the scraper decides from
them whether the replica's page can be trusted at all (``metrics/vetting.py``).

Two parsers give the same result. :func:`parse_exposition` first tries a fast
one-pass reader (one regular expression per line) that handles the regular
text exporters write (prometheus_client, the Go client, vLLM, TGI, Triton,
DCGM). On a 169-line vLLM page it is 8-12x faster than prometheus_client's
parser (measured 9 ms against 78-109 ms per page on a shared, heavily loaded
2-core VM), which matters at 500 pages a tick. Series seen before (exporters repeat
them on every scrape of every pod) skip the regular expression through a bounded
cache of line heads (``_HEADS``): on the emulator's 199-line pages, steady state,
~1.8x less CPU again, ~17x faster than prometheus_client's parser alone
(benchmarks/controller_tick.py). Any line it does not recognise
(escaped label values, spaces inside braces, float timestamps) sends the whole
page to prometheus_client's parser, which also produces the error for
malformed text. ``tests/metrics/test_metrics_exposition_equivalence.py``
checks that both agree on pages prometheus_client renders.

Both readers also record each sample's series (its name and label set), so the page says which
names it holds several series of and which series it holds twice (``ParsedPage.series``,
``ParsedPage.duplicates``; a duplicated queue sample would be summed): ~+30% CPU on the line
reader (6.5 against 5.0 ms a 268-line emulate page, one loaded run, both trees interleaved),
nothing on the layout path below, whose shape is learnt with its layout.

A scraper reads the same sources tick after tick: :class:`PageReader` learns
each source's page layout (its lines with the values left out) from one page
read by the fast reader, and reads later pages of that layout with a few
whole-list operations and a fold planned once, no Python per line: on the same
pages ~4x less CPU than the line reader (0.28 against 1.2 ms a page in one
benchmark run). Whatever does not match the layout goes through
:func:`parse_exposition`, so results and errors are the same
(``tests/metrics/test_metrics_page_reader.py``).
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter, le
from typing import Literal, Protocol, TypeVar

from llmscale._source_first import native
from llmscale.errors import LlmscaleError
from llmscale.metrics.names import DCGM
from llmscale.types import Histogram, HistogramView

__all__ = [
    "ExpositionError",
    "PackedHistogram",
    "PageReader",
    "ParsedPage",
    "aggregation_of",
    "parse_exposition",
    "parse_exposition_reference",
]

Aggregation = Literal["sum", "mean", "max"]
_T = TypeVar("_T")
#: a sample's labels as a parser has them: the fast reader's text between the braces (None
#: without braces), the reference parser's sorted (name, value) pairs
_Labels = str | tuple[tuple[str, str], ...] | None
_LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"\\]*)"')


def _label_key(labels: _Labels) -> tuple[tuple[str, str], ...]:
    """One spelling of a label set whichever parser read it (``b="2",a="1"`` = ``a="1",b="2"``).

    The fast reader's label texts are cached (exporters write the same ones every scrape): a
    page's ~150 histogram bucket lines cost a look-up each after the first page, not a pattern.
    """
    if labels is None:
        return ()
    if isinstance(labels, str):
        key = _LABEL_KEYS.get(labels)
        if key is None:
            key = tuple(sorted(_LABEL_PAIR.findall(labels)))
            _remember(_LABEL_KEYS, labels, key)
        return key
    return labels


def _page_shape(labelsets: Mapping[str, list[_Labels]]) -> tuple[dict[str, int], frozenset[str]]:
    """(series per sample name with more than one, names with a repeated series).

    Only names with several series are looked at, so a vLLM page (one series each) costs a
    walk over its names; a DCGM page's per-GPU series are compared by their label sets.
    """
    series: dict[str, int] = {}
    dups: list[str] = []
    for name, sets in labelsets.items():
        if len(sets) > 1:
            if not name.endswith("_bucket"):  # one line per bound: a histogram's _count counts its series
                series[name] = len(sets)
            if len({_label_key(ls) for ls in sets}) < len(sets):
                dups.append(name)
    return series, frozenset(dups)


#: ratios / percentages that are averaged over a page's label sets (everything else adds up)
_MEAN_NAMES = frozenset(
    {
        DCGM.GPU_UTIL,
        DCGM.MEM_COPY_UTIL,
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "nv_gpu_utilization",  # Triton, 0-1 per gpu_uuid
    }
)
_MEAN_SUFFIXES = ("_perc", "_ratio", "_utilization", "_UTIL", "_fraction")
_MEAN_PREFIXES = ("DCGM_FI_PROF_",)  # DCGM profiling fields are 0-1 activity ratios


def aggregation_of(name: str) -> Aggregation:
    """How series of gauge ``name`` are folded over label sets.

    ``vllm:kv_cache_usage_perc`` of two engines at 0.2 and 0.4 reads 0.3 (a
    pool usage, not 0.6); ``DCGM_FI_DEV_FB_USED`` of two GPUs adds up (MiB the
    pod holds); ``vllm:num_requests_waiting`` adds up.
    """
    if name in _MEAN_NAMES or name.endswith(_MEAN_SUFFIXES) or name.startswith(_MEAN_PREFIXES):
        return "mean"
    if name.endswith("_info"):
        return "max"
    return "sum"


class ExpositionError(LlmscaleError):
    """The text is not valid Prometheus exposition; ``line`` is 1-based (None when unknown)."""

    def __init__(self, message: str, *, line: int | None = None, source: str | None = None) -> None:
        self.line = line
        self.source = source
        where = [w for w in (source, None if line is None else f"line {line}") if w]
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


@dataclass(frozen=True, slots=True)
class PackedHistogram:
    """A :class:`~llmscale.types.HistogramView` whose counts are one ``array('d')``, for the window.

    A controller's window holds ``WINDOW_LEN`` (20) observations of every replica. A parsed
    histogram's counts are a tuple of float objects (8 bytes of pointer and 24 of float each);
    packed, 8 bytes each, and ``bounds`` is the layout's tuple, shared by every page of a source.
    On the emulator's vLLM pages that is ~2.5x less memory per kept histogram
    (``benchmarks/controller_tick.py --replicas 5000`` prints the peak). A
    ``PageReader(packed=True)`` folds its layout pages straight into these (a slice of the page's
    values), so a scraper builds no tuple of floats to pack again.
    """

    bounds: tuple[float, ...]
    cumulative: array[float]
    sum: float
    count: float


@dataclass(frozen=True, slots=True)
class ParsedPage:
    """One scraped page folded into the sample shape (see the module docstring)."""

    values: dict[str, float] = field(default_factory=dict)
    #: :class:`Histogram` values, or :class:`PackedHistogram` from a ``PageReader(packed=True)``
    histograms: dict[str, HistogramView] = field(default_factory=dict)
    #: value names and histogram families with a NaN sample on the page (left out of the above)
    nan: frozenset[str] = frozenset()
    #: per value name or histogram family, its oldest explicit sample timestamp (Unix seconds);
    #: only names whose samples carry one (exporters rarely do)
    stamped_s: dict[str, float] = field(default_factory=dict)
    #: the same names' newest timestamp (a sample stamped in the future is refused by the scraper)
    stamped_newest_s: dict[str, float] = field(default_factory=dict)
    #: per sample name as written (``..._count`` for histograms; not ``..._bucket``, written once
    #: per bound), how many series the page has of it: only names with more than one (vLLM's
    #: engines, DCGM's GPUs)
    series: dict[str, int] = field(default_factory=dict)
    #: sample names with the same series (name and label set) twice on the page: folded, a
    #: duplicated queue sample would double the queue (``metrics/vetting.py`` refuses the page)
    duplicates: frozenset[str] = frozenset()
    #: every number on the page is finite, at least 0 and at most 2**53, and every histogram's counts
    #: never fall: what ``metrics/vetting.py`` would check value by value, established at once for a
    #: page read through a layout (False: not established, the vetting looks). Not part of the
    #: page's content: two pages with the same numbers are equal whichever reader read them.
    plain: bool = field(default=False, compare=False)


# ---------------------------------------------------------------------------------------------
# Folding samples into values and histograms (shared by both parsers)


class _Sink(Protocol):
    """Where the fast reader puts what it reads: a :class:`_Folder`, or a :class:`_SlotRecorder`."""

    def value(self, name: str, v: float) -> None: ...
    def bucket(self, family: str, le: float, v: float) -> None: ...
    def hist_sum(self, family: str, v: float) -> None: ...
    def hist_count(self, family: str, v: float) -> None: ...
    def nan_of(self, name: str) -> None: ...
    def stamp(self, name: str, t_s: float) -> None: ...
    def series(self, name: str, labels: _Labels) -> None: ...


@dataclass(slots=True)
class _HistAcc:
    buckets: dict[float, float] = field(default_factory=dict)
    sum: float = 0.0
    count: float | None = None


class _Folder:
    """Accumulates samples of one page; :meth:`page` returns the folded result."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.ns: dict[str, int] = {}
        self.maxes: dict[str, float] = {}
        self.hists: dict[str, _HistAcc] = {}
        self.nans: set[str] = set()
        self.stamps: dict[str, float] = {}
        self.newest: dict[str, float] = {}
        self.labelsets: dict[str, list[_Labels]] = {}

    def nan_of(self, name: str) -> None:
        self.nans.add(name)

    def stamp(self, name: str, t_s: float) -> None:
        old = self.stamps.get(name)
        if old is None or t_s < old:
            self.stamps[name] = t_s
        new = self.newest.get(name)
        if new is None or t_s > new:
            self.newest[name] = t_s

    def series(self, name: str, labels: _Labels) -> None:
        sets = self.labelsets.get(name)
        if sets is None:
            self.labelsets[name] = [labels]
        else:
            sets.append(labels)

    def value(self, name: str, v: float) -> None:
        if name.endswith("_created"):  # a creation time, not a measurement
            return
        if v != v:  # NaN: no value, and the page says so
            self.nans.add(name)
            return
        how = aggregation_of(name)
        if how == "max":
            old = self.maxes.get(name)
            self.maxes[name] = v if old is None or v > old else old
            return
        self.sums[name] = self.sums.get(name, 0.0) + v
        if how == "mean":
            self.ns[name] = self.ns.get(name, 0) + 1

    def bucket(self, family: str, le: float, v: float) -> None:
        acc = self.hists.get(family)
        if acc is None:
            acc = self.hists[family] = _HistAcc()
        acc.buckets[le] = acc.buckets.get(le, 0.0) + v

    def hist_sum(self, family: str, v: float) -> None:
        acc = self.hists.get(family)
        if acc is None:
            acc = self.hists[family] = _HistAcc()
        acc.sum += v

    def hist_count(self, family: str, v: float) -> None:
        acc = self.hists.get(family)
        if acc is None:
            acc = self.hists[family] = _HistAcc()
        acc.count = v if acc.count is None else acc.count + v

    def page(self) -> ParsedPage:
        values = dict(self.maxes)
        ns = self.ns
        for name, total in self.sums.items():
            n = ns.get(name)
            values[name] = total / n if n else total
        hists: dict[str, HistogramView] = {}
        for family, acc in self.hists.items():
            h = build_histogram(acc.buckets, acc.sum, acc.count)
            if h is not None:
                hists[family] = h
        series, dups = _page_shape(self.labelsets)
        if self.nans or self.stamps:
            return ParsedPage(
                values, hists, frozenset(self.nans), dict(self.stamps), dict(self.newest), series, dups
            )
        return ParsedPage(values, hists, series=series, duplicates=dups)


def build_histogram(buckets: Mapping[float, float], total: float, count: float | None) -> Histogram | None:
    """A cumulative :class:`Histogram` from ``{upper bound: cumulative count}``.

    The ``+Inf`` bucket is the count; when an exporter leaves it out, ``_count``
    stands in. None when neither is known (nothing to anchor the tail).
    """
    if math.inf not in buckets:
        if count is None:
            return None
        buckets = {**buckets, math.inf: count}
    bounds = tuple(sorted(buckets))
    cumulative = tuple(buckets[b] for b in bounds)
    return Histogram(bounds, cumulative, total, cumulative[-1] if count is None else count)


def _float(text: str) -> float:
    # Exposition spells infinities "+Inf"/"-Inf" and NaN "NaN"; float() reads all three.
    return float(text)


# ---------------------------------------------------------------------------------------------
# The reference parser: prometheus_client's, with line numbers on errors


class _CountingLines:
    """Iterates the lines of ``text`` and remembers how many were read (for error positions)."""

    def __init__(self, text: str) -> None:
        self._lines = text.splitlines(keepends=True)
        self.n = 0

    def __iter__(self) -> Iterator[str]:
        for line in self._lines:
            self.n += 1
            yield line


def _selected(labels: Mapping[str, str], select: tuple[str, str] | None, page_has_label: bool) -> bool:
    if select is None or not page_has_label:
        return True
    return labels.get(select[0]) == select[1]


def parse_exposition_reference(
    text: str, *, select: tuple[str, str] | None = None, source: str | None = None
) -> ParsedPage:
    """Parse with prometheus_client's parser; :func:`parse_exposition` explains ``select``."""
    from prometheus_client.parser import text_fd_to_metric_families

    lines = _CountingLines(text)
    try:
        families = list(text_fd_to_metric_families(lines))  # type: ignore[arg-type]
    except (ValueError, IndexError, TypeError) as e:
        detail = str(e) or type(e).__name__
        raise ExpositionError(f"invalid exposition ({detail})", line=lines.n, source=source) from e
    has_label = select is not None and any(select[0] in s.labels for fam in families for s in fam.samples)
    # prometheus_client renames the samples of a counter declared without "_total" (TGI's
    # tgi_request_count becomes tgi_request_count_total); Prometheus stores them as exposed,
    # so the name goes back to the page's, and both sources key the counter alike.
    bare_counters = {n for n in _COUNTER_TYPE.findall(text) if not n.endswith("_total")}
    folder = _Folder()
    for fam in families:
        hist = fam.type == "histogram"
        renamed = fam.type == "counter" and fam.name in bare_counters
        for s in fam.samples:
            if not _selected(s.labels, select, has_label):
                continue
            name = s.name[: -len("_total")] if renamed and s.name.endswith("_total") else s.name
            folder.series(name, tuple(sorted(s.labels.items())))
            v = float(s.value)
            if hist:
                if s.name == fam.name + "_bucket":
                    le = s.labels.get("le")
                    if le is None:
                        raise ExpositionError(f"{s.name} without an le label", source=source)
                    try:
                        bound = _float(le)
                    except ValueError as e:
                        raise ExpositionError(f"{s.name}: le={le!r} is not a number", source=source) from e
                    if v == v:
                        folder.bucket(fam.name, bound, v)
                elif s.name == fam.name + "_sum" and v == v:
                    folder.hist_sum(fam.name, v)
                elif s.name == fam.name + "_count" and v == v:
                    folder.hist_count(fam.name, v)
                if v != v:
                    folder.nan_of(fam.name)
                if s.timestamp is not None:
                    folder.stamp(fam.name, float(s.timestamp))
                continue
            if fam.type == "summary" and "quantile" in s.labels:
                continue  # pre-computed quantiles do not add up over label sets
            folder.value(name, v)
            if s.timestamp is not None and not name.endswith("_created"):
                folder.stamp(name, float(s.timestamp))
    return folder.page()


# ---------------------------------------------------------------------------------------------
# The fast parser


class _Unrecognised(Exception):
    """A line the fast parser does not handle: the page goes to the reference parser."""


_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_PAIR = r'[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
# A whole sample line in one match: name, optional {labels} (no escapes), a value without "_"
# (float() reads 1_000, the text format does not), an optional integer timestamp (milliseconds).
_SAMPLE = re.compile(
    rf"[ \t]*({_NAME})(?:\{{((?:{_PAIR}(?:,{_PAIR})*,?)?)\}})?[ \t]+([^\s_]+)(?:[ \t]+(-?\d+))?[ \t]*"
)
_LE = re.compile(r'(?:^|,)le="([^"]*)"')
_META = re.compile(rf"#[ \t]+(HELP|TYPE)[ \t]+({_NAME})(?:[ \t]+(.*))?")
_COUNTER_TYPE = re.compile(rf"^[ \t]*#[ \t]+TYPE[ \t]+({_NAME})[ \t]+counter[ \t]*$", re.MULTILINE)
_ALLOWED = {
    "counter": ("",),
    "gauge": ("",),
    "summary": ("_count", "_sum", ""),
    "histogram": ("_count", "_sum", "_bucket"),
}


#: Series seen on earlier lines (of any page): the text of a sample line up to its last space ->
#: (name, labels, le label or None) as the sample pattern read it. Kept only for lines where that
#: space is the one before the value and the value ends the line (no timestamp), so a line
#: ``head + " " + value`` with a value the pattern accepts matches the pattern with these very
#: groups. Exporters repeat the same series on every scrape of every pod, so after the first
#: scrape most lines skip the pattern. Bounded: cleared when full.
_HEADS: dict[str, tuple[str, str | None, str | None]] = {}
#: HELP and TYPE lines seen before -> the groups of _META (such a line never matches _SAMPLE)
_METAS: dict[str, tuple[str, str, str | None]] = {}
#: label texts seen before -> their sorted (name, value) pairs (see _label_key)
_LABEL_KEYS: dict[str, tuple[tuple[str, str], ...]] = {}
_CACHE_MAX = 50_000


def _remember(cache: dict[str, _T], key: str, item: _T) -> None:
    if len(cache) >= _CACHE_MAX:
        cache.clear()  # a page full of ever-new series (ids in labels) must not grow memory
    cache[key] = item


def _fast(text: str, select: tuple[str, str] | None, folder: _Sink) -> None:
    """Read regular exposition text in one pass into ``folder``; raises :class:`_Unrecognised` otherwise.

    Family tracking mirrors prometheus_client's parser (a sample outside the
    open family becomes an untyped family of its own), so both read a page alike.
    ``folder`` is a :class:`_Folder`, or the :class:`_SlotRecorder` that learns a layout.
    """
    pick: re.Pattern[str] | None = None
    wanted = ""
    # Whether the page carries the label at all decides if it is filtered (see parse_exposition).
    if select is not None and re.search(rf'[{{,]{re.escape(select[0])}="', text):
        pick = re.compile(rf'(?:^|,){re.escape(select[0])}="([^"]*)"')
        wanted = select[1]
    value = folder.value
    series = folder.series
    family = ""
    typ = "untyped"
    allowed: tuple[str, ...] = ()
    hist = False  # the open family is a histogram
    bounds: dict[str, float] = {}  # le text -> float, parsed once per page
    sample_match = _SAMPLE.fullmatch
    le_search = _LE.search
    heads_get = _HEADS.get
    metas_get = _METAS.get
    for line in text.splitlines():
        # A line whose text up to its last space is a series seen before (on any page) skips the
        # sample pattern: see _HEADS. Its value must still be one the pattern accepts.
        i = line.rfind(" ")
        hit = heads_get(line[:i]) if i > 0 else None
        if hit is not None:
            value_text = line[i + 1 :]
            if value_text and "_" not in value_text and value_text.strip() == value_text:
                try:
                    v = float(value_text)  # reads "+Inf", "-Inf" and "NaN" as the format spells them
                except ValueError:
                    hit = None  # the pattern's path below words the failure
            else:
                hit = None
        stamp_ms: str | None = None
        if hit is not None:
            name, labels, le = hit
        else:
            meta = metas_get(line)
            m = None
            if meta is None:
                m = sample_match(line)
                if m is None:
                    stripped = line.strip()
                    if not stripped:
                        continue
                    if stripped[0] != "#":
                        raise _Unrecognised(stripped)
                    meta_m = _META.fullmatch(stripped)
                    if meta_m is None:
                        if stripped.startswith(("# HELP", "# TYPE")) or '"' in stripped:
                            raise _Unrecognised(stripped)
                        continue  # another comment
                    meta = (meta_m.group(1), meta_m.group(2), meta_m.group(3))
                    _remember(_METAS, line, meta)
            if meta is not None:
                kind, name, rest = meta
                if kind == "HELP":
                    if name != family:
                        family, typ, allowed, hist = name, "untyped", (name,), False
                else:
                    if rest is None:
                        raise _Unrecognised(line.strip())
                    family, typ = name, rest.strip()
                    allowed = tuple(name + suffix for suffix in _ALLOWED.get(typ, ("",)))
                    hist = typ == "histogram"
                continue
            assert m is not None
            name, labels, value_text, stamp_ms = m.groups()
            try:
                v = float(value_text)  # reads "+Inf", "-Inf" and "NaN" as the format spells them
            except ValueError as e:
                raise _Unrecognised(line) from e
            le_m = None if labels is None else le_search(labels)
            le = None if le_m is None else le_m.group(1)
            if m.start(3) == i + 1 and m.end(3) == len(line):
                _remember(_HEADS, line[:i], (name, labels, le))
        if pick is not None:
            got = None if labels is None else pick.search(labels)
            if got is None or got.group(1) != wanted:
                if name not in allowed:
                    family, typ, allowed, hist = "", "untyped", (), False
                continue
        series(name, labels)
        if name not in allowed:
            family, typ, allowed, hist = "", "untyped", (), False
            value(name, v)
            if stamp_ms is not None and not name.endswith("_created"):
                folder.stamp(name, int(stamp_ms) / 1000.0)
            continue
        if hist:
            if stamp_ms is not None:
                folder.stamp(family, int(stamp_ms) / 1000.0)
            if v != v:
                folder.nan_of(family)
                continue
            suffix = name[len(family) :]
            if suffix == "_bucket":
                if le is None:
                    raise _Unrecognised(line)  # the reference parser words the error
                bound = bounds.get(le)
                if bound is None:
                    try:
                        bound = bounds[le] = float(le)
                    except ValueError as e:
                        raise _Unrecognised(line) from e
                folder.bucket(family, bound, v)
            elif suffix == "_sum":
                folder.hist_sum(family, v)
            else:
                folder.hist_count(family, v)
            continue
        if typ == "summary" and labels is not None and 'quantile="' in labels:
            continue  # pre-computed quantiles do not add up over label sets
        value(name, v)
        if stamp_ms is not None and not name.endswith("_created"):
            folder.stamp(name, int(stamp_ms) / 1000.0)


# ---------------------------------------------------------------------------------------------
# Reusing a page's layout: the same source serves the same lines every scrape, only values move


class _SlotRecorder:
    """A sink for :func:`_fast` run over a page whose k-th value reads ``k + 0.5`` (a marker).

    What it records is which value slot feeds which output, in page order, so
    :class:`_Layout` folds the next page of that layout as :class:`_Folder` would.
    """

    def __init__(self, n_slots: int) -> None:
        self.n_slots = n_slots
        self.labelsets: dict[str, list[_Labels]] = {}
        self.values: dict[str, list[int]] = {}
        self.buckets: dict[str, dict[float, list[int]]] = {}
        self.sums: dict[str, list[int]] = {}
        self.counts: dict[str, list[int]] = {}

    def nan_of(self, name: str) -> None:
        raise _Unrecognised(name)  # never: a marked page has no NaN (see _layout_of)

    def stamp(self, name: str, t_s: float) -> None:
        raise _Unrecognised(name)  # never: _layout_of refuses lines with a timestamp

    def series(self, name: str, labels: _Labels) -> None:
        self.labelsets.setdefault(name, []).append(labels)

    def _slot(self, v: float) -> int:
        k = int(v)
        if v != k + 0.5 or not 0 <= k < self.n_slots:
            raise _Unrecognised(f"{v!r} is not a slot marker")  # cannot happen: every value is one
        return k

    def value(self, name: str, v: float) -> None:
        if not name.endswith("_created"):  # as _Folder.value (markers are never NaN)
            self.values.setdefault(name, []).append(self._slot(v))

    def bucket(self, family: str, le: float, v: float) -> None:
        self.buckets.setdefault(family, {}).setdefault(le, []).append(self._slot(v))

    def hist_sum(self, family: str, v: float) -> None:
        self.buckets.setdefault(family, {})
        self.sums.setdefault(family, []).append(self._slot(v))

    def hist_count(self, family: str, v: float) -> None:
        self.buckets.setdefault(family, {})
        self.counts.setdefault(family, []).append(self._slot(v))


def _pick(idx: Sequence[int]) -> Callable[[Sequence[_T]], tuple[_T, ...]]:
    """``itemgetter(*idx)`` that always returns a tuple (itemgetter of one index does not)."""
    if len(idx) == 1:
        only = idx[0]
        return lambda xs: (xs[only],)
    if not idx:
        return lambda xs: ()
    getter: Callable[[Sequence[_T]], tuple[_T, ...]] = itemgetter(*idx)
    return getter


def _total(vals: Sequence[float], slots: Sequence[int]) -> float:
    """Slots added in page order from 0.0, as _Folder adds up buckets, sums and values."""
    t = 0.0
    for i in slots:
        t += vals[i]
    return t


@dataclass(frozen=True, slots=True)
class _HistPlan:
    family: str
    bounds: tuple[float, ...]  # as build_histogram orders them, +Inf last (added from _count if absent)
    buckets: tuple[tuple[int, ...], ...]  # the slots adding up to each bound's count (+Inf's if present)
    one_each: Callable[[Sequence[float]], tuple[float, ...]] | None  # when every bound has one slot
    sum_slots: tuple[int, ...]
    count_slots: tuple[int, ...] | None  # None: no _count line
    inf_from_count: bool
    #: (first, end) when the buckets are one series on consecutive lines (an exporter writes a
    #: histogram's bucket lines in a row) and _sum and _count one line each: the packed counts
    #: are then one slice of the page's values
    run: tuple[int, int, int, int] | None = None  # (first, end, sum slot, count slot)

    def packed(self, arr: array[float], vals: Sequence[float]) -> PackedHistogram:
        """:meth:`histogram` with its counts in an ``array('d')`` (``arr`` holds ``vals``); the same
        numbers as packing :meth:`histogram`'s result (``tests/metrics/test_page_reader_keep.py``)."""
        run = self.run
        if run is not None:
            first, end, at_sum, at_count = run
            return PackedHistogram(self.bounds, arr[first:end], vals[at_sum], vals[at_count])
        h = self.histogram(vals)
        return PackedHistogram(h.bounds, array("d", h.cumulative), h.sum, h.count)

    def histogram(self, vals: Sequence[float]) -> Histogram:
        if self.one_each is not None and len(self.sum_slots) == 1 and not self.inf_from_count:
            count_slots = self.count_slots
            if count_slots is not None and len(count_slots) == 1:  # one series: no adding up (~1/4 faster)
                return Histogram(
                    self.bounds, self.one_each(vals), vals[self.sum_slots[0]], vals[count_slots[0]]
                )
        if self.one_each is not None:
            cumulative = self.one_each(vals)
        else:
            cumulative = tuple(_total(vals, slots) for slots in self.buckets)
        count = None
        if self.count_slots is not None:
            first, *rest = self.count_slots
            count = vals[first]
            for i in rest:
                count += vals[i]
        if self.inf_from_count:
            assert count is not None  # a layout has no such plan otherwise (see _layout_of)
            cumulative = (*cumulative, count)
        total = _total(vals, self.sum_slots) if len(self.sum_slots) != 1 else vals[self.sum_slots[0]]
        return Histogram(self.bounds, cumulative, total, cumulative[-1] if count is None else count)


@dataclass(frozen=True, slots=True)
class _Layout:
    """A page with its values left out, and how its values fold into a :class:`ParsedPage`.

    A page matches when it has as many lines, the same comment and blank lines
    at the same places, and each sample line is the recorded head (the text up
    to the value) followed by one value token. Then the fast reader would read
    it exactly as it read the page the layout was learnt from, with these values.
    """

    n_lines: int
    prefixes: tuple[str, ...]  # per line: a comment or blank line's whole text, a sample line's head
    kinds: bytes  # per line: 1 for a sample line, 0 for a comment or blank line (for the C scan)
    fixed_at: Callable[[Sequence[str]], tuple[str, ...]]  # picks the comment and blank lines
    nothing_left: tuple[str, ...]  # "" for each of them
    values_at: Callable[[Sequence[str]], tuple[str, ...]]  # picks the sample lines
    other_chars: int  # characters of a matching page besides its values: prefixes and line breaks
    single_names: tuple[str, ...]  # values with one series on the page...
    single_at: Callable[[Sequence[float]], tuple[float, ...]]  # ...read from these slots
    multi: tuple[tuple[str, Aggregation, tuple[int, ...]], ...]  # values folded over several series
    hists: tuple[_HistPlan, ...]
    series: dict[str, int]  # as ParsedPage.series (a page with a duplicated series has no layout)
    #: each kept histogram's counts as a (first, end) slice of the page's values, when every one is
    #: such a run (_HistPlan.run); None otherwise (ParsedPage.plain is then never established)
    runs: tuple[tuple[int, int], ...] | None

    def value_texts(self, text: str) -> tuple[str, ...] | None:
        """The value of each sample line of ``text``, or None when the page does not have this layout."""
        lines = text.split("\n")
        if len(lines) != self.n_lines:
            return None
        # One pass of C over the lines cuts each learnt prefix: a sample line leaves its value, a
        # comment or blank line nothing. A line without its prefix stays whole, so the page then
        # has more characters than its prefixes, line breaks and values add up to (the length
        # check); a comment line with more text than learnt leaves that text (the "" check).
        # ~2x less CPU than checking and cutting each line in turn (benchmarks/controller_tick.py).
        rests = list(map(str.removeprefix, lines, self.prefixes))
        if self.fixed_at(rests) != self.nothing_left:
            return None
        texts = self.values_at(rests)
        joined = "".join(texts)
        if len(joined) != len(text) - self.other_chars:
            return None
        # One token per line, as the sample pattern's value group: no blank (a timestamp after the
        # value, a trailing space), no "_" (float() reads 1_000, the format does not), nothing
        # unprintable (\r, a form feed: str.splitlines would split the fast reader's line there).
        if " " in joined or "_" in joined or not joined.isprintable():
            return None
        return texts

    def read(self, text: str, packed: bool = False) -> ParsedPage | Literal[False] | None:
        """``text`` read through this layout: its page; None when it needs the line-by-line reader
        (a NaN, a value that is not a number); False when it does not have this layout.

        The C scan (``metrics/_scan.c``) reads what it can in one pass; what it leaves (None)
        is read by :meth:`value_texts` and :meth:`fold`, which decide.
        """
        if _layout_numbers is not None:
            vals = _layout_numbers(text, self.prefixes, self.kinds)
            if vals is not None:
                return self.fold_numbers(vals, packed)
        texts = self.value_texts(text)
        if texts is None:
            return False
        return self.fold(texts, packed)

    def fold(self, texts: Sequence[str], packed: bool = False) -> ParsedPage | None:
        """The page these values make; None when they need the line-by-line reader (NaN, not a number).

        ``packed``: histograms as :class:`PackedHistogram` (see :class:`PageReader`).
        """
        try:
            vals = list(map(float, texts))  # reads "+Inf", "-Inf" and "NaN" as the format spells them
        except ValueError:
            return None
        return self.fold_numbers(vals, packed)

    def fold_numbers(self, vals: list[float], packed: bool = False) -> ParsedPage | None:
        """:meth:`fold` of the values already read as numbers."""
        check = sum(vals)
        if check != check:
            return None  # a NaN (or +Inf and -Inf): _Folder skips NaN samples, this fold does not
        # ParsedPage.plain: one pass of C over the page's numbers and its histograms' runs, where the
        # vetting would look at each kept value and each bucket (~25 us of a 352-line page)
        plain = self.runs is not None and _plain_numbers(vals, self.runs, _PLAIN_MAX)
        values = dict(zip(self.single_names, self.single_at(vals), strict=True))
        for name, how, slots in self.multi:
            if how == "max":
                values[name] = max(vals[i] for i in slots)
            else:
                t = _total(vals, slots)
                values[name] = t / len(slots) if how == "mean" else t
        if packed:
            arr = packed_values(vals)
            hists: dict[str, HistogramView] = {h.family: h.packed(arr, vals) for h in self.hists}
        else:
            hists = {h.family: h.histogram(vals) for h in self.hists}
        return ParsedPage(values, hists, series=self.series, plain=plain)


#: which value names and histogram families a reader keeps (None: all of that kind)
_Keep = tuple[frozenset[str] | None, frozenset[str] | None]


def _kept(page: ParsedPage, keep: _Keep) -> ParsedPage:
    """``page`` with only the kept values and histograms (and their NaN marks and timestamps).

    The page's series and duplicates stay whole: they describe the page's shape, and the layout
    path reports the whole page's too.
    """
    kv, kh = keep
    values = page.values if kv is None else {k: v for k, v in page.values.items() if k in kv}
    hists = page.histograms if kh is None else {k: h for k, h in page.histograms.items() if k in kh}
    if not (page.nan or page.stamped_s):
        return ParsedPage(values, hists, series=page.series, duplicates=page.duplicates)

    def wanted(name: str) -> bool:  # a NaN mark or a timestamp names a value or a histogram family
        return kv is None or kh is None or name in kv or name in kh

    return ParsedPage(
        values,
        hists,
        frozenset(n for n in page.nan if wanted(n)),
        {n: t for n, t in page.stamped_s.items() if wanted(n)},
        {n: t for n, t in page.stamped_newest_s.items() if wanted(n)},
        page.series,
        page.duplicates,
    )


def _layout_of(text: str, select: tuple[str, str] | None, keep: _Keep = (None, None)) -> _Layout | None:
    """Learn the layout of ``text`` (None: a page outside what :class:`_Layout` can match).

    The fast reader reads a copy of the page whose k-th value is replaced by the
    marker ``k + 0.5``; what it reports tells which slot feeds which output. Only the values
    and histograms of ``keep`` are folded (every value is still read and checked).
    """
    lines = text.split("\n")
    # Lines as the fast reader sees them (str.splitlines also breaks at \r, \x1c, ...).
    if text.splitlines() != (lines[:-1] if text.endswith("\n") else lines) or not text:
        return None
    fixed_idx: list[int] = []
    sample_idx: list[int] = []
    heads: list[str] = []
    marked = list(lines)
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped[0] == "#":
            fixed_idx.append(i)
            continue
        m = _SAMPLE.fullmatch(line)
        if m is None or m.end(3) != len(line):
            return None  # a timestamp, trailing blanks, or text the fast reader does not take
        head = line[: m.start(3)]
        marked[i] = f"{head}{len(heads)}.5"
        heads.append(head)
        sample_idx.append(i)
    rec = _SlotRecorder(len(heads))
    try:
        _fast("\n".join(marked), select, rec)
    except _Unrecognised:
        return None
    series, dups = _page_shape(rec.labelsets)
    if dups:
        return None  # read line by line each time, so every page of it reports its duplicates
    keep_values, keep_hists = keep
    kept = (
        rec.values.items() if keep_values is None else [i for i in rec.values.items() if i[0] in keep_values]
    )
    singles = [(name, slots[0]) for name, slots in kept if len(slots) == 1]
    multi = tuple((name, aggregation_of(name), tuple(slots)) for name, slots in kept if len(slots) > 1)
    hists: list[_HistPlan] = []
    for family, by_bound in rec.buckets.items():
        if keep_hists is not None and family not in keep_hists:
            continue
        counts = rec.counts.get(family)
        inf_from_count = math.inf not in by_bound
        if inf_from_count and counts is None:
            continue  # build_histogram: nothing anchors the tail, no histogram
        bounds = sorted(by_bound)
        buckets = tuple(tuple(by_bound[b]) for b in bounds)
        one_each = _pick([s[0] for s in buckets]) if all(len(s) == 1 for s in buckets) else None
        sum_slots = tuple(rec.sums.get(family, ()))
        run = None
        if one_each is not None and not inf_from_count and len(sum_slots) == 1 and counts is not None:
            firsts = [s[0] for s in buckets]
            if len(counts) == 1 and firsts == list(range(firsts[0], firsts[0] + len(firsts))):
                run = (firsts[0], firsts[0] + len(firsts), sum_slots[0], counts[0])
        hists.append(
            _HistPlan(
                family,
                (*bounds, math.inf) if inf_from_count else tuple(bounds),
                buckets,
                one_each,
                sum_slots,
                None if counts is None else tuple(counts),
                inf_from_count,
                run,
            )
        )
    prefixes = list(lines)
    sample_set = set(sample_idx)
    for i, head in zip(sample_idx, heads, strict=True):
        prefixes[i] = head
    return _Layout(
        n_lines=len(lines),
        prefixes=tuple(prefixes),
        kinds=bytes(1 if i in sample_set else 0 for i in range(len(lines))),
        fixed_at=_pick(fixed_idx),
        nothing_left=("",) * len(fixed_idx),
        values_at=_pick(sample_idx),
        other_chars=len(lines) - 1 + sum(map(len, prefixes)),
        single_names=tuple(name for name, _ in singles),
        single_at=_pick([slot for _, slot in singles]),
        multi=multi,
        hists=tuple(hists),
        series=series,
        runs=tuple((h.run[0], h.run[1]) for h in hists if h.run is not None)
        if all(h.run is not None for h in hists)
        else None,
    )


#: the C scan of a page through its layout (metrics/_scan.c), None without it (see _Layout.read)
_scan = native("llmscale.metrics._scan")
_layout_numbers: Callable[[str, tuple[str, ...], bytes], list[float] | None] | None = (
    None if _scan is None else _scan.layout_numbers
)
#: ParsedPage.plain's bound: a count past 2**53 cannot count one more in a float
_PLAIN_MAX = float(2**53)


def plain_numbers(vals: list[float], runs: tuple[tuple[int, int], ...], most: float) -> bool:
    """Whether every value is within [0, ``most``] and ``vals[first:end]`` never falls for every
    ``(first, end)`` of ``runs`` (a NaN fails both); the C scan's ``plain_numbers`` in Python."""
    return all(0.0 <= v <= most for v in vals) and all(
        all(map(le, vals[a : b - 1], vals[a + 1 : b])) for a, b in runs
    )


def packed_values(vals: list[float]) -> array[float]:
    """``array('d', vals)``: from the C scan's bytes of doubles when it is built (one copy)."""
    if _scan is None:
        return array("d", vals)
    arr = array("d")
    arr.frombytes(_scan.doubles(vals))
    return arr


_plain_numbers: Callable[[list[float], tuple[tuple[int, int], ...], float], bool] = (
    plain_numbers if _scan is None else _scan.plain_numbers
)

#: After a page whose layout cannot be learnt, this many pages of the same source are read line by
#: line before trying again (an exporter stamping every sample with a timestamp never has a layout;
#: trying on each page would read it twice).
_RETRY_AFTER = 4
#: page shapes a reader offers to new sources (a fleet of one deployment has one per engine
#: version; a DCGM node page read per pod has one per pod)
_SHARED_LAYOUTS = 4096
#: a sample line's value (and a comment's last word): what the skeleton of a page leaves out
_VALUE_ENDS = re.compile(r" [^ \n]*$", re.MULTILINE)


@dataclass(slots=True)
class _Source:
    layout: _Layout | None = None
    skip: int = 0  # pages left to read line by line before trying to learn a layout again


class PageReader:
    """:func:`parse_exposition` for pages that come again and again from the same sources.

    An exporter writes the same lines on every scrape; only the values change.
    The reader learns each source's layout from one page, then reads the next
    pages of that source by checking the layout (a few whole-list operations,
    no Python per line) and folding the values as learnt. Any difference in
    layout — a new series, a changed label, a comment, a timestamp — or a value
    the fold does not take (NaN, not a number) sends that page through
    :func:`parse_exposition`, which also raises :class:`ExpositionError` for
    malformed text: the result is always what :func:`parse_exposition` returns
    (tests/metrics/test_metrics_page_reader.py). A new source whose page has the shape of one
    already learnt reads it through that layout (one layout for a fleet of one deployment,
    see :meth:`_shared_read`). A page that breaks the layout
    without a new one to learn (malformed text) leaves the old layout in place.

    On the emulator's 352-line vLLM pages, ~13x less CPU than :func:`parse_exposition` with the C
    scan (``metrics/_scan.c``), ~6x without it (benchmarks/controller_tick.py prints both).
    Not thread-safe; one reader per scraper.

    ``keep_values`` / ``keep_histograms`` (None: all) name what the pages' results hold: a
    scraper keeps what llmscale reads (``metrics/vetting.py``'s READ_VALUES, READ_HISTOGRAMS),
    since a controller's window holds 20 observations of every replica: of the emulator's page's
    280 folded numbers (22 values, 13 histograms) the result keeps 164 (17 values, 7 histograms;
    ``tests/metrics/test_page_reader_keep.py``).
    Every line is still read and checked, so a malformed page fails as before; the result is
    :func:`parse_exposition`'s with the other names left out (NaN marks and timestamps included).

    ``packed=True``: a page read through a layout gives its histograms as
    :class:`PackedHistogram` (the same numbers, counts in an ``array('d')``, bounds the
    layout's): what a scraper's window keeps, without building the tuple of floats first.
    A page read line by line still gives :class:`~llmscale.types.Histogram` values.
    """

    def __init__(
        self,
        *,
        keep_values: Collection[str] | None = None,
        keep_histograms: Collection[str] | None = None,
        packed: bool = False,
    ) -> None:
        self._packed = packed
        self._keep: _Keep = (
            None if keep_values is None else frozenset(keep_values),
            None if keep_histograms is None else frozenset(keep_histograms),
        )
        self._sources: dict[tuple[Hashable, tuple[str, str] | None], _Source] = {}
        #: (``select``, the page skeleton's hash) -> a layout learnt from such a page (:meth:`_shared_read`)
        self._shared: dict[tuple[tuple[str, str] | None, int], _Layout] = {}
        #: pages read through a layout learnt from an earlier page of their source, and pages read
        #: line by line (the first of a source, a changed layout, NaN values, malformed text)
        self.layout_reads = 0
        self.line_reads = 0

    def parse(
        self, text: str, *, key: Hashable, select: tuple[str, str] | None = None, source: str | None = None
    ) -> ParsedPage:
        """:func:`parse_exposition` of ``text``; ``key`` names where it came from (e.g. the URL)."""
        slot = (key, select)
        src = self._sources.get(slot)
        if src is None:
            src = self._sources[slot] = _Source()
        if src.layout is not None:
            page = src.layout.read(text, self._packed)
            if page is not False:
                if page is None:  # NaN or not a number: the layout stays, the values need the line reader
                    return self._by_line(text, select, source)
                self.layout_reads += 1
                return page
        skeleton = None
        if src.layout is None:
            skeleton = (select, hash(_VALUE_ENDS.sub("", text)))
            shared = self._shared_read(src, text, skeleton)
            if shared is not None:
                return shared
        if src.skip > 0:
            src.skip -= 1
            return self._by_line(text, select, source)
        learnt = _layout_of(text, select, self._keep)
        if learnt is None:
            src.skip = _RETRY_AFTER
            return self._by_line(text, select, source)
        src.layout = learnt
        if skeleton is not None:
            if len(self._shared) >= _SHARED_LAYOUTS:
                self._shared.clear()  # a fleet of that many page shapes: start the offers afresh
            self._shared[skeleton] = learnt
        page = learnt.read(text, self._packed)
        if page is None or page is False:
            return self._by_line(text, select, source)
        self.line_reads += 1  # learning read it line by line (the marked copy)
        return page

    def _shared_read(
        self, src: _Source, text: str, skeleton: tuple[tuple[str, str] | None, int]
    ) -> ParsedPage | None:
        """``text``, the first page of ``src``, read through a layout another source with a page of the
        same skeleton taught (which ``src`` then keeps); None when there is none or it does not fit.

        The replicas of one deployment write the same page but for its values, so one layout
        reads them all: a controller starting over 5,000 replicas learns each page shape once
        instead of 5,000 times (learning costs ~17x a read through a layout; the first tick of
        ``benchmarks/controller_tick.py --replicas 5000`` took 80 s on the loaded 2-core VM),
        and their sources share that layout (the emulator's page's holds ~350 line heads,
        ~70 KB: 350 MB for 5,000 replicas each with its own). The skeleton (the page without the
        value ending each line) only finds the candidate: the layout is used when it reads the
        page exactly as :func:`parse_exposition` would (:meth:`_Layout.value_texts`), whichever
        source taught it.
        """
        layout = self._shared.get(skeleton)
        if layout is None:
            return None
        page = layout.read(text, self._packed)
        if page is None or page is False:
            return None  # not this shape after all, or a NaN: learn (or read by line) as before
        src.layout = layout
        self.layout_reads += 1
        return page

    def _by_line(self, text: str, select: tuple[str, str] | None, source: str | None) -> ParsedPage:
        self.line_reads += 1
        page = parse_exposition(text, select=select, source=source)
        return page if self._keep == (None, None) else _kept(page, self._keep)

    def retain(self, keys: Collection[Hashable]) -> None:
        """Forget the layouts of sources not in ``keys`` (targets gone), so memory follows the fleet."""
        for slot in [s for s in self._sources if s[0] not in keys]:
            del self._sources[slot]
        # offers only of layouts a source still reads with (a DCGM page is read per pod: gone
        # pods' shapes go with them)
        used = {id(src.layout) for src in self._sources.values()}
        self._shared = {k: lay for k, lay in self._shared.items() if id(lay) in used}

    def __len__(self) -> int:
        return len(self._sources)


def parse_exposition(
    text: str, *, select: tuple[str, str] | None = None, source: str | None = None
) -> ParsedPage:
    """Fold one exposition page into values and histograms.

    ``select = (label, value)`` keeps only the series whose ``label`` equals
    ``value`` — when the page carries that label at all. A node's DCGM exporter
    labels each GPU with the ``pod`` using it, so ``("pod", "vllm-0")`` reads
    that pod's GPUs; a page without ``pod`` labels is the replica's own and is
    read whole.

    Raises :class:`ExpositionError` (with the 1-based line) on malformed text.
    """
    folder = _Folder()
    try:
        _fast(text, select, folder)
    except _Unrecognised:
        return parse_exposition_reference(text, select=select, source=source)
    return folder.page()
