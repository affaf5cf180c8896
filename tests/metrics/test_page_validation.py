"""Issue 19: a replica's page is judged as a whole before any of it is load.

Each fault below was found from outside (an `emulate` replica behind a corrupting proxy) taking
the `slo` policy to its maximum within seconds, or the controller past its memory limit. Here
each is served by a real HTTP server and scraped by PodScrapeSource; the replica must come back
*unknown* (``ok=False``, held by the guards) with a reason naming the fault, while a sane page
next to it stays known, and the sane variant of each fault (a real restart, a torn scrape, a
clock a few seconds ahead, a small gzip page) is still read.
"""

from __future__ import annotations

import gzip
import zlib

import pytest

from llmscale.clock import ManualClock
from llmscale.metrics.names import VLLM
from llmscale.metrics.scrape import PodScrapeSource
from llmscale.types import Observation

LABELS = 'engine="0",model_name="llama-8b"'
WALL0 = 1_700_000_000.0


def page(
    done: float = 40.0,
    *,
    waiting: float = 2.0,
    buckets: tuple[float, float, float] | None = None,
    extra: str = "",
    stamp_ms: int | None = None,
) -> str:
    """One vLLM replica's page; ``buckets``: the E2E histogram's le=0.5, le=1, le=+Inf counts."""
    b = buckets or (done / 2, done * 0.9, done)
    st = "" if stamp_ms is None else f" {stamp_ms}"
    return (
        f"# TYPE {VLLM.running} gauge\n{VLLM.running}{{{LABELS}}} 3.0{st}\n"
        f"# TYPE {VLLM.waiting} gauge\n{VLLM.waiting}{{{LABELS}}} {waiting}{st}\n{extra}"
        f"# TYPE {VLLM.generation_tokens} counter\n{VLLM.generation_tokens}{{{LABELS}}} {done * 100}{st}\n"
        f"# TYPE {VLLM.e2e} histogram\n"
        f'{VLLM.e2e}_bucket{{{LABELS},le="0.5"}} {b[0]}{st}\n'
        f'{VLLM.e2e}_bucket{{{LABELS},le="1.0"}} {b[1]}{st}\n'
        f'{VLLM.e2e}_bucket{{{LABELS},le="+Inf"}} {b[2]}{st}\n'
        f"{VLLM.e2e}_count{{{LABELS}}} {b[2]}{st}\n"
        f"{VLLM.e2e}_sum{{{LABELS}}} {0.5 * done}{st}\n"
    )


@pytest.fixture(params=[0, 2], ids=["in-process", "2-workers"])
def scraper(request):
    """Sources scraping in this process, and through two scrape worker processes (each defence
    must hold in a worker as well: ``metrics/_shards.py``)."""
    made: list[PodScrapeSource] = []

    def make(*paths: str, server, **kw):
        kw.setdefault("wall_clock", ManualClock(WALL0))
        kw.setdefault("workers", request.param)
        s = PodScrapeSource([(p.strip("/"), server.url(p)) for p in paths], timeout_s=5.0, **kw)
        made.append(s)
        return s

    try:
        yield make
    finally:
        for s in made:
            s.close()


def _ok(obs: Observation) -> dict[str, bool]:
    return {s.replica: s.ok for s in obs.replicas}


def _one(page_server, scraper, bad: str, why: str, **kw) -> PodScrapeSource:
    page_server.set("/good", page())
    page_server.set("/bad", bad)
    src = scraper("/good", "/bad", server=page_server, **kw)
    obs = src.observe(0.0)
    assert _ok(obs) == {"good": True, "bad": False}, src.last_errors
    assert why in src.last_errors["bad"], src.last_errors
    return src


