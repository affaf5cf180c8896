"""A pool of MIG-partitioned GPUs shared by tenants, and the admission of a tenant's scale-up.

A scale-up of ``k`` replicas of profile ``P`` is admitted only as far as three
limits allow, checked for each new replica in turn:

1. **quota**: the tenant's quota of ``P`` instances (as a Kubernetes
   ResourceQuota on ``requests.nvidia.com/mig-3g.40gb``, the GPU operator's
   mixed-strategy resource name), counting every replica it holds, draining
   ones included (a draining pod still holds its device);
2. **pool**: a free placement of ``P`` on some GPU (a ``3g`` needs memory slices
   0-3 or 4-7 free on one GPU: free slices scattered over GPUs do not add up);
3. **node**: that GPU's node passes seed 003 3.1's checks
   (:func:`~llmscale.tenancy.node_checks.check_node`).

The decision record names the limit that held the rest (``held_by``), with
each limit's room: e.g. 3 asked, quota room 2, pool room 1 -> 1 admitted,
held by ``pool``. When several limits bind at the same count the tenant's own
(quota) is named first, then the pool, then the node.

Where a new instance goes: the fullest GPU that fits it (best fit, so whole
GPUs stay free for 7g tenants), and on that GPU the highest start, because the
larger profiles may only start low (``4g``/``7g`` only at 0). E.g. a 3g on an
empty H100 takes slices 4-7 and leaves 0-3 for a 4g.40gb.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from llmscale.errors import ConfigError
from llmscale.perf.mig import MigGpu, MigProfile, Placement, SlicedGpu, get_mig_gpu

__all__ = ["Admission", "MigPool", "admit"]


class MigPool:
    """``num_gpus`` GPUs of one MIG-capable model, ``gpus_per_node`` to a node."""

    def __init__(self, gpu: str, num_gpus: int, gpus_per_node: int = 8) -> None:
        if num_gpus < 1:
            raise ConfigError(f"pool gpus = {num_gpus}, must be >= 1")
        if gpus_per_node < 1:
            raise ConfigError(f"pool gpus_per_node = {gpus_per_node}, must be >= 1")
        self.mig: MigGpu = get_mig_gpu(gpu)
        self.gpus = [SlicedGpu(self.mig) for _ in range(num_gpus)]
        self.gpus_per_node = gpus_per_node

    @property
    def num_nodes(self) -> int:
        return -(-len(self.gpus) // self.gpus_per_node)

    def node_of(self, gpu_index: int) -> int:
        return gpu_index // self.gpus_per_node

    def profile(self, name: str) -> MigProfile:
        return self.mig.profile(name)

    def find(self, profile: MigProfile, nodes: frozenset[int] | None = None) -> Placement | None:
        """Where one more ``profile`` instance would go (on ``nodes`` only, when given), or None."""
        best: tuple[int, int, int] | None = None
        for i, g in enumerate(self.gpus):
            if nodes is not None and self.node_of(i) not in nodes:
                continue
            starts = list(g.free_starts(profile))
            if not starts:
                continue
            key = (g.free_memory_slices, -max(starts), i)
            if best is None or key < best:
                best = key
        if best is None:
            return None
        _, neg_start, i = best
        return Placement(i, -neg_start, profile.name)

    def take(self, placement: Placement) -> None:
        self.gpus[placement.gpu].take(self.profile(placement.profile), placement.start)

    def release(self, placement: Placement) -> None:
        self.gpus[placement.gpu].free(self.profile(placement.profile), placement.start)

    def room(self, profile: MigProfile, up_to: int, nodes: frozenset[int] | None = None) -> list[Placement]:
        """Placements for up to ``up_to`` more instances, chosen one after another (the pool is unchanged)."""
        chosen: list[Placement] = []
        try:
            for _ in range(up_to):
                p = self.find(profile, nodes)
                if p is None:
                    break
                self.take(p)
                chosen.append(p)
        finally:
            for p in chosen:
                self.release(p)
        return chosen

    def occupancy(self) -> list[str]:
        """Each GPU's memory slices, slice 0 first: ``"3333...."`` = a 3g at 0-3, 4-7 free."""
        out = []
        for g in self.gpus:
            row = ["."] * 8
            for start, name in g.instances.items():
                p = self.mig.profile(name)
                for s in range(start, start + p.memory_slices):
                    row[s] = name[0]
            out.append("".join(row))
        return out


