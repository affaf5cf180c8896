"""Seed 003 3.1's node checks at their boundaries, and the simulated node's readings."""

from __future__ import annotations

import math

import pytest

from llmscale.errors import ConfigError
from llmscale.tenancy.node_checks import MIN_FREE_MEMORY_BYTES, NodeSample, NodeThresholds, check_node
from llmscale.tenancy.node_model import NodeBackground, NodeSpec, node_sample

MIB = 2**20
OK = NodeSample(64 * 2**30, 0.0, 0.0)


@pytest.mark.parametrize(
    ("sample", "failed"),
    [
        pytest.param(OK, (), id="healthy"),
        pytest.param(NodeSample(2048 * MIB + 1, 0.0, 0.0), (), id="memory 2048 MiB + 1 B > 2048 MiB: passes"),
        pytest.param(
            NodeSample(2048 * MIB, 0.0, 0.0),
            ("free_memory 2,048 MiB <= 2,048 MiB",),
            id="memory = 2048 MiB: fails",
        ),
        pytest.param(NodeSample(OK.free_memory_bytes, 0.0999, 0.0), (), id="cpu 9.99% < 10%: passes"),
        pytest.param(
            NodeSample(OK.free_memory_bytes, 0.1, 0.0), ("cpu_throttled 10.0% >= 10%",), id="cpu = 10%: fails"
        ),
        pytest.param(NodeSample(OK.free_memory_bytes, 0.0, 0.6999), (), id="disk 69.99% < 70%: passes"),
        pytest.param(
            NodeSample(OK.free_memory_bytes, 0.0, 0.7), ("disk_io 70.0% >= 70%",), id="disk = 70%: fails"
        ),
        pytest.param(
            NodeSample(1024 * MIB, 0.25, 0.9),
            ("free_memory 1,024 MiB <= 2,048 MiB", "cpu_throttled 25.0% >= 10%", "disk_io 90.0% >= 70%"),
            id="all three fail, all three named",
        ),
        pytest.param(
            NodeSample(None, math.nan, None),
            ("free_memory: no data", "cpu_throttled: no data", "disk_io: no data"),
            id="no data holds",
        ),
    ],
)
def test_check_node_boundaries(sample: NodeSample, failed: tuple[str, ...]) -> None:
    assert check_node(sample) == failed


def test_seed_threshold_is_2048_mib() -> None:
    assert MIN_FREE_MEMORY_BYTES == 2_147_483_648
    with pytest.raises(ConfigError, match="max_disk_io_util = 0"):
        NodeThresholds(max_disk_io_util=0.0)


def test_loading_replicas_fill_the_disk() -> None:
    """Each loading replica reads 1.77 GB/s of a 6.9 GB/s drive: 0.257, 0.514, 0.771 -> the 4th is held."""
    spec = NodeSpec()
    utils = [node_sample(spec, 0, 4, k, 0.0).disk_io_util for k in (1, 2, 3)]
    assert utils == pytest.approx([0.2570, 0.5140, 0.7710], abs=5e-4)
    assert [bool(check_node(node_sample(spec, 0, 4, k, 0.0))) for k in (0, 1, 2, 3)] == [
        False,
        False,
        False,
        True,
    ]


def test_host_memory_and_background() -> None:
    """A 96 GiB node, 64 GiB for the OS, 8 GiB a replica: 3 replicas leave 8 GiB, 4 leave 0."""
    spec = NodeSpec(memory_gib=96.0)
    assert node_sample(spec, 0, 3, 0, 0.0).free_memory_bytes == 8 * 2**30
    assert check_node(node_sample(spec, 0, 4, 0, 0.0)) == ("free_memory 0 MiB <= 2,048 MiB",)
    noisy = (NodeBackground(node=0, from_s=100.0, to_s=200.0, cpu_throttled_ratio=0.15),)
    assert check_node(node_sample(NodeSpec(), 0, 1, 0, 99.9, noisy)) == ()
    assert check_node(node_sample(NodeSpec(), 0, 1, 0, 100.0, noisy)) == ("cpu_throttled 15.0% >= 10%",)
    assert check_node(node_sample(NodeSpec(), 1, 1, 0, 150.0, noisy)) == ()  # another node
    assert check_node(node_sample(NodeSpec(), 0, 1, 0, 200.0, noisy)) == ()  # window is [from, to)
