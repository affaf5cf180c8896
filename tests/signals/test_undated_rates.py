"""A counter rate never starts from a page that cannot be dated (``Observation.undated_replicas``).

Four replicas each finishing 10 req/s (the fleet's truth: 40), scraped every 0.5 s. The pod scrape
marks the first page accepted from each target, and the same bytes again, as undated
(``tests/metrics/test_undated_pages.py``). Each case is read twice: as the scrape hands it over,
and with the marks stripped (the rates before they were read).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from signals_fixtures import hist, obs, sample

from llmscale.metrics.names import VLLM
from llmscale.signals.rates import counter_rates, step_rates
from llmscale.signals.window import FleetWindow
from llmscale.types import Observation

TICK_S = 0.5
RATE_RPS = 10.0  # per replica
NAMES = "abcd"


def _page(name: str, done: float):
    return sample(name, {VLLM.generation_tokens: 100.0 * done}, {VLLM.e2e: hist((0, done, done, done))})


def _fleet(ticks: int, done_at, undated_at) -> list[Observation]:
    """``done_at(name, k)``: a replica's finished requests on its page at tick ``k``;
    ``undated_at(k)``: the replicas whose page the scrape could not date at tick ``k``."""
    return [
        replace(obs(TICK_S * k, *(_page(n, done_at(n, k)) for n in NAMES)), undated_replicas=undated_at(k))
        for k in range(ticks)
    ]


def _fresh(n: str, k: int) -> float:
    return 1000.0 + RATE_RPS * TICK_S * k


def _old_copy_first(n: str, k: int) -> float:
    # a cold cache's copy from 4 s before the first scrape, then fresh pages
    return 1000.0 + RATE_RPS * (TICK_S * k - (4.0 if k == 0 else 0.0))


def _a_cached_twice(n: str, k: int) -> float:
    return _old_copy_first(n, 0) if n == "a" and k <= 1 else _fresh(n, k)


FIRST = frozenset(NAMES)

CASES = [
    # (done_at, undated_at, rates read without the marks at ticks 1..3, rates read with them)
    pytest.param(
        _old_copy_first,
        lambda k: FIRST if k == 0 else frozenset(),
        # 10 x (0.5 + 4) / 0.5 = 90 req/s a replica at tick 1, still 50 at tick 2
        [360.0, 200.0, 440.0 / 3.0],
        [None, 40.0, 40.0],
        id="every-first-page-an-old-copy",
    ),
    pytest.param(
        _fresh,
        lambda k: FIRST if k == 0 else frozenset(),
        [40.0, 40.0, 40.0],
        [None, 40.0, 40.0],  # an honest fleet's rate comes one tick later, and the same
        id="honest-first-pages",
    ),
    pytest.param(
        _a_cached_twice,
        lambda k: FIRST if k == 0 else frozenset("a") if k == 1 else frozenset(),
        # tick 1: "a" reads its two copies as no load (30); tick 2: (1.0 + 4) x 10 / 1.0 = 50 (80)
        [30.0, 80.0, 30.0 + 110.0 / 3.0],
        # tick 2: "a" has no dated span yet and counts at the mean of the others (10)
        [None, 40.0, 40.0],
        id="the-same-old-copy-twice",
    ),
    pytest.param(
        lambda n, k: 1000.0,
        lambda k: FIRST,  # an idle fleet: the same bytes all along
        [0.0, 0.0, 0.0],
        [None, 0.0, 0.0],
        id="idle-same-bytes",
    ),
]


@pytest.mark.parametrize(("done_at", "undated_at", "before", "after"), CASES)
def test_rates_start_from_the_first_dated_page(done_at, undated_at, before, after) -> None:
    window = _fleet(4, done_at, undated_at)
    stripped = [replace(o, undated_replicas=frozenset()) for o in window]
    got_before = [counter_rates(FleetWindow.build(stripped[: k + 1])).request_rps for k in (1, 2, 3)]
    got_after = [counter_rates(FleetWindow.build(window[: k + 1])).request_rps for k in (1, 2, 3)]
    assert got_before == pytest.approx(before)
    assert got_after == pytest.approx(after)


def test_a_surge_as_the_controller_starts_is_read_one_tick_later_at_most() -> None:
    """Honest replicas already at 4x their rate (a surge at start-up): the first rate read is the
    surge's, one tick after the tick that read it without the marks, and equal from then on."""
    window = _fleet(
        5, lambda n, k: 1000.0 + 4 * RATE_RPS * TICK_S * k, lambda k: FIRST if k == 0 else frozenset()
    )
    stripped = [replace(o, undated_replicas=frozenset()) for o in window]
    plain = [counter_rates(FleetWindow.build(stripped[: k + 1])).request_rps for k in range(5)]
    marked = [counter_rates(FleetWindow.build(window[: k + 1])).request_rps for k in range(5)]
    assert plain == [None, 160.0, 160.0, 160.0, 160.0]
    assert marked == [None, None, 160.0, 160.0, 160.0]


def test_a_step_from_an_undated_page_is_no_step_rate() -> None:
    """The per-step rates leave a replica's step out when its earlier end is undated (as for a
    failed scrape), on both paths: the per-replica walk and the carried per-step totals."""
    window = _fleet(4, _old_copy_first, lambda k: FIRST if k == 0 else frozenset())
    walked = step_rates(FleetWindow.build(window))
    carried = None
    for k in range(len(window)):
        carried = FleetWindow.build(window[: k + 1], previous=carried)
    assert carried is not None and carried.carried
    by_steps = step_rates(carried)
    # the first step (every replica undated at its start) has no rate; the others read 40
    assert walked.requests_rps == by_steps.requests_rps == [40.0, 40.0]
    assert walked.generation_tps == by_steps.generation_tps == [4000.0, 4000.0]
