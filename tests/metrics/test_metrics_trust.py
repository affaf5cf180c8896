"""A replica whose page cannot be its load is unknown: impossible values, frozen pages, old timestamps.

Found from outside, each reproduced here over real HTTP (a page server scraped by PodScrapeSource,
or by a real Prometheus) and through the signals the policies read:

* negative counters on one replica were read as data: the fleet's request rate read 0.0 (and
  below) for a minute while 0.6 req/s arrived;
* a page of NaN was a good scrape;
* a frozen page (the same bytes, or samples stamped long ago) was never stale;
* after recovery the rate showed a fake spike.

Time here is the controller's ``now_s``, passed to each tick, and a ManualClock for the Unix
time timestamps are compared with: no test sleeps, each asserts the state at a stated time.
"""

from __future__ import annotations

import math

import pytest

from llmscale.clock import ManualClock
from llmscale.controller.core import WINDOW_LEN
from llmscale.metrics.names import DCGM, VLLM
from llmscale.metrics.prometheus import PrometheusSource
from llmscale.metrics.scrape import PodScrapeSource, ScrapeTarget
from llmscale.metrics.vetting import distrust
from llmscale.signals.fleet import compute_signals
from llmscale.types import Histogram, Observation, Signals
from support.prometheus_server import TargetGroup

LABELS = 'engine="0",model_name="llama-8b"'
WALL0 = 1_700_000_000.0  # Unix seconds at now_s = 0 (the ManualClock the scraper stamps against)


def page(
    done: float, tokens: float, *, running: float = 1.0, stamp_ms: int | None = None, nan: bool = False
) -> str:
    """One vLLM replica's page: ``done`` finished requests (E2E count), ``tokens`` generated."""
    st = "" if stamp_ms is None else f" {stamp_ms}"
    c = "NaN" if nan else repr(done)
    return (
        f"# TYPE {VLLM.running} gauge\n{VLLM.running}{{{LABELS}}} {running}{st}\n"
        f"# TYPE {VLLM.waiting} gauge\n{VLLM.waiting}{{{LABELS}}} 0.0{st}\n"
        f"# TYPE {VLLM.generation_tokens} counter\n{VLLM.generation_tokens}{{{LABELS}}} {tokens}{st}\n"
        f"# TYPE {VLLM.e2e} histogram\n"
        f'{VLLM.e2e}_bucket{{{LABELS},le="1.0"}} {c}{st}\n'
        f'{VLLM.e2e}_bucket{{{LABELS},le="+Inf"}} {c}{st}\n'
        f"{VLLM.e2e}_count{{{LABELS}}} {c}{st}\n"
        f"{VLLM.e2e}_sum{{{LABELS}}} {0.5 * done}{st}\n"
    )


# ---- the verdict on one sample ---------------------------------------------------------

H = Histogram((1.0, math.inf), (3.0, 4.0), 2.0, 4.0)


@pytest.mark.parametrize(
    ("values", "hists", "nan", "why"),
    [
        pytest.param({VLLM.waiting: 2.0, VLLM.generation_tokens: 10.0}, {VLLM.e2e: H}, (), None, id="clean"),
        pytest.param(
            {VLLM.generation_tokens: -5.0}, {}, (), "impossible value(s): vllm:generation", id="negative"
        ),
        pytest.param(
            {VLLM.waiting: math.inf}, {}, (), "impossible value(s): vllm:num_requests_waiting", id="inf"
        ),
        pytest.param({VLLM.kv_usage: math.nan}, {}, (), "impossible value(s)", id="nan-value"),
        pytest.param({}, {}, (VLLM.waiting,), "NaN sample(s) of vllm:num_requests_waiting", id="nan-on-page"),
        pytest.param(
            {},
            {VLLM.e2e: Histogram((1.0, math.inf), (-3.0, 4.0), 2.0, 4.0)},
            (),
            "impossible histogram",
            id="negative-bucket",
        ),
        pytest.param(
            {},
            {VLLM.e2e: Histogram((1.0, math.inf), (3.0, 4.0), math.nan, 4.0)},
            (),
            "impossible histogram",
            id="nan-sum",
        ),
        pytest.param({DCGM.GPU_UTIL: -1.0}, {}, (), "impossible value(s): DCGM_FI_DEV_GPU_UTIL", id="dcgm"),
        # Series llmscale never reads do not blind it to a healthy replica.
        pytest.param(
            {"go_gc_duration_seconds": math.nan, "weird_gauge": -4.0}, {}, ("lat",), None, id="unread"
        ),
    ],
)
def test_distrust(values, hists, nan, why):
    got = distrust(values, hists, nan)
    assert (got is None) if why is None else (got is not None and why in got), got


# ---- PodScrapeSource over real HTTP ----------------------------------------------------


@pytest.fixture
def scraper():
    made: list[PodScrapeSource] = []

    def make(targets, **kw):
        kw.setdefault("wall_clock", ManualClock(WALL0))
        s = PodScrapeSource(targets, timeout_s=2.0, **kw)
        made.append(s)
        return s

    try:
        yield make
    finally:
        for s in made:
            s.close()


