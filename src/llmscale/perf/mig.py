"""NVIDIA MIG profiles as facts, their placement on a GPU, and a slice's performance.

Facts, from NVIDIA's Multi-Instance GPU User Guide ("Supported MIG Profiles",
https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html)
and the driver's own listings (``nvidia-smi mig -lgip`` for SMs and GiB,
``nvidia-smi mig -lgipp`` for placements), as printed by R525+ drivers:

* A MIG-capable GPU has 7 compute slices and 8 memory slices. A profile
  ``Ng.Mgb`` is N compute slices with M GB of memory; its memory slices carry
  the same share of the L2 cache, memory controllers and DRAM channels
  (the guide's "Fraction of Memory" column is also the L2 column).
* ``-lgipp`` lists where a profile may start, in memory slices, and how many it
  spans: on A100 and H100 ``1g`` ``{0..6}:1``, ``1g.20gb``/``1g.10gb`` (A100-40GB)
  ``{0,2,4,6}:2``, ``2g`` ``{0,2,4}:2``, ``3g`` ``{0,4}:4``, ``4g`` ``{0}:4``,
  ``7g`` ``{0}:8``. An instance's compute slices lie inside its memory span
  (``Ng`` at start s uses compute slices s..s+N-1 and N <= span), so two
  instances that do not overlap in memory slices never overlap in compute:
  occupancy of the 8 memory slices is the whole placement rule. The guide's
  "Number of Instances Available" is then the count of disjoint placements
  (7 / 4 / 3 / 2 / 1 / 1), which ``tests/tenancy/test_mig.py`` checks.
* A slice has no NVLink or PCIe peer-to-peer (``P2P: No`` in ``-lgip``), so a
  replica on a slice runs at tensor parallelism 1.

What a slice is worth is derived, not fitted: see :func:`slice_gpu_spec`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Final

from llmscale.errors import ConfigError
from llmscale.perf.catalogue import GpuSpec, get_gpu

__all__ = [
    "MEMORY_SLICES",
    "MIG_GPUS",
    "SLICE_SEPARATOR",
    "MigGpu",
    "MigProfile",
    "Placement",
    "SlicedGpu",
    "get_mig_gpu",
    "gpu_share",
    "slice_gpu_spec",
    "split_slice_name",
]

#: memory slices of every MIG-capable GPU here (A100, H100): the ``:8`` of ``7g``'s ``{0}:8``
MEMORY_SLICES: Final = 8
#: ``h100-80gb:3g.40gb`` names a slice of a catalogue GPU wherever a GPU name is taken
SLICE_SEPARATOR: Final = ":"

_GIB: Final = 1024**3


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU-instance profile of one GPU model, as ``nvidia-smi mig -lgip`` / ``-lgipp`` list it."""

    name: str
    #: the N of ``Ng``: compute slices (GPCs), of 7
    compute_slices: int
    #: memory slices it spans, of 8 (the ``:size`` of its ``-lgipp`` placements)
    memory_slices: int
    #: streaming multiprocessors (``-lgip``'s SM column)
    sms: int
    #: device memory the instance reports (``-lgip``'s GiB column)
    memory_gib: float
    #: memory slices where an instance may start (``-lgipp``)
    starts: tuple[int, ...]

    @property
    def max_instances(self) -> int:
        """Instances of this profile alone on one GPU: its disjoint placements (1g: 7, 3g: 2)."""
        taken = 0
        count = 0
        for s in self.starts:
            span = ((1 << self.memory_slices) - 1) << s
            if not taken & span:
                taken |= span
                count += 1
        return count

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * _GIB)


@dataclass(frozen=True, slots=True)
class MigGpu:
    """A catalogue GPU (``gpu``) with its SM count outside MIG mode and its MIG profiles."""

    gpu: str
    #: SMs the catalogue's peak FLOP rate is quoted for (MIG off): A100 108, H100 SXM 132
    total_sms: int
    profiles: Mapping[str, MigProfile]

    def profile(self, name: str) -> MigProfile:
        key = name.strip().lower().removeprefix("mig-").removeprefix("mig ")
        p = self.profiles.get(key)
        if p is None:
            raise ConfigError(f"MIG profile {name!r} is not one of {self.gpu}'s: {', '.join(self.profiles)}")
        return p


def _profiles(*ps: MigProfile) -> Mapping[str, MigProfile]:
    return MappingProxyType({p.name: p for p in ps})


