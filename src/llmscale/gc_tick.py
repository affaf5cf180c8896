"""The cyclic garbage collector between ticks: the window is frozen, not walked every tick.

A live controller's window holds ``WINDOW_LEN`` (20) observations of every replica: at 5,000
replicas about a million tracked objects (samples, their value and histogram dicts, packed
histograms, replica series). CPython's collector walks all of them in each full collection, and
a tick adds enough survivors (one more observation) to start one every tick or two, all of it
spent finding nothing (a steady-state tick leaves no reference cycle:
``tests/controller/test_gc_tick.py``). Measured on 1,500 replicas' emulator pages (scrape
samples, observe, ``slo``'s decide; four ticks past a full window, runs interleaved, loaded
2-core VM): without freezing, the collector took 0.48-0.57 CPU-s every other tick and 0.12-0.17
between; frozen, 0.18-0.21 every tick, no spikes. ``benchmarks/controller_tick.py`` prints the
collector's share of a tick, and ``--plain-gc`` runs it without freezing.

:class:`TickCollector` freezes what is alive after each tick (``gc.freeze``: those objects are
left out of later collections; refcounting still frees them when the window drops them), so a
collection walks at most one tick's new objects. Every ``full_every_ticks`` ticks it unfreezes
and runs one full collection, which bounds what a reference cycle that is garbage and frozen
(an error path's traceback, say) can hold to that many ticks. Freezing and unfreezing move
lists, whatever their length; the full collection is the one cost that grows with the fleet,
paid once in ``full_every_ticks`` ticks.

During a tick (:meth:`TickCollector.before_tick` to :meth:`TickCollector.after_tick`) the
collector's first generation waits for :data:`TICK_GEN0_THRESHOLD` new objects instead of
Python's 700 (``gc.set_threshold``). A tick of 5,000 replicas allocates a few hundred thousand
objects that outlive it, and at 700 their young collections, each passing its survivors on to
older generations, added up to about two collections of everything the tick kept: 0.17 s of a
2.6 s tick (``benchmarks/controller_tick.py`` prints the collector's share). Since a steady tick
makes no reference cycle, those walks found nothing; the tick's objects are frozen at its end
without being walked, and the full collection every ``full_every_ticks`` ticks still finds any
cycle a tick did make. The raised threshold is a bound, not an off switch: a tick that allocates
without end (a wedged one, or one past its deadline) is still collected every million objects.

Only a long-running loop that owns its process should use it (the live loop, a scrape worker):
``gc.freeze`` acts on the whole process.
"""

from __future__ import annotations

import gc

__all__ = ["FULL_COLLECTION_EVERY_TICKS", "TICK_GEN0_THRESHOLD", "TickCollector"]

#: ticks between full collections (one window's worth at the default WINDOW_LEN)
FULL_COLLECTION_EVERY_TICKS = 20
#: new objects (allocations less deallocations) before a young collection during a tick
TICK_GEN0_THRESHOLD = 1_000_000


class TickCollector:
    """Call :meth:`before_tick` and :meth:`after_tick` around each tick, :meth:`close` when the loop ends."""

    def __init__(self, full_every_ticks: int = FULL_COLLECTION_EVERY_TICKS) -> None:
        if full_every_ticks < 1:
            raise ValueError(f"full_every_ticks = {full_every_ticks}, must be >= 1")
        self.full_every_ticks = full_every_ticks
        self.ticks = 0
        #: full collections this collector ran (one per ``full_every_ticks`` ticks)
        self.full_collections = 0
        #: the thresholds to restore after a tick (None: between ticks)
        self._between: tuple[int, int, int] | None = None

    def before_tick(self) -> None:
        """Raise the first generation's threshold for the tick (see the module docstring)."""
        if self._between is None:
            self._between = gc.get_threshold()
            _, older, oldest = self._between
            gc.set_threshold(TICK_GEN0_THRESHOLD, older, oldest)

    def _restore(self) -> None:
        if self._between is not None:
            gc.set_threshold(*self._between)
            self._between = None

    def after_tick(self) -> None:
        """Freeze what the tick left alive; every ``full_every_ticks`` ticks, collect everything first.
        The thresholds are Python's again until the next :meth:`before_tick`."""
        self._restore()
        self.ticks += 1
        if self.ticks % self.full_every_ticks == 0:
            gc.unfreeze()
            gc.collect()
            self.full_collections += 1
        gc.freeze()

    def close(self) -> None:
        """Give every frozen object back to the collector (the loop is over)."""
        self._restore()
        gc.unfreeze()