def _by(obs: Observation) -> dict[str, bool]:
    return {s.replica: s.ok for s in obs.replicas}


@pytest.mark.parametrize(
    ("bad_page", "why"),
    [
        pytest.param(page(-40.0, -4000.0), "impossible value(s)", id="negative-counters"),
        pytest.param(
            page(40.0, 4000.0, nan=True), "NaN sample(s) of vllm:e2e_request_latency_seconds", id="nan"
        ),
        pytest.param(page(40.0, 4000.0, running=math.inf), "impossible value(s)", id="inf-gauge"),
    ],
)
def test_an_impossible_page_makes_its_replica_unknown(page_server, scraper, bad_page, why):
    page_server.set("/a", page(40.0, 4000.0))
    page_server.set("/b", bad_page)
    src = scraper([("a", page_server.url("/a")), ("b", page_server.url("/b"))])
    obs = src.observe(0.0)
    assert _by(obs) == {"a": True, "b": False}
    assert why in src.last_errors["b"] and src.errors_total == 1


def test_a_page_unchanged_past_the_limit_is_stale_and_a_new_one_is_fresh(page_server, scraper):
    page_server.set("/a", page(40.0, 4000.0))
    src = scraper([("a", page_server.url("/a"))], max_sample_age_s=30.0)
    assert _by(src.observe(0.0)) == {"a": True}
    assert _by(src.observe(30.0)) == {"a": True}  # at the limit: not yet
    assert _by(src.observe(31.0)) == {"a": False}
    assert "stale: the page has not changed for 31 s (limit 30 s)" in src.last_errors["a"]
    page_server.set("/a", page(41.0, 4100.0))
    assert _by(src.observe(33.0)) == {"a": True}  # it moved: fresh at once
    # The limit counts from the page's first sight, not from the last scrape that saw it.
    assert _by(src.observe(63.0)) == {"a": True}
    assert _by(src.observe(63.5)) == {"a": False}


def test_samples_stamped_long_ago_are_stale(page_server, scraper):
    wall = ManualClock(WALL0)
    src = scraper([("a", page_server.url("/a"))], max_sample_age_s=60.0, wall_clock=wall)
    page_server.set("/a", page(40.0, 4000.0, stamp_ms=int((WALL0 - 10.0) * 1000)))
    assert _by(src.observe(0.0)) == {"a": True}
    page_server.set("/a", page(41.0, 4100.0, stamp_ms=int((WALL0 - 90.0) * 1000)))
    assert _by(src.observe(1.0)) == {"a": False}
    assert "stale: vllm:" in src.last_errors["a"] and "stamped 90 s ago" in src.last_errors["a"]


def test_a_stale_or_impossible_dcgm_page_drops_the_gpu_fields_only(page_server, scraper):
    page_server.set("/a", page(40.0, 4000.0))
    page_server.set("/dcgm", f'# TYPE {DCGM.GPU_UTIL} gauge\n{DCGM.GPU_UTIL}{{gpu="0"}} -3\n')
    src = scraper([ScrapeTarget("a", page_server.url("/a"), dcgm_url=page_server.url("/dcgm"))])
    (s,) = src.observe(0.0).replicas
    assert s.ok and DCGM.GPU_UTIL not in s.values and VLLM.running in s.values
    assert "impossible value(s): DCGM_FI_DEV_GPU_UTIL" in src.last_errors["a dcgm"]


# ---- the signals over a fault and its recovery ------------------------------------------


def _observe(now_s, source, window):
    """What a tick reads: one observation more in the window (of the core's length), its signals."""
    window = (*window, source.observe(now_s))[-WINDOW_LEN:]
    return window, compute_signals(window)


RATE_EACH_RPS = 0.3  # per replica: 0.6 req/s for the fleet of two
TICK_S = 2.0


def _run(page_server, scraper, fault: str, fault_ticks: range, n_ticks: int) -> list[tuple[float, Signals]]:
    """Two replicas finishing 0.3 req/s each, ticked every 2 s; replica b shows ``fault`` during
    ``fault_ticks``. Returns (now_s, signals) of every tick."""
    wall = ManualClock(WALL0)
    src = scraper([("a", page_server.url("/a")), ("b", page_server.url("/b"))], wall_clock=wall)
    done = {"a": 100.0, "b": 100.0}
    out = []
    window: tuple[Observation, ...] = ()
    for k in range(n_ticks):
        now = k * TICK_S
        wall.advance_to(WALL0 + now)
        for r in done:
            done[r] += RATE_EACH_RPS * TICK_S
            good = page(done[r], 100.0 * done[r])
            if r == "b" and k in fault_ticks:
                if fault == "negative":
                    page_server.set("/b", page(-done[r], -100.0 * done[r]))
                elif fault == "nan":
                    page_server.set("/b", page(done[r], 100.0 * done[r], nan=True))
                elif fault == "stamped-old":
                    page_server.set(
                        "/b", page(done[r], 100.0 * done[r], stamp_ms=int((WALL0 + now - 120) * 1000))
                    )
                # "frozen": the page of the tick before the fault stays up
            else:
                page_server.set(f"/{r}", good)
        window, signals = _observe(now, src, window)
        out.append((now, signals))
    return out


