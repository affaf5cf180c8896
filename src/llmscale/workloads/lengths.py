"""Request-length models: where ``input_tokens`` / ``output_tokens`` come from
when a trace has only arrivals (ServeGen) or a workload is synthetic.

Two implementations of one protocol, :class:`LengthModel`:

* :class:`LognormalLengths` - independent lognormals for prompt and output,
  clipped to ``[1, max_*_tokens]``; build it from log-space parameters, from
  means, or from a (mean, p99) pair in closed form (:func:`lognormal_from_mean_p99`);
* :class:`LengthSampler` - bootstrap of (input, output) *pairs* from measured
  lengths (the ``calibration/lengths/*.csv`` files, or any trace), which keeps
  the real correlation between prompt and answer length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from llmscale.errors import ConfigError, TraceFormatError
from llmscale.workloads import _io

__all__ = [
    "DEFAULT_LENGTHS",
    "LENGTH_CATEGORIES",
    "LengthModel",
    "LengthSampler",
    "LognormalLengths",
    "assumed_lengths_text",
    "lognormal_from_mean_p99",
    "parse_lengths",
]

IntArray = npt.NDArray[np.int64]


@runtime_checkable
class LengthModel(Protocol):
    """Anything that draws ``n`` (input_tokens, output_tokens) pairs from a Generator."""

    def sample(self, n: int, rng: np.random.Generator) -> tuple[IntArray, IntArray]:
        """``n`` prompt and output lengths, int64, each >= 1."""
        ...

    def describe(self) -> dict[str, object]:
        """JSON-able description for ``Workload.meta['lengths']``."""
        ...


def lognormal_from_mean_p99(
    mean_tokens: float, p99_tokens: float, *, quantile: float = 0.99
) -> tuple[float, float]:
    """Log-space ``(mu, sigma)`` of the lognormal with this mean and this upper quantile.

    With ``z = Phi^-1(quantile)`` (2.3263 for p99):
    ``ln(mean) = mu + sigma^2/2`` and ``ln(p99) = mu + z*sigma``; subtracting,
    ``sigma^2/2 - z*sigma + ln(p99/mean) = 0``, whose smaller root is
    ``sigma = z - sqrt(z^2 - 2*ln(p99/mean))`` (the larger root puts the median
    far above the mean: a degenerate heavy tail). A solution exists when
    ``p99 > mean`` and ``ln(p99/mean) <= z^2/2`` (p99/mean <= 14.97 for p99).

    Worked example, Azure conversation prompts (mean 1155, p99 4142):
    ``ln(4142/1155) = 1.2771``, ``sigma = 2.3263 - sqrt(5.4119 - 2.5542) = 0.6359``,
    ``mu = ln(1155) - 0.6359^2/2 = 7.0518 - 0.2022 = 6.8497`` (median 944 tokens).
    """
    if not (0 < quantile < 1):
        raise ConfigError(f"quantile = {quantile}, must be in (0, 1)")
    if mean_tokens <= 0 or p99_tokens <= mean_tokens:
        raise ConfigError(
            f"lognormal fit needs 0 < mean < upper quantile, "
            f"got mean {mean_tokens}, quantile value {p99_tokens}"
        )
    z = NormalDist().inv_cdf(quantile)
    gap = math.log(p99_tokens / mean_tokens)
    disc = z * z - 2.0 * gap
    if disc < 0:
        raise ConfigError(
            f"no lognormal has mean {mean_tokens} and q{quantile:g} {p99_tokens}: "
            f"the ratio {p99_tokens / mean_tokens:.2f} exceeds exp(z^2/2) = {math.exp(z * z / 2):.2f}"
        )
    sigma = z - math.sqrt(disc)
    mu = math.log(mean_tokens) - sigma * sigma / 2.0
    return mu, sigma


def _clipped_lognormal(rng: np.random.Generator, mu: float, sigma: float, n: int, cap: int) -> IntArray:
    draws = rng.lognormal(mu, sigma, size=n)
    # rint then clip: a 0.4-token draw still asks for one token; ints above cap are cut to cap.
    return np.clip(np.rint(draws), 1, cap).astype(np.int64)


@dataclass(frozen=True)
class LognormalLengths:
    """Independent lognormal prompt and output lengths, rounded and clipped to ``[1, max]``.

    Parameters are in log space (numpy's ``rng.lognormal(mu, sigma)``), so the
    mean is ``exp(mu + sigma^2/2)``: the design document's example
    ``lognormal(6.5, 1.2)`` has median ``exp(6.5) = 665`` and mean
    ``exp(6.5 + 0.72) = 1366`` tokens. Clipping moves the mean by well under 1%
    for the defaults (``P(X > 32768) = 0.06%`` for ``lognormal(6.5, 1.2)``).
    """

    input_mu: float
    input_sigma: float
    output_mu: float
    output_sigma: float
    max_input_tokens: int = 32768
    max_output_tokens: int = 8192

    def __post_init__(self) -> None:
        for label, value in (("input_sigma", self.input_sigma), ("output_sigma", self.output_sigma)):
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"{label} = {value}, must be a finite number >= 0")
        for label, value in (("input_mu", self.input_mu), ("output_mu", self.output_mu)):
            if not math.isfinite(value):
                raise ConfigError(f"{label} = {value}, must be finite")
        for label, cap in (
            ("max_input_tokens", self.max_input_tokens),
            ("max_output_tokens", self.max_output_tokens),
        ):
            if cap < 1:
                raise ConfigError(f"{label} = {cap}, must be >= 1")

    @classmethod
    def from_mean_p99(
        cls,
        input_mean_tokens: float,
        input_p99_tokens: float,
        output_mean_tokens: float,
        output_p99_tokens: float,
        *,
        max_input_tokens: int = 32768,
        max_output_tokens: int = 8192,
    ) -> LognormalLengths:
        """Fit both lognormals to a published mean and p99 (see :func:`lognormal_from_mean_p99`)."""
        in_mu, in_sigma = lognormal_from_mean_p99(input_mean_tokens, input_p99_tokens)
        out_mu, out_sigma = lognormal_from_mean_p99(output_mean_tokens, output_p99_tokens)
        return cls(in_mu, in_sigma, out_mu, out_sigma, max_input_tokens, max_output_tokens)

    @classmethod
    def from_means(
        cls,
        input_mean_tokens: float,
        output_mean_tokens: float,
        *,
        sigma: float = 1.0,
        max_input_tokens: int = 32768,
        max_output_tokens: int = 8192,
    ) -> LognormalLengths:
        """Lognormals with these means and a shared log-space ``sigma``: ``mu = ln(mean) - sigma^2/2``.

        E.g. ServeGen m-large's 914 prompt tokens with sigma 1.0 gives
        ``mu = 6.818 - 0.5 = 6.318`` (median 554 tokens).
        """
        if input_mean_tokens <= 0 or output_mean_tokens <= 0:
            raise ConfigError(
                f"mean lengths must be > 0, got input {input_mean_tokens}, output {output_mean_tokens}"
            )
        half_var = sigma * sigma / 2.0
        return cls(
            math.log(input_mean_tokens) - half_var,
            sigma,
            math.log(output_mean_tokens) - half_var,
            sigma,
            max_input_tokens,
            max_output_tokens,
        )

    def sample(self, n: int, rng: np.random.Generator) -> tuple[IntArray, IntArray]:
        """``n`` independent (input, output) lengths."""
        inp = _clipped_lognormal(rng, self.input_mu, self.input_sigma, n, self.max_input_tokens)
        out = _clipped_lognormal(rng, self.output_mu, self.output_sigma, n, self.max_output_tokens)
        return inp, out

    def describe(self) -> dict[str, object]:
        return {
            "kind": "lognormal",
            "input_mu": round(self.input_mu, 6),
            "input_sigma": round(self.input_sigma, 6),
            "output_mu": round(self.output_mu, 6),
            "output_sigma": round(self.output_sigma, 6),
            "max_input_tokens": self.max_input_tokens,
            "max_output_tokens": self.max_output_tokens,
        }


# Default for the synthetic generators. Prompts: the design document's
# lognormal(6.5, 1.2) (median 665, mean 1366 tokens). Outputs: fitted to the
# Azure conversation trace's mean 211 / p99 601 (mu 5.2245, sigma 0.5047, see
# lognormal_from_mean_p99), computed here from the published numbers so nothing
# is read from disk at import time.
_AZURE_OUT_MU, _AZURE_OUT_SIGMA = lognormal_from_mean_p99(211.0, 601.0)
DEFAULT_LENGTHS = LognormalLengths(6.5, 1.2, _AZURE_OUT_MU, _AZURE_OUT_SIGMA)


@dataclass(frozen=True, eq=False)
class LengthSampler:
    """Draws (input, output) pairs with replacement from measured lengths.

    Pairs are drawn jointly (one index for both), so the prompt/answer
    correlation of the source survives. Zero counts in the source are raised
    to 1 (a request has at least one prompt and one output token); the number
    of such pairs is in :meth:`describe` as ``clamped``.
    """

    input_tokens: IntArray
    output_tokens: IntArray
    source: str = "arrays"
    clamped: int = field(default=0)

    def __post_init__(self) -> None:
        inp = np.array(self.input_tokens, dtype=np.int64)
        out = np.array(self.output_tokens, dtype=np.int64)
        if inp.ndim != 1 or inp.shape != out.shape:
            raise ConfigError(f"LengthSampler needs two equal 1-D arrays, got {inp.shape} and {out.shape}")
        if inp.size == 0:
            raise ConfigError(f"LengthSampler source {self.source!r} has no lengths")
        if int(inp.min()) < 0 or int(out.min()) < 0:
            raise ConfigError(f"LengthSampler source {self.source!r} has negative lengths")
        zero = (inp == 0) | (out == 0)
        inp = np.maximum(inp, 1)
        out = np.maximum(out, 1)
        inp.flags.writeable = False
        out.flags.writeable = False
        object.__setattr__(self, "input_tokens", inp)
        object.__setattr__(self, "output_tokens", out)
        object.__setattr__(self, "clamped", self.clamped + int(zero.sum()))

    @classmethod
    def from_file(cls, path: str | Path) -> LengthSampler:
        """Read lengths from a file.

        Accepted: a length CSV with ``num_prefill_tokens,num_decode_tokens``
        columns (the sarathi/vidur files under ``calibration/lengths/``), a CSV
        with ``input_tokens,output_tokens`` columns, or any trace
        :func:`~llmscale.workloads.loaders.load_trace` auto-detects (its token
        columns are used; arrival times are ignored).
        """
        p = Path(path)
        head = _io.first_line(p).lower().replace(" ", "") if p.is_file() else ""
        columns = head.split(",")
        for in_col, out_col in (
            ("num_prefill_tokens", "num_decode_tokens"),
            ("input_tokens", "output_tokens"),
        ):
            if in_col in columns and out_col in columns and "arrival_s" not in columns:
                table = _io.parse_table(_io.read_text(p), str(p), [in_col, out_col])
                inp = _io.parse_token_column(table, in_col)
                out = _io.parse_token_column(table, out_col)
                return cls(inp, out, source=str(p))
        from llmscale.workloads.loaders import load_trace  # local: loaders imports this module

        try:
            w = load_trace(p)
        except TraceFormatError as exc:
            raise TraceFormatError(
                f"not a length file (num_prefill_tokens,num_decode_tokens) nor a known trace: {exc}",
                path=str(p),
            ) from exc
        return cls(w.input_tokens, w.output_tokens, source=str(p))

    def sample(self, n: int, rng: np.random.Generator | int = 0) -> tuple[IntArray, IntArray]:
        """``n`` (input, output) pairs drawn with replacement; ``rng`` may be a seed."""
        gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        idx = gen.integers(0, self.input_tokens.size, size=n)
        return self.input_tokens[idx], self.output_tokens[idx]

    def describe(self) -> dict[str, object]:
        return {
            "kind": "sampler",
            "source": self.source,
            "pairs": int(self.input_tokens.size),
            "clamped": self.clamped,
            "input_mean_tokens": round(float(self.input_tokens.mean()), 3),
            "output_mean_tokens": round(float(self.output_tokens.mean()), 3),
        }

    def __repr__(self) -> str:
        return f"LengthSampler(source={self.source!r}, pairs={self.input_tokens.size})"


#: Named length distributions ``--lengths`` accepts, (prompt mean, output mean) tokens with a
#: lognormal of sigma 1.0 (CV 1.31): ServeGen's README rate-weighted means per model family.
LENGTH_CATEGORIES: dict[str, tuple[float, float]] = {
    "m-large": (914.0, 155.0),
    "m-small": (120.0, 15.0),
}

#: CV of a lognormal of log-space sigma 1.0 (the ServeGen loader's default): sqrt(e - 1)
_DEFAULT_CV = math.sqrt(math.e - 1.0)


def _sigma_of_cv(cv: float) -> float:
    """Log-space sigma of a lognormal with this CV: CV^2 = exp(sigma^2) - 1 (CV 1.31 -> 1.0)."""
    return math.sqrt(math.log1p(cv * cv))


def parse_lengths(text: str, *, option: str = "--lengths") -> LognormalLengths:
    """``prompt=MEAN[:CV],output=MEAN[:CV]`` (tokens; CV default 1.31, a lognormal of sigma 1)
    or a name of :data:`LENGTH_CATEGORIES`; ConfigError naming the bad field otherwise.

    E.g. ``prompt=600:1.5,output=1500:0.8``: prompt mu = ln 600 - sigma^2/2 with
    sigma = sqrt(ln(1 + 1.5^2)) = 1.086.
    """
    text = text.strip()
    if text in LENGTH_CATEGORIES:
        prompt_mean, output_mean = LENGTH_CATEGORIES[text]
        return LognormalLengths.from_means(prompt_mean, output_mean, sigma=1.0)
    fields: dict[str, tuple[float, float]] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or key not in ("prompt", "output"):
            raise ConfigError(
                f"{option} {text!r}: field {part.strip()!r} must be prompt=MEAN[:CV] or output=MEAN[:CV] "
                f"(or give one of the names {', '.join(LENGTH_CATEGORIES)})"
            )
        if key in fields:
            raise ConfigError(f"{option} {text!r}: {key} is given twice")
        mean_text, colon, cv_text = value.partition(":")
        try:
            mean = float(mean_text)
            cv = float(cv_text) if colon else _DEFAULT_CV
        except ValueError as e:
            raise ConfigError(f"{option} {text!r}: {key} = {value.strip()!r} is not MEAN[:CV] numbers") from e
        if not (math.isfinite(mean) and mean >= 1.0):
            raise ConfigError(f"{option} {text!r}: {key} mean = {mean_text.strip()}, must be >= 1 token")
        if not (math.isfinite(cv) and 0.0 <= cv <= 10.0):
            raise ConfigError(f"{option} {text!r}: {key} CV = {cv_text.strip()}, must be in [0, 10]")
        fields[key] = (mean, cv)
    missing = [k for k in ("prompt", "output") if k not in fields]
    if missing:
        raise ConfigError(f"{option} {text!r}: {' and '.join(missing)} missing (give prompt= and output=)")
    (p_mean, p_cv), (o_mean, o_cv) = fields["prompt"], fields["output"]
    p_sigma, o_sigma = _sigma_of_cv(p_cv), _sigma_of_cv(o_cv)
    return LognormalLengths(
        math.log(p_mean) - p_sigma * p_sigma / 2.0,
        p_sigma,
        math.log(o_mean) - o_sigma * o_sigma / 2.0,
        o_sigma,
    )


def assumed_lengths_text(described: object) -> str:
    """``"prompt 914 / output 155 tokens (lognormal, CV 1.31 / 1.31)"`` from a
    :meth:`LognormalLengths.describe` mapping (means before clipping), or "" for another kind."""
    if not isinstance(described, dict) or described.get("kind") != "lognormal":
        return ""
    out = []
    for side in ("input", "output"):
        mu, sigma = float(described[f"{side}_mu"]), float(described[f"{side}_sigma"])
        out.append((math.exp(mu + sigma * sigma / 2.0), math.sqrt(math.expm1(sigma * sigma))))
    (pm, pc), (om, oc) = out
    return f"prompt {pm:,.0f} / output {om:,.0f} tokens (lognormal, CV {pc:.2f} / {oc:.2f})"
