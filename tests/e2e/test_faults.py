"""Issue 4, acceptance "Faults", at the controller level on real processes.

(a) Prometheus stopped mid-run: the controller holds (never scales down), counts the errors on
    its /metrics, and reads data again once Prometheus is back on the same port and TSDB.
(b) One pod's scrape failing: that replica is unknown, not zero; the others are read; no
    scale-down follows.
(c) A controller restart with a file state store takes no extra scale action within the
    cooldown, where a fresh controller would.

The policy of (a) and (b) is chosen so that the tests can fail. ``keda-queue`` re-implements
KEDA's ``ignoreNullValues: true``: a metric with no value reads as 0. Pointed at
``vram_used_ratio`` (vLLM preallocates its KV pool, so each emulated GPU reads 0.9 whatever the
load) with an AverageValue target of 0.45 per pod, it keeps a fleet of 2 (0.9 / (0.45 x 2) =
1.0, within KEDA's 10% tolerance). It proposes 1 replica as soon as the value is missing
(0 / (0.45 x 2) = 0), or is averaged with a zero from an unknown replica (0.45 / 0.9 = 0.5).
The HPA's 300 s scale-down stabilisation is off (``down_stabilization_s: 0``) and so is the
drain-aware guard's eviction window, so nothing delays that scale-down: only the controller's
handling of missing data stops it (with both of its layers disabled, test (a) sees the fleet
scaled down to 1 during the outage).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from e2e_procs import (
    ADMIN_TOKEN,
    EmulateProcess,
    Proc,
    decision_lines,
    llmscale_command,
    metric_value,
    write_config,
)

from support.prometheus_server import free_port
from support.wait import wait_for

pytestmark = pytest.mark.slow

VRAM_PER_REPLICA = 0.9  # emulate's DCGM framebuffer share, at any load

#: keeps 2 replicas on data, proposes 1 on a missing or zero-diluted value (module docstring)
NULL_AS_ZERO_POLICY = {
    "name": "keda-queue",
    "params": {
        "signal": "vram_used_ratio",
        "threshold": VRAM_PER_REPLICA / 2,
        "down_stabilization_s": 0,
        "polling_interval_s": 1,
    },
}


def _config(workdir: Path, emulate_url: str, metrics: dict[str, Any], **over: Any) -> tuple[Path, Path, str]:
    """A config for ``llmscale run`` against emulate; returns (config path, decision log, /metrics URL)."""
    log_path = workdir / over.pop("log_name", "decisions.jsonl")
    port = free_port()
    doc: dict[str, Any] = {
        "target": {"name": "emulated-llama", "backend": "vllm"},
        "metrics": metrics,
        "policy": NULL_AS_ZERO_POLICY,
        # drain_aware off: the eviction window would otherwise delay a scale-down past the test.
        "guards": {"min_replicas": 1, "max_replicas": 4, "drain_aware": False},
        "tick_s": 1.0,
        "mode": "apply",
        "actuator": {"kind": "emulate", "emulate": {"url": emulate_url}},
        "server": {"listen": f"127.0.0.1:{port}"},
        "decision_log": {"path": str(log_path)},
        **over,
    }
    name = f"{log_path.stem}.yaml"
    return write_config(workdir, doc, name), log_path, f"http://127.0.0.1:{port}"


def _run(procs: Any, workdir: Path, config: Path, *args: str, name: str = "run") -> Proc:
    proc: Proc = procs(Proc, name, [*llmscale_command(), "run", "--config", str(config), *args], workdir)
    return proc


def _brief(lines: list[dict[str, Any]]) -> str:
    keys = (
        "time_s",
        "rule",
        "desired_before_guards",
        "desired",
        "guard",
        "applied",
        "unknown_replicas",
        "metrics_outage",
    )
    return "\n".join(
        str({k: ln.get(k) for k in keys} | {"value": (ln["inputs"] or {}).get("value")}) for ln in lines
    )


def test_prometheus_outage_holds_counts_errors_and_recovers(workdir, procs, prometheus_server):
    port = free_port()
    front = f"http://127.0.0.1:{port}"
    emulate = procs(EmulateProcess, workdir, "--replicas", "2", "--max-seconds", "170", port=port)
    prom = prometheus_server(
        scrape_interval_s=1.0, http_sd_url=f"{front}/admin/targets", http_sd_token=ADMIN_TOKEN
    )
    config, log_path, ctl = _config(
        workdir,
        front,
        # max_sample_age_s 5: after the restart, Prometheus's last samples from before the outage
        # are older than that and must not pass for fresh ones.
        {"source": "prometheus", "prometheus": {"url": prom.url, "timeout_s": 4, "max_sample_age_s": 5}},
    )
    run = _run(procs, workdir, config, "--max-ticks", "90")
    emulate.wait_ready()
    specs: list[int] = []  # emulate's spec, sampled all along

    def context() -> str:
        return (
            f"{run.tail()}\n{prom.log_tail(5)}\nspecs seen: {specs}\n{_brief(decision_lines(log_path)[-8:])}"
        )

    def lines_after(t: float, pred: Any, n: int) -> list[dict[str, Any]] | None:
        if not run.running():
            pytest.fail(f"llmscale run exited\n{context()}")
        specs.append(emulate.admin()["spec_replicas"])
        found = [ln for ln in decision_lines(log_path) if ln["time_s"] > t and pred(ln)]
        return found if len(found) >= n else None

    def healthy(ln: dict[str, Any]) -> bool:
        # A tick that failed (emulate not listening yet: the controller starts first) records no
        # signals at all.
        value = (ln["inputs"] or {}).get("value")
        return ln["unknown_replicas"] == 0 and value is not None and abs(value - VRAM_PER_REPLICA) < 1e-6

    # 1. Prometheus up: two ticks read both replicas and keep the fleet.
    before = wait_for(
        "two ticks with data", lambda: lines_after(0.0, healthy, 2), 60, context=context, every_s=0.5
    )
    for ln in before:
        assert ln["desired_before_guards"] == 2 and ln["desired"] == 2 and not ln["applied"], ln
        assert ln["rule"] == "within-tolerance" and not ln["metrics_outage"], ln
    errors_before = metric_value(ctl, "llmscale_scrape_errors_total", {"source": "prometheus"}) or 0.0

    # 2. Prometheus stopped: ticks hold the fleet although the policy proposes a scale-down.
    prom.stop()
    t_stop = time.time()
    outage = wait_for(
        "three ticks of the outage",
        lambda: lines_after(t_stop, lambda ln: ln["metrics_outage"], 3),
        30,
        context=context,
        every_s=0.5,
    )
    for ln in outage:
        assert ln["unknown_replicas"] == 2, ln
        # The policy read the missing value as 0 and asked for 1 replica: the controller held 2.
        assert ln["rule"] == "no-data-null-as-zero" and ln["desired_before_guards"] == 1, ln
        assert ln["desired"] == 2 and not ln["applied"], ln
        assert ln["guard"] in ("hold-on-missing-data", "metrics-outage"), ln
    errors_down = metric_value(ctl, "llmscale_scrape_errors_total", {"source": "prometheus"})
    assert errors_down is not None and errors_down >= errors_before + 3, (errors_before, errors_down)
    assert metric_value(ctl, "llmscale_unknown_replicas") == 2.0
    assert metric_value(ctl, "llmscale_desired_replicas", {"policy": "keda-queue"}) == 2.0

    # 3. Prometheus back on the same port and TSDB: ticks see both replicas again.
    prom.restart()
    t_back = time.time()
    after = wait_for(
        "ticks with data after the restart",
        lambda: lines_after(t_back, healthy, 2),
        45,
        context=context,
        every_s=0.5,
    )
    for ln in after:
        assert not ln["metrics_outage"] and ln["desired_before_guards"] == 2 and ln["desired"] == 2, ln
    assert metric_value(ctl, "llmscale_unknown_replicas") == 0.0

    assert run.stop() == 0, run.tail()
    lines = decision_lines(log_path)
    assert not any(ln["applied"] for ln in lines), f"the controller scaled:\n{_brief(lines)}"
    # a tick that failed before the cluster answered (emulate not listening yet) records no replicas
    seen = [ln for ln in lines if ln["replicas"] and ln["replicas"]["spec"]]
    assert seen and all(ln["desired"] >= ln["replicas"]["spec"] for ln in seen), _brief(lines)
    assert specs and min(specs) == 2 and emulate.admin()["spec_replicas"] == 2, specs


def test_one_replica_scrape_failing_is_unknown_not_zero(workdir, procs):
    emulate = procs(EmulateProcess, workdir, "--replicas", "2", "--max-seconds", "120")
    front = emulate.wait_ready()
    replicas = emulate.ready_replicas()
    assert len(replicas) == 2, replicas
    good, bad = sorted(replicas, key=lambda r: r["name"])
    # Both replicas exist and are ready (emulate lists them); the second one's scrape target is a
    # port nobody listens on: its scrape fails with connection refused on every tick.
    static = [
        {"name": good["name"], "url": f"http://127.0.0.1:{good['port']}/metrics"},
        {"name": bad["name"], "url": f"http://127.0.0.1:{free_port()}/metrics"},
    ]
    config, log_path, ctl = _config(
        workdir, front, {"source": "scrape", "scrape": {"static_targets": static, "timeout_s": 3}}
    )
    run = _run(procs, workdir, config, "--max-ticks", "40")

    def context() -> str:
        return f"{run.tail()}\n{_brief(decision_lines(log_path)[-6:])}"

    def ticks() -> list[dict[str, Any]] | None:
        if not run.running():
            pytest.fail(f"llmscale run exited\n{context()}")
        lines = decision_lines(log_path)
        return lines if len(lines) >= 3 else None

    wait_for("three ticks", ticks, 60, every_s=0.2, context=context)
    # The controller's own gauges say the same while it runs.
    assert metric_value(ctl, "llmscale_unknown_replicas") == 1.0
    errors = metric_value(ctl, "llmscale_scrape_errors_total", {"source": "scrape"})
    assert errors is not None and errors >= 3, errors
    assert run.stop() == 0, run.tail()

    lines = decision_lines(log_path)
    for ln in lines:
        assert ln["unknown_replicas"] == 1 and not ln["metrics_outage"], ln
        assert ln["replicas"]["ready"] == 2 and ln["replicas"]["spec"] == 2, ln
        # The known replica is read (0.9); had the unknown one counted as zero the mean would be
        # 0.45, and the policy would have asked for 1 replica.
        assert ln["inputs"]["value"] == pytest.approx(VRAM_PER_REPLICA), ln
        assert ln["rule"] == "within-tolerance" and ln["desired_before_guards"] == 2 and ln["desired"] == 2, (
            ln
        )
        assert not ln["applied"], ln
    assert emulate.admin()["spec_replicas"] == 2


def test_restart_with_file_state_takes_no_extra_action_within_cooldown(workdir, procs):
    """Run 1 scales fleet A up (1 -> 3) and saves its state. The fleet is then idle, so the
    ``slo`` policy proposes 1 replica. With every other scale-down guard off (stabilisation,
    headroom, drain), only ``cooldown_down_s`` (300 s after any scale event) stands between that
    proposal and a scale-down: run 2, restarted on the saved state, holds 3.

    Run 3 is the counterfactual: the same controller without the saved state, on fleet B, an
    idle fleet of 3 like A after run 1; it scales down at once. It runs alongside runs 1 and 2
    (each ``llmscale run`` takes seconds to start on a busy machine). Run 1 uses the ``static``
    policy (3 replicas) only to make the first scale-up happen without a load generator.
    """
    fleet_a = procs(EmulateProcess, workdir, "--replicas", "1", "--cold-start-s", "0", "--max-seconds", "150")
    fleet_b = procs(EmulateProcess, workdir, "--replicas", "3", "--max-seconds", "150", name="emulate-b")
    guards = {
        "min_replicas": 1,
        "max_replicas": 4,
        "cooldown_down_s": 300,
        "stabilization_down_s": 0,
        "headroom_max_usage": None,
        "drain_aware": False,
    }
    state = workdir / "state.json"

    def config(name: str, url: str, policy: dict[str, Any], state_path: Path) -> tuple[Path, Path]:
        # A generous scrape time-out: an unknown replica would hold the scale-down for its own reason.
        scrape = {"source": "scrape", "scrape": {"emulate_url": url, "timeout_s": 5}}
        cfg, log, _ = _config(
            workdir, url, scrape, log_name=f"{name}.jsonl", policy=policy, guards=guards, tick_s=0.5,
            state={"store": "file", "path": str(state_path)},
        )  # fmt: skip
        return cfg, log

    # Run 3 (fresh, no saved state) on fleet B, started first so that it runs alongside runs 1-2.
    url_b = fleet_b.wait_ready()
    assert fleet_b.admin()["spec_replicas"] == 3
    cfg3, log3 = config("run3", url_b, {"name": "slo"}, workdir / "fresh-state.json")
    run3 = _run(procs, workdir, cfg3, "--max-ticks", "4", name="run3")

    # Run 1: the scale-up of fleet A; the state file records it.
    url_a = fleet_a.wait_ready()
    cfg1, log1 = config("run1", url_a, {"name": "static", "params": {"replicas": 3}}, state)
    run1 = _run(procs, workdir, cfg1, "--max-ticks", "1", name="run1")
    assert run1.wait(60) == 0, run1.tail()
    (first,) = decision_lines(log1)
    assert first["applied"] and first["desired"] == 3 and first["replicas"]["spec"] == 1, first
    saved = json.loads(state.read_text())
    assert saved["last_decision"]["final"] == 3
    assert saved["guard_state"]["last_change_s"] == pytest.approx(first["time_s"], abs=0.01)
    wait_for(
        "3 ready replicas", lambda: len(fleet_a.ready_replicas()) == 3, 30, every_s=0.2, context=fleet_a.tail
    )

    # Run 2: restarted on the saved state, the idle fleet's proposal of 1 waits out the cooldown.
    cfg2, log2 = config("run2", url_a, {"name": "slo"}, state)
    run2 = _run(procs, workdir, cfg2, "--max-ticks", "4", name="run2")
    assert run2.wait(60) == 0, run2.tail()
    assert "loaded controller state" in run2.stderr(), run2.tail()
    lines2 = decision_lines(log2)
    assert len(lines2) == 4, _brief(lines2)
    assert not any(ln["applied"] for ln in lines2), _brief(lines2)
    assert all(ln["desired"] == 3 for ln in lines2), _brief(lines2)
    held = [ln for ln in lines2 if ln["desired_before_guards"] == 1]
    assert held, f"the idle fleet never made slo propose 1:\n{_brief(lines2)}"
    assert all(ln["guard"] == "cooldown" and ln["unknown_replicas"] == 0 for ln in held), _brief(held)
    assert fleet_a.admin()["spec_replicas"] == 3
    assert json.loads(state.read_text()) == saved, "run 2 took no action, so it must not rewrite the state"

    # Run 3: the same proposal without the saved state scaled fleet B down at once.
    assert run3.wait(60) == 0, run3.tail()
    assert "no saved controller state" in run3.stderr(), run3.tail()
    lines3 = decision_lines(log3)
    acted = [ln for ln in lines3 if ln["applied"]]
    assert acted, f"the fresh controller did not act:\n{_brief(lines3)}"
    down = acted[0]
    assert down["desired"] == 1 and down["replicas"]["spec"] == 3 and down["guard"] is None, down
    assert fleet_b.admin()["spec_replicas"] == 1