def _rate(signals: Signals) -> float:
    v = signals.get("request_rate_rps")
    assert v is not None
    return v


@pytest.mark.parametrize("fault", ["negative", "nan", "stamped-old"])
def test_the_fleet_rate_holds_through_a_bad_replica_and_does_not_spike_after(page_server, scraper, fault):
    ticks = _run(page_server, scraper, fault, range(20, 50), 80)
    for k, (now, sig) in enumerate(ticks[5:], start=5):
        bad = 20 <= k < 50
        assert sig.unknown_replicas == (1 if bad else 0), (k, now)
        # 0.6 req/s arrive all along; b's share is its last known rate, then the fleet's mean.
        assert _rate(sig) == pytest.approx(0.6, rel=0.02), (fault, k, now, _rate(sig))


def test_a_frozen_page_reads_as_idle_until_the_limit_then_unknown_then_no_spike(page_server, scraper):
    # Frozen for 100 s from tick 20: stale once unchanged for 60 s (the default limit).
    ticks = _run(page_server, scraper, "frozen", range(20, 70), 110)
    unknown_from = next(k for k, (_, sig) in enumerate(ticks) if sig.unknown_replicas)
    first_seen_s = 19 * TICK_S  # the frozen page is the one served at tick 19
    assert ticks[unknown_from][0] - first_seen_s > 60.0 >= ticks[unknown_from - 1][0] - first_seen_s
    for k, (now, sig) in enumerate(ticks[5:], start=5):
        rate = _rate(sig)
        if 20 <= k < unknown_from:
            # Until then the frozen counters read as b finishing nothing: the rate falls towards
            # a's 0.3 (the price of any staleness limit), never below it.
            assert 0.3 - 1e-9 <= rate <= 0.6 + 1e-9, (k, rate)
        else:
            # Unknown: b counts at the mean, not at the zero its frozen counters showed; back,
            # it counts from its first good samples, not its whole frozen stretch at once.
            assert rate == pytest.approx(0.6, rel=0.02), (k, now, rate)


# ---- counter resets, as PromQL's rate() reads them ---------------------------------------


def test_a_counter_that_resets_alone_counts_from_its_new_value(page_server, scraper):
    """b's E2E count restarts from 0 at tick 6 (its histogram was re-created) while its token
    counter, the restart witness, goes on: a reset all the same. Read as last - first, the window's
    increase was 13.2 - 507.2 < 0, a negative rate."""
    src = scraper([("b", page_server.url("/b"))])
    window: tuple[Observation, ...] = ()
    step = RATE_EACH_RPS * TICK_S  # 0.6 finished per tick
    for k in range(12):
        # 500 + 0.6 per tick until tick 5 (503.6), then from 0 again: 0.6 at tick 6 ... 3.6 at 11
        done = 500.0 + step * (k + 1) if k < 6 else step * (k - 5)
        page_server.set("/b", page(done, 100_000.0 + 10.0 * k))
        window, sig = _observe(k * TICK_S, src, window)
    # As PromQL's rate(): 5 steps of 0.6, the reset step counted from the new value (0.6), 5 more
    # steps of 0.6 -> 6.6 finished over the window's 22 s = 0.3 req/s, the rate it ran at all along.
    assert _rate(sig) == pytest.approx(RATE_EACH_RPS)


# ---- the same through a real Prometheus --------------------------------------------------


def test_prometheus_source_marks_a_replica_with_impossible_values_unknown(page_server, prometheus_server):
    page_server.set("/a/metrics", page(40.0, 4000.0))
    page_server.set("/b/metrics", page(-40.0, -4000.0))
    page_server.set("/c/metrics", page(40.0, 4000.0, nan=True))
    groups = [
        TargetGroup([f"127.0.0.1:{page_server.port}"], {"pod": p, "__metrics_path__": f"/{p}/metrics"})
        for p in ("a", "b", "c")
    ]
    prom = prometheus_server(scrape_interval_s=1.0, static_targets=groups)
    prom.wait_for(f"{VLLM.generation_tokens}", lambda r: len(r) == 3)
    prom.wait_for(f"{VLLM.e2e}_count", lambda r: len(r) == 3)
    src = PrometheusSource(prom.url, timeout_s=3.0, dcgm=False)
    try:
        obs = src.observe(0.0)
    finally:
        src.close()
    assert _by(obs) == {"a": True, "b": False, "c": False}
    assert "impossible value(s)" in src.last_errors["b"]
    assert "NaN sample(s) of vllm:e2e_request_latency_seconds" in src.last_errors["c"]
