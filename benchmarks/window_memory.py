"""Memory of the controller's window at fleet scale: what one replica costs, kept as a scraper keeps it.

    .venv/bin/python benchmarks/window_memory.py [--replicas 5000] [--window 20]

One real ``llmscale emulate`` replica's ``/metrics`` page (268 lines) is varied into 64 pages a tick
(values moving from tick to tick), and ``--replicas`` sources are read through one
:class:`~llmscale.metrics.exposition.PageReader`, their samples put into a window of ``--window``
observations and the signals computed over it, as the live controller does each tick (no HTTP:
``benchmarks/controller_tick.py`` measures the scrape). Two paths, each in its own process so that
each has its own peak RSS:

* ``kept``: the scraper's (``metrics/scrape.py``): only the values and histograms llmscale reads,
  histogram counts packed in arrays (``PackedHistogram``);
* ``all``: the previous one, every value and histogram of the page as parsed.

Printed: the RSS before the first page and the peak, their difference per replica, and the CPU of
one tick's parse and signals; with a pure-Python machine reference (``sum(range(10**7))``).
"""

from __future__ import annotations

import argparse
import random
import re
import resource
import statistics
import subprocess
import sys
import time


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _one(replicas: int, window_len: int, kept: bool) -> None:
    import httpx

    from llmscale.emulate import EmulateConfig, EmulatorThread
    from llmscale.metrics.exposition import PageReader
    from llmscale.metrics.scrape import _packed, fleet_view_of
    from llmscale.metrics.vetting import READ_HISTOGRAMS, READ_VALUES
    from llmscale.signals.fleet import compute_signals
    from llmscale.types import Observation, Phase, ReplicaSample

    with EmulatorThread(EmulateConfig(replicas=1, port=0)) as fleet:
        port = next(iter(fleet.call(lambda s: s.replica_ports()).values()))
        page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    sample_line = re.compile(r"(?m)^([^#\n][^ \n]* )([0-9.e+-]+)$")

    def variant(seed: int, tick: int) -> str:
        rnd = random.Random(seed)
        return sample_line.sub(
            lambda m: f"{m.group(1)}{float(m.group(2)) + rnd.randint(0, 3) + 7 * tick!r}", page
        )

    t0 = time.perf_counter()
    sum(range(10**7))
    ref_s = time.perf_counter() - t0
    reader = PageReader(keep_values=READ_VALUES, keep_histograms=READ_HISTOGRAMS) if kept else PageReader()
    start_mb = _rss_mb()
    window: list[Observation] = []
    cpu: list[float] = []
    for tick in range(window_len + 1):
        texts = [variant(k, tick) for k in range(64)]
        c0 = time.process_time()
        samples = []
        for k in range(replicas):
            parsed = reader.parse(texts[k % 64], key=k)
            hists = _packed(parsed.histograms) if kept else parsed.histograms
            samples.append(
                ReplicaSample(f"r{k}", Phase.READY, ok=True, values=parsed.values, histograms=hists)
            )
        obs = Observation(time_s=5.0 * tick, fleet=fleet_view_of(samples), replicas=tuple(samples))
        window = [*window, obs][-window_len:]
        compute_signals(window)
        if tick:
            cpu.append(time.process_time() - c0)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"  {'kept' if kept else 'all'}: RSS {start_mb:.0f} MB before, peak {peak_mb:.0f} MB -> "
        f"{(peak_mb - start_mb) * 1024 / replicas:.0f} KB per replica; parse + signals CPU per tick "
        f"median {statistics.median(cpu):.2f} s (machine reference {ref_s:.2f} s)",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=5000)
    ap.add_argument("--window", type=int, default=20, help="observations in the window (WINDOW_LEN)")
    ap.add_argument("--path", choices=("kept", "all"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.replicas < 1 or args.window < 1:
        ap.error("needs --replicas >= 1 and --window >= 1")
    if args.path is not None:
        _one(args.replicas, args.window, args.path == "kept")
        return 0
    print(f"window of {args.window} observations over {args.replicas} replicas (one process each):")
    for path in ("kept", "all"):
        cmd = [sys.executable, __file__, "--replicas", str(args.replicas), "--window", str(args.window)]
        subprocess.run([*cmd, "--path", path], check=True, timeout=3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
