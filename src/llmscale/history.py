"""Same-hour history of the request rate: the mean rate of each hour of the past days.

Seed 003 4.3 sizes the safe eviction window from "the standard deviation of the request rate at
the same hour of the past 7 days" (one point a day, ``history_qps[hour_of_day::24][:7]``), not
from the spread inside the current window. :class:`RateHistory` keeps exactly what that needs:
the mean rate of every hour bin of the last ``days_kept`` periods (days), fed by the controller's
observations (:func:`llmscale.controller.core.decide`) or seeded from a trace
(:func:`history_from_arrivals`). Memory is bounded: ``days_kept x bins_per_period`` closed cells
plus the open one (14 days x 24 hours = 336 cells of three numbers), whatever the run's length.

A "period" is a day by default (86,400 s, 24 one-hour bins). Both are parameters so a test or a
demo can compress a day (``period_s=2400``: 24 bins of 100 s) and still run in seconds;
:func:`same_hour_rates` then reads "the same bin of the past periods". Hour-of-week statistics
are the same cells read every 7th period (:meth:`RateHistory.same_hour_of_week`).

Pure values: ``observe`` returns a new history and never mutates, so the controller's state stays
a frozen value (STYLE 3). Time is Unix seconds (the controller adds its clock epoch).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

import numpy as np

from llmscale.errors import ConfigError

__all__ = [
    "DAY_S",
    "EMPTY_HISTORY",
    "HISTORY_DAYS",
    "MIN_HISTORY_DAYS",
    "HistoryCell",
    "RateHistory",
    "history_before",
    "history_from_arrivals",
]

DAY_S: Final = 86_400.0
#: seed 003 4.3: "the same hour of the past 7 days"
HISTORY_DAYS: Final = 7
#: fewest past days whose same hour gives a spread (one point has no standard deviation)
MIN_HISTORY_DAYS: Final = 2


@dataclass(frozen=True, slots=True)
class HistoryCell:
    """The mean request rate over one bin of one period (an hour of a day), from ``samples``."""

    #: bin index since the Unix epoch: floor(unix_s / bin_s)
    index: int
    samples: int
    mean_rps: float


@dataclass(frozen=True, slots=True)
class RateHistory:
    """Mean request rate per hour of the last ``days_kept`` days (see the module docstring)."""

    period_s: float = DAY_S
    bins_per_period: int = 24
    #: periods of closed cells kept: 14 covers the same hour of the past 7 days and of the same
    #: weekday a week ago
    days_kept: int = 14
    #: closed cells, oldest first, at most ``days_kept x bins_per_period`` of them
    cells: tuple[HistoryCell, ...] = ()
    #: the bin being filled now (None before the first observation)
    open_cell: HistoryCell | None = None

    def __post_init__(self) -> None:
        if not (self.period_s > 0 and math.isfinite(self.period_s)):
            raise ConfigError(f"history period_s = {self.period_s}, must be > 0 and finite")
        if self.bins_per_period < 1:
            raise ConfigError(f"history bins_per_period = {self.bins_per_period}, must be >= 1")
        if self.days_kept < 1:
            raise ConfigError(f"history days_kept = {self.days_kept}, must be >= 1")

    @property
    def bin_s(self) -> float:
        """Seconds of one bin (3,600 for an hour of a day)."""
        return self.period_s / self.bins_per_period

    @property
    def max_cells(self) -> int:
        return self.days_kept * self.bins_per_period

    def bin_index(self, unix_s: float) -> int:
        return math.floor(unix_s / self.bin_s)

    def observe(self, unix_s: float, rate_rps: float | None) -> RateHistory:
        """This history with one more rate sample at ``unix_s`` (None or NaN: unchanged).

        Samples are averaged per bin; a sample in a later bin closes the open one. A sample older
        than the open bin (a clock stepping back) is dropped, not filed into a closed cell.
        """
        if rate_rps is None or not math.isfinite(rate_rps) or rate_rps < 0.0:
            return self
        index = self.bin_index(unix_s)
        cell = self.open_cell
        if cell is not None and index == cell.index:
            n = cell.samples + 1
            mean = cell.mean_rps + (rate_rps - cell.mean_rps) / n
            return replace(self, open_cell=HistoryCell(index, n, mean))
        if cell is not None and index < cell.index:
            return self
        cells = self.cells if cell is None else (*self.cells, cell)
        # Bounded: drop cells older than days_kept periods before the new bin.
        oldest = index - self.max_cells
        if cells and cells[0].index < oldest:
            cells = tuple(c for c in cells if c.index >= oldest)
        return replace(self, cells=cells, open_cell=HistoryCell(index, 1, float(rate_rps)))

    def with_cells(self, cells: Sequence[HistoryCell]) -> RateHistory:
        """This history with ``cells`` (any order) added as closed cells, trimmed to the bound."""
        merged = {c.index: c for c in self.cells}
        for c in cells:
            merged[c.index] = c
        ordered = tuple(merged[i] for i in sorted(merged))[-self.max_cells :]
        return replace(self, cells=ordered)

    def _closed(self, index: int) -> HistoryCell | None:
        # cells are few (<= 336) and sorted: a bisect is not worth its code here
        for c in reversed(self.cells):
            if c.index == index:
                return c
            if c.index < index:
                return None
        return None

    def rate_on_day(self, unix_s: float, days_ago: int) -> float | None:
        """The rate at the same time of day ``days_ago`` periods back, read between bin centres.

        A bin's mean is taken as the rate at its middle and the rate between two middles is
        linear, so a forecast a few minutes ahead sees the slope of the hour it is in, not a step
        at the hour's edge. Worked: 40 req/s over 08:00-09:00 and 100 over 09:00-10:00 yesterday
        read 40 at 08:30, 70 at 09:00 and 85 at 09:15. None when the bin itself was not filed;
        a missing neighbour leaves the bin's own mean.
        """
        at = unix_s - days_ago * self.period_s
        index = self.bin_index(at)
        cell = self._closed(index)
        if cell is None:
            return None
        offset = at / self.bin_s - index - 0.5  # bins from this bin's middle, in [-0.5, 0.5)
        other = self._closed(index + (1 if offset >= 0.0 else -1))
        if other is None:
            return cell.mean_rps
        w = abs(offset)
        return (1.0 - w) * cell.mean_rps + w * other.mean_rps

    def same_hour(self, unix_s: float, days: int = HISTORY_DAYS) -> tuple[float, ...]:
        """Mean rates of the same bin on each of the past ``days`` periods that has one, newest first.

        Today's bin is not one of them: at 14:20 on day D it is 14:00-15:00 of D-1, D-2, ...
        """
        index = self.bin_index(unix_s)
        out = []
        for k in range(1, days + 1):
            c = self._closed(index - k * self.bins_per_period)
            if c is not None:
                out.append(c.mean_rps)
        return tuple(out)

    def same_hour_of_week(self, unix_s: float, weeks: int = 1) -> tuple[float, ...]:
        """Mean rates of the same bin 7, 14, ... periods ago (what is kept of them), newest first."""
        index = self.bin_index(unix_s)
        out = []
        for k in range(1, weeks + 1):
            c = self._closed(index - 7 * k * self.bins_per_period)
            if c is not None:
                out.append(c.mean_rps)
        return tuple(out)

    def same_hour_std_rps(self, unix_s: float, days: int = HISTORY_DAYS) -> float | None:
        """Seed 003 4.3's ``std_qps``: population std of :meth:`same_hour` (None below 2 days).

        E.g. 60, 70, 80, 60, 70 req/s at 14:00 of the past five days: std 7.48 req/s.
        """
        rates = self.same_hour(unix_s, days)
        if len(rates) < MIN_HISTORY_DAYS:
            return None
        return float(np.std(np.asarray(rates, dtype=np.float64)))

    @property
    def num_cells(self) -> int:
        return len(self.cells) + (self.open_cell is not None)


#: a day of 24 hour bins, 14 days kept, nothing observed yet
EMPTY_HISTORY: Final = RateHistory()


def history_from_arrivals(
    arrival_s: np.ndarray,
    start_unix_s: float,
    *,
    period_s: float = DAY_S,
    bins_per_period: int = 24,
    days_kept: int = 14,
) -> RateHistory:
    """A history seeded from a trace: arrivals (seconds from ``start_unix_s``) counted per bin.

    Each whole bin the trace covers becomes a cell of mean rate count / bin_s; partial bins at
    either end are left out (a trace starting at 14:40 says nothing reliable about 14:00-15:00).
    Put the trace before the run (``start_unix_s`` = the run's start minus the trace's span) so
    that it is the past the run's first days look back on.
    """
    empty = RateHistory(period_s, bins_per_period, days_kept)
    a = np.asarray(arrival_s, dtype=np.float64)
    if a.size == 0:
        return empty
    bin_s = empty.bin_s
    t = start_unix_s + a
    first = math.ceil(start_unix_s / bin_s)  # first whole bin at or after the trace's start
    last = math.floor((start_unix_s + float(a.max())) / bin_s)  # first bin not wholly covered
    if last <= first:
        return empty
    idx = np.floor(t / bin_s).astype(np.int64)
    keep = (idx >= first) & (idx < last)
    counts = np.bincount(idx[keep] - first, minlength=last - first)
    cells = [HistoryCell(first + i, int(n), float(n) / bin_s) for i, n in enumerate(counts.tolist())]
    return empty.with_cells(cells)


def history_before(
    arrival_s: np.ndarray,
    run_start_unix_s: float,
    *,
    period_s: float = DAY_S,
    bins_per_period: int = 24,
    days_kept: int = 14,
) -> RateHistory:
    """A history seeded from a trace of the days *before* a run that starts at ``run_start_unix_s``.

    The trace (arrivals in seconds from its own start) is moved back by whole periods, as many as
    it spans, so that its hours keep their hour of day: a 3-day trace whose t = 0 is midnight
    seeds the three days before a run starting at midnight. E.g. ``--history-from`` a week of the
    same service's traffic, then backtest the next day.
    """
    a = np.asarray(arrival_s, dtype=np.float64)
    span_s = float(a.max()) if a.size else 0.0
    shift_s = max(1, math.ceil(span_s / period_s)) * period_s
    return history_from_arrivals(
        a, run_start_unix_s - shift_s, period_s=period_s, bins_per_period=bins_per_period, days_kept=days_kept
    )
