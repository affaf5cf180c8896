"""`llmscale emulate --hbm-glitch ... --adaptive-batch`: the fuse holds a real HTTP replica's batch down.

A real `llmscale emulate` subprocess on 127.0.0.1 and the official `openai` client. The seed's
glitch train from t = 0 keeps the replica below 16/128 of its bandwidth every 83 ms period, so
the fuse (seed 004 4.4) halves max_num_seqs after periods 4, 8 and 12: 256 -> 128 -> 64 -> 32 by
0.996 s of emulator time. Then 40 long streams arrive: 32 run and 8 wait, where without the fuse
all 40 run. Everything waits for a condition (the admin API's clock and batch limit, the
replica's vLLM gauges), each with a bound.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmscale.metrics.names import VllmMetric as V
from support.emulate_proc import EmulateProcess, start_emulate, stop_emulate
from support.wait import wait_for

TOKEN = "faults-emulated-admin-token-7f3c"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
STREAMS = 40


@contextmanager
def emulate(*args: str) -> Iterator[EmulateProcess]:
    ep = start_emulate(
        "--replicas",
        "1",
        "--admin-api",
        "--hbm-glitch",
        "0:600",
        *args,
        env={"LLMSCALE_EMULATE_ADMIN_TOKEN": TOKEN},
    )
    try:
        yield ep
    finally:
        stop_emulate(ep.proc)


def admin(ep: EmulateProcess) -> dict[str, object]:
    doc: dict[str, object] = httpx.get(ep.base_url + "/admin/replicas", headers=AUTH, timeout=10.0).json()
    return doc


def gauges(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=10.0).text
    return {
        f.name: f.samples[0].value
        for f in text_string_to_metric_families(text)
        if f.name in (V.RUNNING, V.WAITING) and f.samples
    }


def open_streams(ep: EmulateProcess, n: int, release: threading.Event) -> list[threading.Thread]:
    """n streaming completions of 4,000 tokens, each held open (first chunk read) until ``release``."""
    client = openai.OpenAI(base_url=ep.base_url + "/v1", api_key="unused", timeout=60.0, max_retries=0)
    model = client.models.list().data[0].id

    def one() -> None:
        stream = client.completions.create(model=model, prompt="hello there", max_tokens=4000, stream=True)
        try:
            release.wait(60.0)
        finally:
            stream.close()  # the client goes away: the emulator aborts the request

    threads = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


def running_and_waiting(ep: EmulateProcess) -> tuple[float, float, int]:
    url = next(iter(ep.replica_urls.values()))
    # The fuse's last halving is at 12 x 83 ms = 0.996 s of emulator time.
    wait_for("the emulator's clock to pass 1.0 s", lambda: float(admin(ep)["now_s"]) > 1.0, 60.0)  # type: ignore[arg-type]
    (replica,) = admin(ep)["replicas"]  # type: ignore[misc]
    limit = int(replica["max_num_seqs"])
    release = threading.Event()
    threads = open_streams(ep, STREAMS, release)
    try:
        wait_for(f"all {STREAMS} requests on the replica", lambda: sum(gauges(url).values()) == STREAMS, 60.0)
        g = gauges(url)
        return g[V.RUNNING], g[V.WAITING], limit
    finally:
        release.set()
        for t in threads:
            t.join(30.0)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(("--adaptive-batch",), (32, 8, 32), id="fuse-on-holds-32"),
        pytest.param((), (40, 0, 256), id="fuse-off-runs-all"),
    ],
)
def test_the_adaptive_batch_fuse_limits_running_requests(
    args: tuple[str, ...], expected: tuple[int, int, int]
) -> None:
    with emulate(*args) as ep:
        running, waiting, limit = running_and_waiting(ep)
    assert (running, waiting, limit) == expected
