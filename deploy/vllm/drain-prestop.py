#!/usr/bin/env python3
"""preStop hook of a vLLM pod: return once the server has no running or waiting request.

Kubernetes runs it when the pod is deleted (a scale-down, a rollout), before it sends SIGTERM.
From that moment the pod is terminating and leaves the Service's ready endpoints, so new
requests stop coming once kube-proxy / the gateway has seen it; this hook then waits for the
requests already admitted:

1. wait ``--settle-s`` (5 s): the endpoint removal propagates and requests already routed to
   the pod arrive and are counted;
2. read ``--url`` (the pod's own /metrics) every ``--poll-s`` until the gauges named by
   ``--gauge`` (default vLLM's num_requests_running and num_requests_waiting, summed over
   their label sets) read 0 on ``--idle-polls`` reads in a row;
3. give up after ``--max-wait-s`` in all. The kubelet kills the container at
   ``terminationGracePeriodSeconds`` whatever this hook does, so keep
   settle + max-wait + vLLM's ``--shutdown-timeout`` below the grace period
   (deployment.yaml: 5 + 540 + 30 = 575 < 600 s; tests/deploy checks it).

Three failed reads in a row end the wait too: a server that answers nothing serves nothing.
Exits 0 always (a failed hook is only an event; the pod terminates anyway). Python's standard
library only: the vLLM image has python3 and nothing of llmscale. Run by the real-cluster test
tests/kubernetes/test_kube_drain.py against emulated replicas.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.request

DEFAULT_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")


def in_flight(text: str, gauges: tuple[str, ...]) -> float:
    """Sum of the samples of ``gauges`` on an exposition page (every label set)."""
    total = 0.0
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in gauges:
            rest = line.rsplit("}", 1)[1] if "{" in line else line.split(None, 1)[1]
            total += float(rest.split()[0])  # the value; a timestamp may follow
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000/metrics")
    ap.add_argument("--gauge", action="append", help="a gauge to sum (repeatable); default vLLM's two")
    ap.add_argument("--settle-s", type=float, default=5.0)
    ap.add_argument("--poll-s", type=float, default=1.0)
    ap.add_argument("--idle-polls", type=int, default=2)
    ap.add_argument("--max-wait-s", type=float, default=540.0)
    ap.add_argument("--timeout-s", type=float, default=2.0)
    args = ap.parse_args(argv)
    gauges = tuple(args.gauge or DEFAULT_GAUGES)
    start = time.monotonic()
    deadline = start + args.max_wait_s
    time.sleep(max(0.0, min(args.settle_s, args.max_wait_s)))
    idle = failures = 0
    last = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(args.url, timeout=args.timeout_s) as resp:
                last = in_flight(resp.read().decode("utf-8", "replace"), gauges)
            failures = 0
        except (OSError, ValueError) as e:
            failures += 1
            print(f"drain-prestop: cannot read {args.url}: {e}", file=sys.stderr)
            if failures >= 3:
                print("drain-prestop: the server answers nothing; not waiting", file=sys.stderr)
                return 0
        else:
            idle = idle + 1 if last == 0 else 0
            if idle >= args.idle_polls:
                print(f"drain-prestop: idle after {time.monotonic() - start:.1f} s", file=sys.stderr)
                return 0
        time.sleep(args.poll_s)
    print(
        f"drain-prestop: {last} requests still in flight at --max-wait-s {args.max_wait_s}", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