@dataclass(frozen=True)
class Admission:
    """The pool's answer to a tenant asking for ``requested`` new replicas of ``profile``."""

    profile: str
    requested: int
    admitted: int
    #: "quota", "pool", "node" or None (all admitted)
    held_by: str | None
    #: instances the quota still allows (quota - held)
    quota_room: int
    #: instances with a free placement anywhere, counted up to ``requested``
    pool_room: int
    #: ... on nodes that pass their checks, up to ``requested`` (the quota aside)
    node_room: int
    placements: tuple[Placement, ...] = ()
    #: node index -> the checks it failed (only nodes with a free placement of the profile)
    node_failures: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "requested": self.requested,
            "admitted": self.admitted,
            "held": self.requested - self.admitted,
            "held_by": self.held_by,
            "room": {"quota": self.quota_room, "pool": self.pool_room, "node": self.node_room},
            "placements": [f"gpu{p.gpu}@{p.start}" for p in self.placements],
            "node_failures": {f"node{n}": list(f) for n, f in self.node_failures.items()},
            "note": self.note,
        }


def quota_room_of(quota: int, held: int) -> int:
    """New instances a tenant's quota still allows: a ResourceQuota on ``nvidia.com/mig-<profile>``
    counts every pod holding one, draining ones included (quota 2, 2 held: none)."""
    return max(0, quota - held)


def quota_note(profile: str, quota: int, held: int) -> str:
    """What a decision line says of a scale-up the quota held."""
    return f"quota: {held} of {quota} {profile} held, room for {quota_room_of(quota, held)}"


def admit(
    pool: MigPool,
    profile_name: str,
    requested: int,
    *,
    quota: int,
    held: int,
    node_failures: Mapping[int, tuple[str, ...]],
) -> Admission:
    """Admit up to ``requested`` new instances of ``profile_name`` and take their placements.

    ``held``: instances the tenant holds now; ``quota``: most it may hold;
    ``node_failures``: node -> checks it fails now (a node absent or mapped to ()
    passes). The pool is changed only by the admitted placements.
    """
    if requested < 0:
        raise ConfigError(f"requested = {requested}, must be >= 0")
    profile = pool.profile(profile_name)
    quota_room = quota_room_of(quota, held)
    pool_room = len(pool.room(profile, requested))
    healthy = frozenset(n for n in range(pool.num_nodes) if not node_failures.get(n))
    chosen = pool.room(profile, min(requested, quota_room), healthy)
    node_room = len(pool.room(profile, requested, healthy))
    admitted = len(chosen)
    for p in chosen:
        pool.take(p)
    held_by: str | None = None
    failing: dict[int, tuple[str, ...]] = {}
    if admitted < requested:
        if quota_room == admitted:
            held_by = "quota"
        elif pool_room == admitted:
            held_by = "pool"
        else:
            held_by = "node"
    if held_by == "node":
        for n in sorted(set(range(pool.num_nodes)) - healthy):
            if pool.room(profile, 1, frozenset({n})):
                failing[n] = tuple(node_failures[n])
    if held_by is None:
        note = f"{admitted} x {profile.name} admitted" if requested else ""
    elif held_by == "quota":
        note = quota_note(profile.name, quota, held)
    elif held_by == "pool":
        note = f"pool: a free {profile.name} placement for {pool_room} of {requested}"
    else:
        why = "; ".join(f"node{n}: {', '.join(f)}" for n, f in failing.items())
        note = f"node check: {why}"
    return Admission(
        profile.name,
        requested,
        admitted,
        held_by,
        quota_room,
        pool_room,
        node_room,
        tuple(chosen),
        failing,
        note,
    )
