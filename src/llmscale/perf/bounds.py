"""One physical bound for every efficiency: no step may outrun its GPU's data sheet.

Each fitted efficiency of :class:`~llmscale.perf.coefficients.PerfCoefficients` is a fraction
of a data-sheet peak (dense BF16 FLOP/s, HBM bytes/s), and a calibration factor multiplies
some of them (:func:`llmscale.perf.profile.scale_coefficients`). A fraction above 1 would be
a GPU faster than its data sheet, and the simulator's DCGM counters
(:mod:`llmscale.sim.gpu_counters`) cannot express it. ``llmscale calibrate`` bounds its fit
with :func:`factor_ceilings`; a profile that breaks the bound is refused when it is loaded
(:func:`check_physical`, a :class:`~llmscale.errors.ConfigError` naming the factor); the
simulator's counters check the same function. One function, three callers.

Worked on the committed coefficients, H100: the serving FLOP rate is gemm 0.688 x serving
scale 0.970 = 0.668 of peak, so ``compute`` may reach 1 / 0.668 = 1.498; the weight stream
reaches 0.878 of peak HBM bandwidth, so ``bandwidth`` may reach 1.139. On A100 (serving
scale 1.218, gemm 0.717: 0.874 of peak) ``compute`` may reach 1.144. A GPU whose board power
differs from its family's reference runs another clock (GH200: x1.126, llmscale.perf.step_time);
the step's FLOP rate is capped at the data sheet there. Tested in tests/perf/test_bounds.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from llmscale.errors import ConfigError
from llmscale.perf.coefficients import FamilyCoefficients, PerfCoefficients

__all__ = ["PeakShare", "check_physical", "factor_ceilings", "peak_shares"]


class PeakShare(NamedTuple):
    """One efficiency as a fraction of its data-sheet peak, and the factors that scale it."""

    #: the coefficient (or product) as the fit names it
    coefficient: str
    #: which peak: "FLOP rate" or "HBM bandwidth"
    peak: str
    #: the calibration factors multiplying it (all of them multiply)
    factors: tuple[str, ...]
    #: fraction of peak (1.0 = the data sheet)
    share: float


_Get = Callable[[PerfCoefficients, FamilyCoefficients], float]
#: (coefficient, peak, factors) of every efficiency the step-time model divides a peak by.
_SHARES: tuple[tuple[str, str, tuple[str, ...], _Get], ...] = (
    (
        "gemm_flops_eff x serving_flops_scale",
        "FLOP rate",
        ("compute",),
        lambda c, f: f.gemm_flops_eff * f.serving_flops_scale,
    ),
    ("attn_prefill_flops_eff", "FLOP rate", ("compute",), lambda c, f: c.attn_prefill_flops_eff),
    ("weight_bw_eff", "HBM bandwidth", ("bandwidth",), lambda c, f: f.weight_bw_eff),
    ("act_bw_eff", "HBM bandwidth", ("bandwidth",), lambda c, f: f.act_bw_eff),
    ("attn_kv_bw_eff", "HBM bandwidth", ("bandwidth", "kv"), lambda c, f: c.attn_kv_bw_eff),
)


def peak_shares(c: PerfCoefficients, family: str) -> list[PeakShare]:
    """Every efficiency of ``c`` on GPU ``family`` as a fraction of its peak."""
    fam = c.family(family)
    return [PeakShare(name, peak, factors, get(c, fam)) for name, peak, factors, get in _SHARES]


def factor_ceilings(
    base: PerfCoefficients, families: Iterable[str], factors: Mapping[str, float] | None = None
) -> dict[str, float]:
    """The largest value of each rate factor that keeps every step within the data sheet.

    ``base`` is the unscaled (committed) coefficients; ``factors`` the other factors' values
    (missing: 1), since ``bandwidth`` and ``kv`` multiply the same KV efficiency. On every
    family in ``families``. H100, committed: compute 1.498, bandwidth 1.139, kv 1.290.
    """
    given = dict(factors or {})
    out: dict[str, float] = {}
    for fam in families:
        for s in peak_shares(base, fam):
            for name in s.factors:
                others = 1.0
                for o in s.factors:
                    if o != name:
                        others *= float(given.get(o, 1.0))
                cap = 1.0 / (s.share * others)
                out[name] = min(out.get(name, cap), cap)
    return out


def check_physical(
    base: PerfCoefficients, factors: Mapping[str, float], families: Iterable[str], where: str
) -> None:
    """Raise :class:`ConfigError` if ``factors`` make any efficiency beat its data-sheet peak.

    The message names ``where`` (a profile file), the factor, its value and its ceiling.
    """
    for fam in families:
        for s in peak_shares(base, fam):
            scale = 1.0
            for name in s.factors:
                scale *= float(factors.get(name, 1.0))
            if s.share * scale > 1.0 + 1e-9:
                given = [n for n in s.factors if n in factors]
                if not given:  # coefficients scaled elsewhere: name the factors that scale it
                    raise ConfigError(
                        f"{where}: {s.coefficient} is {s.share * scale:.3f} of the {fam} family's "
                        f"data-sheet {s.peak} (at most 1; scaled by the factor "
                        f"{' and '.join(s.factors)}): a step cannot outrun its GPU"
                    )
                names = " x ".join(f"{n} = {float(factors[n]):.4g}" for n in given)
                ceiling = factor_ceilings(base, [fam], factors)
                caps = ", ".join(f"{n} <= {ceiling[n]:.4g}" for n in given)
                raise ConfigError(
                    f"{where}: {names} make {s.coefficient} {s.share * scale:.3f} of the "
                    f"{fam} family's data-sheet {s.peak} (at most 1: {caps}); a step cannot "
                    "outrun its GPU"
                )