# ---- one page on its own -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        pytest.param(page(waiting=1e9), "implausible value(s): vllm:num_requests_waiting", id="queue-1e9"),
        pytest.param(page(waiting=1e12), "implausible value(s)", id="queue-1e12"),
        pytest.param(page(done=3e16), "implausible", id="counter-past-2**53"),
        pytest.param(page(buckets=(30.0, 10.0, 40.0)), "is not cumulative", id="buckets-fall"),
        pytest.param(
            page(extra=f"{VLLM.waiting}{{{LABELS}}} 2.0\n"),
            "duplicate series of vllm:num_requests_waiting",
            id="duplicated-queue-sample",
        ),
        pytest.param(
            page(extra=f'{VLLM.waiting}{{model_name="llama-8b",engine="0"}} 2.0\n'),
            "duplicate series",
            id="duplicate-with-labels-reordered",
        ),
        pytest.param(
            page(extra="".join(f'{VLLM.waiting}{{engine="{i}"}} 1.0\n' for i in range(1, 10_001))),
            "10001 series of vllm:num_requests_waiting",
            id="label-explosion-10k",
        ),
        pytest.param(
            page(stamp_ms=int((WALL0 + 3600) * 1000)), "stamped 3600 s in the future", id="stamped-1h-ahead"
        ),
    ],
)
def test_a_page_that_cannot_be_one_replicas_makes_it_unknown(page_server, scraper, bad, why) -> None:
    _one(page_server, scraper, bad, why)


@pytest.mark.parametrize(
    "sane",
    [
        pytest.param(page(buckets=(30.0, 29.0, 40.0)), id="torn-scrape-1-count"),
        pytest.param(page(stamp_ms=int((WALL0 + 5) * 1000)), id="clock-5s-ahead"),
        pytest.param(
            page(extra="".join(f'{VLLM.waiting}{{engine="{i}"}} 1.0\n' for i in range(1, 8))), id="8-engines"
        ),
        pytest.param(page(waiting=50_000.0), id="queue-50k"),
    ],
)
def test_the_sane_variant_of_each_fault_is_read(page_server, scraper, sane: str) -> None:
    page_server.set("/a", sane)
    src = scraper("/a", server=page_server)
    assert _ok(src.observe(0.0)) == {"a": True}, src.last_errors


# ---- counters across scrapes ---------------------------------------------------------------


def _scrape_series(page_server, scraper, dones: list[float], step_s: float = 2.0) -> list[bool]:
    src = scraper("/a", server=page_server)
    oks = []
    for k, done in enumerate(dones):
        page_server.set("/a", page(done))
        oks.append(_ok(src.observe(k * step_s))["a"])
    return oks


def test_counters_that_fall_steadily_make_the_replica_unknown(page_server, scraper) -> None:
    # 1,000 -> 990 -> 980 ...: each fall was read as a restart, a burst of "new" requests each tick.
    oks = _scrape_series(page_server, scraper, [1000.0, 990.0, 980.0, 970.0])
    assert oks == [True, False, False, False]


def test_a_restart_to_near_zero_is_read_and_a_second_within_a_minute_is_not(page_server, scraper) -> None:
    oks = _scrape_series(page_server, scraper, [1000.0, 1002.0, 1.0, 3.0, 5.0, 0.0, 2.0])
    # The restart at tick 2 is read (counts from 1.0); the one at tick 5, 6 s later, is not.
    assert oks == [True, True, True, True, True, False, True]


def test_two_processes_at_one_address_are_not_read_as_restarts(page_server, scraper) -> None:
    # A Service scraped as if it were one pod: its pages alternate between process A (1,000 and
    # growing) and process B (50 and growing). B's first page is read as A's restart (50 is near
    # 0 next to 1,000); A's next page, back above where it was before that "restart", is a
    # second process, not the restarted one, and so is every page after it within the minute.
    # Read as restarts, each climb back counted ~1,000 requests in a 2 s interval.
    oks = _scrape_series(page_server, scraper, [1000.0, 50.0, 1010.0, 52.0, 1020.0, 54.0, 1030.0])
    assert oks == [True, True, False, False, False, False, False]


@pytest.mark.parametrize(
    "other",
    [
        pytest.param("", id="empty"),
        pytest.param("# TYPE go_goroutines gauge\ngo_goroutines 12\n", id="other-metrics"),
    ],
)
def test_a_page_with_nothing_llmscale_reads_is_unknown_not_idle(page_server, scraper, other: str) -> None:
    # Read as known, an empty page at either end of a replica's span left its request count out
    # of the fleet's rate without counting it at the others' mean: a true 40 req/s read as 20.
    _one(page_server, scraper, other, "no series llmscale reads")