_ONE: Final = (0, 1, 2, 3, 4, 5, 6)
_PAIRS: Final = (0, 2, 4, 6)
_TWOS: Final = (0, 2, 4)
_HALVES: Final = (0, 4)

# A100-SXM4-40GB, `nvidia-smi mig -lgip` (MIG user guide's example; 108 SMs with MIG off, 98 in 7g):
# 1g.5gb 4.75 GiB 14 SM, 1g.10gb 9.75 GiB 14 SM (R525+), 2g.10gb 9.75 GiB 28 SM,
# 3g.20gb 19.62 GiB 42 SM, 4g.20gb 19.62 GiB 56 SM, 7g.40gb 39.50 GiB 98 SM.
_A100_40GB = MigGpu(
    "a100-40gb",
    108,
    _profiles(
        MigProfile("1g.5gb", 1, 1, 14, 4.75, _ONE),
        MigProfile("1g.10gb", 1, 2, 14, 9.75, _PAIRS),
        MigProfile("2g.10gb", 2, 2, 28, 9.75, _TWOS),
        MigProfile("3g.20gb", 3, 4, 42, 19.62, _HALVES),
        MigProfile("4g.20gb", 4, 4, 56, 19.62, (0,)),
        MigProfile("7g.40gb", 7, 8, 98, 39.50, (0,)),
    ),
)
# A100-SXM4-80GB, `nvidia-smi mig -lgip`: 1g.10gb 9.50 GiB 14 SM, 1g.20gb 19.50 GiB 14 SM,
# 2g.20gb 19.50 GiB 28 SM, 3g.40gb 39.25 GiB 42 SM, 4g.40gb 39.25 GiB 56 SM, 7g.80gb 79.00 GiB 98 SM.
_A100_80GB = MigGpu(
    "a100-80gb",
    108,
    _profiles(
        MigProfile("1g.10gb", 1, 1, 14, 9.50, _ONE),
        MigProfile("1g.20gb", 1, 2, 14, 19.50, _PAIRS),
        MigProfile("2g.20gb", 2, 2, 28, 19.50, _TWOS),
        MigProfile("3g.40gb", 3, 4, 42, 39.25, _HALVES),
        MigProfile("4g.40gb", 4, 4, 56, 39.25, (0,)),
        MigProfile("7g.80gb", 7, 8, 98, 79.00, (0,)),
    ),
)
# H100-SXM5-80GB, `nvidia-smi mig -lgip`: 1g.10gb 9.75 GiB 16 SM, 1g.20gb 19.62 GiB 26 SM,
# 2g.20gb 19.62 GiB 32 SM, 3g.40gb 39.50 GiB 60 SM, 4g.40gb 39.50 GiB 64 SM, 7g.80gb 79.25 GiB 132 SM.
_H100_80GB = MigGpu(
    "h100-80gb",
    132,
    _profiles(
        MigProfile("1g.10gb", 1, 1, 16, 9.75, _ONE),
        MigProfile("1g.20gb", 1, 2, 26, 19.62, _PAIRS),
        MigProfile("2g.20gb", 2, 2, 32, 19.62, _TWOS),
        MigProfile("3g.40gb", 3, 4, 60, 39.50, _HALVES),
        MigProfile("4g.40gb", 4, 4, 64, 39.50, (0,)),
        MigProfile("7g.80gb", 7, 8, 132, 79.25, (0,)),
    ),
)

MIG_GPUS: Final[Mapping[str, MigGpu]] = MappingProxyType(
    {g.gpu: g for g in (_A100_40GB, _A100_80GB, _H100_80GB)}
)


def get_mig_gpu(gpu: str) -> MigGpu:
    """The MIG facts of catalogue GPU ``gpu`` (any alias); ConfigError when it has none here."""
    name = get_gpu(gpu).name
    mg = MIG_GPUS.get(name)
    if mg is None:
        raise ConfigError(f"gpu = {gpu!r}: no MIG profiles known for {name}; MIG GPUs: {', '.join(MIG_GPUS)}")
    return mg


def split_slice_name(name: str) -> tuple[str, str] | None:
    """``"h100-80gb:3g.40gb"`` -> ``("h100-80gb", "3g.40gb")``; a plain GPU name -> None."""
    if SLICE_SEPARATOR not in name:
        return None
    gpu, _, profile = name.partition(SLICE_SEPARATOR)
    return gpu.strip(), profile.strip()


