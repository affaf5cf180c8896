"""``Observation.undated_replicas``: the pod scrape names the pages it cannot date.

A page carries no time of its own (exporters rarely stamp), and a cache or a sidecar exporter
that starts cold answers its first request with the copy it kept, refreshing behind it. So the
first page accepted from a target, and the same bytes again after it, are *undated*; the first
page that differs was rendered after the controller first asked, and it and every page after it
are dated (``signals/rates.py`` starts a counter rate there). Real HTTP pages, in one process and
through a scrape worker.
"""

from __future__ import annotations

import pytest
from metrics_pages import vllm_page

from llmscale.clock import ManualClock
from llmscale.metrics.scrape import PodScrapeSource, ScrapeTarget

WALL0 = 1_700_000_000.0


def _page(done: float) -> str:
    return vllm_page(
        waiting=1.0,
        running=3.0,
        kv=0.2,
        ttft_cumulative=(done * 0.2, done * 0.6, done * 0.9, done),
        ttft_sum=done * 0.4,
    )


REFUSED = vllm_page(waiting=-3.0, running=1.0, kv=0.1, ttft_cumulative=(1, 2, 3, 4), ttft_sum=1.0)

#: per target, its page at ticks 0, 1, 2, 3
PAGES = {
    "busy": [_page(100), _page(110), _page(120), _page(130)],
    "cached-twice": [_page(50), _page(50), _page(130), _page(140)],
    "refused-first": [REFUSED, _page(100), _page(110), _page(120)],
    "idle": [_page(100)] * 4,
    "unchanged-later": [_page(100), _page(110), _page(110), _page(110)],
}
#: the replicas undated at ticks 0, 1, 2, 3
UNDATED = [
    {"busy", "cached-twice", "idle", "unchanged-later"},
    {"cached-twice", "refused-first", "idle"},
    {"idle"},
    {"idle"},
]


@pytest.mark.parametrize("workers", [pytest.param(0, id="in-process"), pytest.param(1, id="one-worker")])
def test_first_pages_and_their_copies_are_undated(page_server, workers: int) -> None:
    targets = [ScrapeTarget(name, page_server.url(f"/{name}")) for name in PAGES]
    with PodScrapeSource(targets, timeout_s=3.0, wall_clock=ManualClock(WALL0), workers=workers) as source:
        for k, want in enumerate(UNDATED):
            for name, pages in PAGES.items():
                page_server.set(f"/{name}", pages[k])
            obs = source.observe(2.0 * k)
            ok = {s.replica for s in obs.replicas if s.ok}
            assert ok == set(PAGES) - ({"refused-first"} if k == 0 else set()), source.last_errors
            assert obs.undated_replicas == want, k