def test_an_old_page_served_twice_is_refused_both_times(page_server, scraper) -> None:
    # A replica's page from its first seconds (192 finished requests) served again at 571, twice:
    # the second copy used to pass (the refused first copy had become the baseline), and the
    # window read 571 -> 192 -> 600 as a restart, 192 + 408 "new" requests where 29 finished
    # (the hostile-fleet spike: 4 replicas at a true 40 req/s read ~60-90).
    oks = _scrape_series(page_server, scraper, [571.0, 192.0, 192.0, 600.0])
    assert oks == [True, False, False, True]


def test_a_restart_far_from_zero_is_read_once_it_passes_the_old_value(page_server, scraper) -> None:
    # 100 -> 30: not near zero, refused; the process keeps serving and is read again past 100.
    oks = _scrape_series(page_server, scraper, [100.0, 30.0, 60.0, 90.0, 120.0])
    assert oks == [True, False, False, False, True]


def test_an_empty_page_between_does_not_make_a_fall_a_restart(page_server, scraper) -> None:
    # 1,000 finished requests, then a page with no series, then 200: a fall to a fifth, no
    # restart (that starts near 0), whatever came in between.
    src = scraper("/a", server=page_server)
    oks = []
    for k, text in enumerate([page(1000.0), "", page(200.0), page(1010.0)]):
        page_server.set("/a", text)
        oks.append(_ok(src.observe(2.0 * k))["a"])
    assert oks[2] is False and oks[3] is True, (oks, src.last_errors)


def test_a_real_restart_that_grows_back_slowly_is_read(page_server, scraper) -> None:
    # A restart to 1, then 2 s scrapes adding 20 each: still below the 1,002 before the restart
    # when a minute has passed, and read throughout.
    dones = [1000.0, 1002.0, 1.0, *[1.0 + 20 * k for k in range(1, 31)]]
    assert all(_scrape_series(page_server, scraper, dones))


def test_restarts_a_minute_apart_are_each_read(page_server, scraper) -> None:
    oks = _scrape_series(page_server, scraper, [1000.0, 1.0, 500.0, 2.0], step_s=61.0)
    assert oks == [True, True, True, True]


# ---- the HTTP paths: size, compression, redirects ------------------------------------------


def test_a_page_past_the_size_limit_is_not_read(page_server, scraper) -> None:
    big = page() + "# padding\n" * 1_000_000  # 11 MB
    _one(page_server, scraper, big, "limit 8388608")


def test_a_page_with_too_many_lines_is_not_parsed(page_server, scraper) -> None:
    _one(page_server, scraper, page() + "#\n" * 2000, "lines (limit 1000)", max_page_lines=1000)


def _gzip_bomb(inflated: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = b"0" * (1 << 20)
    return b"".join(c.compress(zeros) for _ in range(inflated >> 20)) + c.flush()


def test_a_gzip_page_is_inflated_and_a_gzip_bomb_is_not(page_server, scraper) -> None:
    page_server.set("/small", raw=gzip.compress(page().encode()), headers={"Content-Encoding": "gzip"})
    page_server.set("/bomb", raw=_gzip_bomb(64 << 20), headers={"Content-Encoding": "gzip"})
    src = scraper("/small", "/bomb", server=page_server)
    assert _ok(src.observe(0.0)) == {"small": True, "bomb": False}
    assert "inflates past 8388608 bytes" in src.last_errors["bomb"]


def test_a_redirect_is_not_followed_unless_to_the_same_host_when_allowed(page_server, scraper) -> None:
    page_server.set("/real", page())
    page_server.set("/moved", status=302, headers={"Location": "/real"})
    page_server.set("/away", status=302, headers={"Location": "http://203.0.113.7/metrics"})
    never = scraper("/moved", server=page_server)
    assert _ok(never.observe(0.0)) == {"moved": False}
    assert "302 redirect" in never.last_errors["moved"] and "not followed" in never.last_errors["moved"]
    same = scraper("/moved", "/away", server=page_server, follow_redirects="same-host")
    assert _ok(same.observe(0.0)) == {"moved": True, "away": False}
    assert "203.0.113.7" in same.last_errors["away"]
