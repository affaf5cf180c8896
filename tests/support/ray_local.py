"""A local Ray instance for the tests that run work on a Ray cluster (``tune --ray``, ``backtest --ray``).

It is started in the test's process, bound to 127.0.0.1 with 2 CPUs and no dashboard; the
command under test runs as a separate process and connects to it by address, as a user's would
to a cluster. ``ray.shutdown()`` then ends the processes the instance started, and only those.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

#: Ray replaces a loopback address with the machine's own "remotely reachable" one, unless it is
#: told that this is no cluster (ray._private.ray_constants.ENABLE_RAY_CLUSTER, read from this
#: variable at import): then every part of the local instance stays on 127.0.0.1.
LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def local_ray(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Body of a fixture: yields the instance's ``address`` and ``node_id``."""
    import ray
    from ray._private import ray_constants

    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    for key, value in LOOPBACK_ONLY.items():
        monkeypatch.setenv(key, value)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        object_store_memory=100 * 1024 * 1024,
        log_to_driver=False,
    )
    try:
        ctx = ray.get_runtime_context()
        yield {"address": ctx.gcs_address, "node_id": ctx.get_node_id()}
    finally:
        ray.shutdown()
