"""Did a request meet its SLO: the rule, written once.

A request met the SLO when it **completed**, its time to first token is **within its TTFT
target** (a NaN TTFT, no first token, fails) and its time per output token is **within the TPOT
target or undefined** (NaN: a one-token answer has no time between tokens, so nothing to miss).

The two halves are :func:`ttft_within` and :func:`tpot_within`, each one comparison that means
the same on a Python float and, element by element, on a numpy array: IEEE 754 makes every
comparison with NaN false in both, and ``x != x`` is true exactly for NaN. :func:`request_met`
judges one request (the Python loops of the oracle's judge, which look at requests still in a
replica); :func:`slo_met` judges arrays, one element per request, by evaluating the *same*
functions on the arrays — one vectorised pass, not a second copy of the rule. Calling the scalar
form per element instead would cost ~0.3 us x 232,624 requests = ~70 ms per judgement of the
default hour, and the oracle's search judges hundreds of trial fleets.

Why nothing in the compiled simulator judges requests: ``Fleet.tally`` (sim/fleet.py), a native
loop with *one* TTFT target for every request, was the oracle's trial verdict until the
whole-trace search (commit 4bddb29) moved that verdict to
:meth:`llmscale.backtest.oracle_judge.Judge.outcomes`, which calls :func:`slo_met` with each
request's length-aware target. ``tally`` then had no caller left; it was removed rather than kept
in step, since a copy with a scalar target is exactly the one that would disagree with the final
score under ``--slo-ttft-per-1k-tokens-s`` (the oracle would optimise one rule and be scored on
another). No hot path needs a per-request verdict in native code: the array form is numpy's.

Pinned by tests/backtest/test_slo_rule.py: the scalar and the array form agree on random arrays with NaN,
infinities and ties; the oracle's trial verdict equals the final score on a length-aware SLO; and
no module outside this one compares a TTFT or TPOT with its SLO target.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, overload

from llmscale.types import Status

if TYPE_CHECKING:
    import numpy as np

__all__ = ["request_met", "slo_met", "tpot_within", "ttft_target_s", "ttft_within"]


@overload
def ttft_within(ttft_s: float, target_s: float) -> bool: ...
@overload
def ttft_within(ttft_s: np.ndarray, target_s: float | np.ndarray) -> np.ndarray: ...
def ttft_within(ttft_s: Any, target_s: Any) -> Any:
    """TTFT within its target (s); NaN (no first token yet, or ever) is not."""
    return ttft_s <= target_s


@overload
def tpot_within(tpot_s: float, target_s: float) -> bool: ...
@overload
def tpot_within(tpot_s: np.ndarray, target_s: float) -> np.ndarray: ...
def tpot_within(tpot_s: Any, target_s: Any) -> Any:
    """TPOT within its target (s), or undefined (NaN: one output token, no gap between tokens)."""
    return (tpot_s <= target_s) | (tpot_s != tpot_s)  # x != x: NaN, for a float and an array


def _met(status: Any, ttft_s: Any, tpot_s: Any, ttft_target_s: Any, tpot_target_s: Any) -> Any:
    """The rule: completed, TTFT within its target, TPOT within its target or undefined.

    ``&`` rather than ``and``: it is the same on bools and, element by element, on numpy arrays
    (``and`` would ask an array for one truth value).
    """
    completed = status == Status.COMPLETED
    return completed & ttft_within(ttft_s, ttft_target_s) & tpot_within(tpot_s, tpot_target_s)


def request_met(
    status: int, ttft_s: float, tpot_s: float, ttft_target_s: float, tpot_target_s: float
) -> bool:
    """Whether one request met the SLO: its :class:`~llmscale.types.Status` code, its TTFT
    and TPOT (s, NaN when undefined) and its two targets (s)."""
    return bool(_met(status, ttft_s, tpot_s, ttft_target_s, tpot_target_s))


def slo_met(
    status: np.ndarray,
    ttft_s: np.ndarray,
    tpot_s: np.ndarray,
    slo_ttft_s: float | np.ndarray,
    slo_tpot_s: float,
) -> np.ndarray:
    """Boolean per request: :func:`request_met` over arrays of status codes, TTFTs and TPOTs.

    ``slo_ttft_s`` is one target or one per request (a length-aware SLO: :func:`ttft_target_s`).
    """
    met: np.ndarray = _met(status, ttft_s, tpot_s, slo_ttft_s, slo_tpot_s)
    return met


def ttft_target_s(
    prompt_tokens: np.ndarray | float, slo_ttft_s: float, per_1k_tokens_s: float
) -> np.ndarray | float:
    """Each request's TTFT target: ``slo_ttft_s + per_1k_tokens_s x prompt / 1000`` (s).

    A length-aware SLO: at 2 s + 0.5 s per 1,000 tokens a 6,000-token prompt may wait 5 s for its
    first token. With ``per_1k_tokens_s`` 0 it is the scalar ``slo_ttft_s``, one target for every
    request, so that comparisons against it stay a broadcast of one number. The controller holds a
    fleet's P99 to the target of the window's mean prompt (a float in, a float out).
    """
    if per_1k_tokens_s == 0.0:
        return slo_ttft_s
    if isinstance(prompt_tokens, float | int):
        return slo_ttft_s + per_1k_tokens_s * prompt_tokens / 1000.0
    import numpy as np

    target: np.ndarray = slo_ttft_s + per_1k_tokens_s * np.asarray(prompt_tokens, dtype=np.float64) / 1000.0
    return target