def gpu_share(gpu: str) -> float:
    """The share of a whole GPU a replica on ``gpu`` is billed for: a slice's compute slices / 7.

    A 3g.40gb slice of an H100 is 3/7 of the GPU's compute (the 7 compute slices MIG divides a
    GPU into), so an hour on it is 3/7 of a GPU-hour, as the tenants backtest counts it; a plain
    GPU name is 1. Without this a single-tenant backtest on ``--gpu h100-80gb:3g.40gb`` billed
    every slice as a whole GPU.
    """
    split = split_slice_name(gpu)
    if split is None:
        return 1.0
    parent, profile = split
    return get_mig_gpu(parent).profile(profile).compute_slices / 7.0


def slice_gpu_spec(gpu: str, profile: str) -> GpuSpec:
    """The data sheet of one MIG slice, for the step-time model (:class:`~llmscale.perf.PerfModel`).

    Why scaling the GPU's figures is the physics of a slice: MIG partitions the
    chip, it does not time-share it. A slice owns whole GPCs, so its tensor-core
    peak is the GPU's peak x its SMs / the GPU's SMs; it owns whole memory
    slices (their L2 banks, memory controllers and DRAM channels), so its HBM
    bandwidth is the GPU's x memory slices / 8; and it sees only its own memory.
    The fitted efficiencies stay the GPU family's (same SM, same HBM), and the
    host side (scheduling, sampling, kernel launches) is unchanged: a slice
    keeps a whole CPU process per replica. Worked numbers for an H100 3g.40gb:
    989 TFLOP/s x 60/132 = 449.5 TFLOP/s, 3.35 TB/s x 4/8 = 1.675 TB/s, 39.50
    GiB. A 7g.80gb of an A100 has 98 of 108 SMs: 9% less compute than the GPU
    with MIG off, the same bandwidth. No NVLink: ``nvlink_bandwidth_bytes_s``
    is 0 and a slice serves at TP 1.
    """
    g = get_gpu(gpu)
    mg = get_mig_gpu(g.name)
    p = mg.profile(profile)
    return replace(
        g,
        name=f"{g.name}{SLICE_SEPARATOR}{p.name}",
        aliases=(),
        peak_bf16_flops=g.peak_bf16_flops * p.sms / mg.total_sms,
        peak_fp8_flops=g.peak_fp8_flops * p.sms / mg.total_sms,
        hbm_bandwidth_bytes_s=g.hbm_bandwidth_bytes_s * p.memory_slices / MEMORY_SLICES,
        memory_bytes=p.memory_bytes,
        nvlink_bandwidth_bytes_s=0.0,
        # The board's power limit, not a share of it: a slice runs at the whole GPU's clock, and
        # the step-time model reads the clock from the board power (3g.40gb at 3/7 of 700 W would
        # clock 0.75x slower and turn 132/60 = 2.2x fewer SMs into a 2.5x slower prefill).
        tdp_w=g.tdp_w,
    )


@dataclass(frozen=True, slots=True)
class Placement:
    """An instance of ``profile`` on GPU ``gpu`` of a pool, starting at memory slice ``start``."""

    gpu: int
    start: int
    profile: str


@dataclass
class SlicedGpu:
    """Which of one GPU's 8 memory slices are taken (bit i = slice i)."""

    mig: MigGpu
    taken: int = 0
    instances: dict[int, str] = field(default_factory=dict)  # start -> profile name

    def span(self, p: MigProfile, start: int) -> int:
        return ((1 << p.memory_slices) - 1) << start

    def free_starts(self, p: MigProfile) -> Iterator[int]:
        for s in p.starts:
            if not self.taken & self.span(p, s):
                yield s

    def take(self, p: MigProfile, start: int) -> None:
        span = self.span(p, start)
        if start not in p.starts or self.taken & span:
            raise ConfigError(f"{p.name} cannot start at memory slice {start} (taken: {self.taken:08b})")
        self.taken |= span
        self.instances[start] = p.name

    def free(self, p: MigProfile, start: int) -> None:
        if self.instances.get(start) != p.name:
            raise ConfigError(f"no {p.name} instance at memory slice {start}")
        del self.instances[start]
        self.taken &= ~self.span(p, start)

    @property
    def free_memory_slices(self) -> int:
        return MEMORY_SLICES - bin(self.taken).count("1")
