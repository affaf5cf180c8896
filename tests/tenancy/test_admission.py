"""The MIG admission table: requests vs free placements vs quota vs node checks -> admitted / held by."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from llmscale.perf.mig import Placement
from llmscale.tenancy.pool import MigPool, admit

DISK = ("disk_io 77.1% >= 70%",)


@dataclass(frozen=True)
class Row:
    gpu: str
    gpus: int
    #: instances other tenants hold: (gpu, start, profile)
    taken: tuple[tuple[int, int, str], ...]
    profile: str
    requested: int
    quota: int
    held: int
    failing_nodes: dict[int, tuple[str, ...]]
    admitted: int
    held_by: str | None
    rooms: tuple[int, int, int]  # quota, pool, node
    placements: tuple[str, ...] | None = None


# One GPU per node, so node i is GPU i.
TABLE = [
    pytest.param(
        Row("h100-80gb", 1, (), "3g.40gb", 2, 4, 0, {}, 2, None, (4, 2, 2), ("gpu0@4", "gpu0@0")),
        id="empty H100: two 3g, the first at slices 4-7 (0 stays free for a 4g)",
    ),
    pytest.param(
        Row("h100-80gb", 1, ((0, 0, "4g.40gb"),), "3g.40gb", 1, 4, 0, {}, 1, None, (4, 1, 1), ("gpu0@4",)),
        id="4g at 0-3 leaves 4-7: a 3g fits",
    ),
    pytest.param(
        Row(
            "h100-80gb",
            1,
            ((0, 3, "1g.10gb"), (0, 4, "1g.10gb")),
            "3g.40gb",
            1,
            4,
            0,
            {},
            0,
            "pool",
            (4, 0, 0),
        ),
        id="6 of 8 memory slices free, 5 of 7 compute, but neither 3g position: pool",
    ),
    pytest.param(
        Row(
            "h100-80gb", 2, ((0, 3, "1g.10gb"), (1, 4, "1g.10gb")), "3g.40gb", 2, 4, 0, {}, 2, None, (4, 2, 2)
        ),
        id="each GPU keeps one 3g position: two admitted",
    ),
    pytest.param(
        Row("h100-80gb", 2, (), "3g.40gb", 1, 2, 2, {}, 0, "quota", (0, 1, 1)),
        id="quota 2 already held: quota",
    ),
    pytest.param(
        Row("h100-80gb", 2, (), "3g.40gb", 3, 3, 2, {}, 1, "quota", (1, 3, 3)),
        id="3 asked, quota room 1, pool room 3: one admitted, quota",
    ),
    pytest.param(
        Row("h100-80gb", 1, ((0, 0, "4g.40gb"),), "3g.40gb", 3, 8, 0, {}, 1, "pool", (8, 1, 1)),
        id="3 asked, quota room 8, pool room 1: one admitted, pool",
    ),
    pytest.param(
        Row("h100-80gb", 1, (), "3g.40gb", 2, 1, 0, {}, 1, "quota", (1, 2, 2)),
        id="quota and pool both short of 2 at 1 and 2: quota (the tenant's own limit first)",
    ),
    pytest.param(
        Row("h100-80gb", 2, ((0, 0, "7g.80gb"),), "3g.40gb", 1, 4, 0, {1: DISK}, 0, "node", (4, 1, 0)),
        id="the only free 3g is on a node whose disk is busy: node",
    ),
    pytest.param(
        Row("h100-80gb", 2, (), "3g.40gb", 1, 4, 0, {0: DISK}, 1, None, (4, 1, 1), ("gpu1@4",)),
        id="node 0 fails its checks, node 1 takes the slice",
    ),
    pytest.param(
        Row("h100-80gb", 1, ((0, 6, "1g.10gb"),), "7g.80gb", 1, 1, 0, {}, 0, "pool", (1, 0, 0)),
        id="one 1g anywhere blocks a 7g: pool",
    ),
    pytest.param(
        Row("h100-80gb", 1, (), "1g.10gb", 8, 10, 0, {}, 7, "pool", (10, 7, 7)),
        id="eight 1g.10gb asked, seven placements: pool",
    ),
    pytest.param(
        Row("h100-80gb", 1, (), "1g.20gb", 5, 10, 0, {}, 4, "pool", (10, 4, 4)),
        id="1g.20gb spans 2 memory slices: four per GPU",
    ),
    pytest.param(
        Row("a100-40gb", 1, ((0, 0, "4g.20gb"),), "1g.5gb", 4, 4, 0, {}, 3, "pool", (4, 3, 3)),
        id="A100-40GB 4g at 0-3: three 1g.5gb at 4, 5, 6 (slice 7 has no compute)",
    ),
    pytest.param(
        Row("h100-80gb", 2, ((0, 4, "3g.40gb"),), "3g.40gb", 1, 4, 0, {}, 1, None, (4, 1, 1), ("gpu0@0",)),
        id="best fit: the half-used GPU takes it, GPU 1 stays whole for a 7g",
    ),
]


@pytest.mark.parametrize("row", TABLE)
def test_admission_table(row: Row) -> None:
    pool = MigPool(row.gpu, row.gpus, gpus_per_node=1)
    for gpu, start, profile in row.taken:
        pool.take(Placement(gpu, start, profile))
    before = pool.occupancy()
    a = admit(
        pool, row.profile, row.requested, quota=row.quota, held=row.held, node_failures=row.failing_nodes
    )
    assert (a.admitted, a.held_by) == (row.admitted, row.held_by)
    assert (a.quota_room, a.pool_room, a.node_room) == row.rooms
    if row.placements is not None:
        assert a.as_json()["placements"] == list(row.placements)
    # Exactly the admitted placements were taken, nothing else changed.
    used = lambda occ: sum(c != "." for c in "".join(occ))  # noqa: E731
    assert used(pool.occupancy()) - used(before) == a.admitted * pool.profile(row.profile).memory_slices
    if row.held_by == "node":
        assert a.node_failures == {n: f for n, f in row.failing_nodes.items()}
        assert "disk_io 77.1% >= 70%" in a.note


def test_release_frees_the_placement() -> None:
    pool = MigPool("h100-80gb", 1)
    a = admit(pool, "3g.40gb", 2, quota=2, held=0, node_failures={})
    assert pool.occupancy() == ["33333333"]
    pool.release(a.placements[0])
    assert pool.occupancy() == ["3333...."]
    b = admit(pool, "4g.40gb", 1, quota=1, held=0, node_failures={})
    assert b.held_by == "pool"  # 4g only starts at 0, where the other 3g sits
