"""ray-serve beside Ray Serve 2.60's own policy, in process, on scripted ticks.

Ray's ``replica_queue_length_autoscaling_policy`` runs through the controller's
config path (``AutoscalingConfig.policy`` -> ``_resolve_policy_callable`` ->
``_apply_autoscaling_config``, then ``ceil`` and the bounds as
``AutoscalingState.get_decision_num_replicas`` applies them) with a fake clock:
the module's ``time`` is replaced, so its delay timer reads the scripted
``now_s``. The same ticks go through :func:`llmscale.policies.ray_serve.decide_replicas`
and every decision must be equal. A second test holds llmscale's look-back mean
to Ray's ``time_weighted_average``.

``ray[serve]==2.60.0`` comes with the test extra (285 MB, kept out of the default
environment); without it this module fails to import, it never skips.
"""

from __future__ import annotations

import math
import random

import pytest

# ./run-tests installs ray[serve] (the test extra): a missing one fails here, it never skips
import ray.serve.autoscaling_policy as ray_policy

from llmscale.policies.ray_serve import RayServeConfig, decide_replicas, time_weighted_mean

pytestmark = pytest.mark.peers


class FakeTime:
    """Stands in for the ``time`` module inside Ray's policy: ``time()`` is the scripted clock."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def time(self) -> float:
        return self.now_s


def offered(now_s: float) -> float:
    """Ongoing requests over the script: a ramp, a burst, a lull to zero, then load again."""
    if now_s < 60.0:
        return 1.0 + now_s / 10.0  # 1 -> 7
    if now_s < 120.0:
        return 30.0
    if now_s < 200.0:
        return 3.0
    if now_s < 900.0:
        return 0.0
    return 9.0


@pytest.mark.parametrize(
    ("min_replicas", "up_factor", "down_factor", "to_zero_s"),
    [
        pytest.param(1, 1.0, 1.0, None, id="defaults"),
        pytest.param(0, 1.0, 1.0, 60.0, id="scale-to-zero-and-cold-start"),
        pytest.param(0, 0.5, 0.3, 120.0, id="gain-factors"),
    ],
)
def test_decisions_equal_rays_on_scripted_ticks(monkeypatch, min_replicas, up_factor, down_factor, to_zero_s):
    from ray.serve._private.autoscaling_state import _apply_autoscaling_config, _resolve_policy_callable
    from ray.serve._private.common import DeploymentID
    from ray.serve.config import AutoscalingConfig, AutoscalingContext

    clock = FakeTime()
    monkeypatch.setattr(ray_policy, "time", clock)
    config = AutoscalingConfig(
        min_replicas=min_replicas,
        max_replicas=20,
        target_ongoing_requests=2.0,
        upscale_delay_s=30.0,
        downscale_delay_s=600.0,
        downscale_to_zero_delay_s=to_zero_s,
        upscaling_factor=up_factor,
        downscaling_factor=down_factor,
    )
    ray_decide = _apply_autoscaling_config(_resolve_policy_callable(config.policy))
    ours_cfg = RayServeConfig(
        target_ongoing_requests=2.0,
        upscale_delay_s=30.0,
        downscale_delay_s=600.0,
        downscale_to_zero_delay_s=to_zero_s,
        upscaling_factor=up_factor,
        downscaling_factor=down_factor,
        min_replicas=min_replicas,
        max_replicas=20,
    )

    # Ray's control loop: 0.1 s steps accumulated in floats (their error is what the 1e-6 s
    # tolerance absorbs). Replicas take 20 s to start. Every replica is gone between 300 and 330 s
    # (no load) and between 925 and 935 s, in the middle of a scale-up run that began at 900 s:
    # Ray's cold-start path keeps that run, so the scale-up is due as the replica returns.
    target, ray_state = max(1, min_replicas), {}
    direction, since = 0, None
    history: list[tuple[float, int]] = []
    now_s, mismatches, changes = 0.0, [], 0
    while now_s < 1500.0:
        # running: the target of 20 s ago, never above the current one (a scale-down stops at once)
        started = [n for t, n in history if t <= now_s - 20.0]
        running = min(started[-1] if started else target, target)
        if 300.0 <= now_s < 330.0 or 925.0 <= now_s < 935.0:
            running = 0
        total = offered(now_s)

        clock.now_s = now_s
        ctx = AutoscalingContext(
            deployment_id=DeploymentID(name="llm"),
            deployment_name="llm",
            app_name="app",
            current_num_replicas=running,
            target_num_replicas=target,
            running_replicas=[],
            total_num_requests=total,
            total_queued_requests=None,
            aggregated_metrics=None,
            raw_metrics=None,
            capacity_adjusted_min_replicas=min_replicas,
            capacity_adjusted_max_replicas=20,
            policy_state=dict(ray_state),
            last_scale_up_time=None,
            last_scale_down_time=None,
            current_time=now_s,
            config=config,
        )
        ray_n, ray_state = ray_decide(ctx)
        ray_n = max(min_replicas, min(20, math.ceil(ray_n)))
        ours_n, _, direction, since = decide_replicas(
            ours_cfg, total, running, target, direction, since, now_s
        )
        if ours_n != ray_n:
            mismatches.append((round(now_s, 1), running, target, total, ours_n, ray_n))
        if ray_n != target:
            changes += 1
            target = ray_n
            history.append((now_s, target))
        now_s += 0.1
    assert mismatches == []
    assert changes >= 3  # the script went up, down and back: the comparison saw every path


def test_look_back_mean_equals_rays_time_weighted_average():
    from ray.serve._private.metrics_utils import TimeStampedValue, time_weighted_average

    rng = random.Random(7)
    for _ in range(200):
        t, samples = rng.uniform(0, 100), []
        for _ in range(rng.randint(1, 8)):
            samples.append((t, float(rng.randint(0, 50))))
            t += rng.choice((6.0, 6.0, 0.5, 3.0))
        now_s = samples[-1][0] + rng.choice((0.0, 0.1, 4.0, 9.9))
        series = [TimeStampedValue(ts, v) for ts, v in samples]
        last_window_s = now_s - samples[-1][0]
        theirs = time_weighted_average(series, None, None, last_window_s if last_window_s > 0 else 1e-3)
        assert time_weighted_mean(samples, now_s) == pytest.approx(theirs, rel=1e-12)
