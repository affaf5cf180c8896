"""Per-GPU prices and per-type limits: ``--gpu-prices prices.yaml``, checked at the edge.

The file maps a GPU name (any spelling :func:`llmscale.perf.catalogue.get_gpu` accepts) to its
on-demand price per GPU-hour and, optionally, the most GPUs of that type the fleet may hold::

    currency: USD
    gpus:
      a100-80gb: {price_per_gpu_hour: 1.30, max_gpus: 32}
      h100-80gb: {price_per_gpu_hour: 3.00}
      h200: {price_per_gpu_hour: 4.00, max_gpus: 8}

A GPU the file does not name keeps its default price (:data:`DEFAULT_PRICES`) and no limit.
Every error is a ConfigError naming the file and the key path, e.g.
``prices.yaml: gpus.h100-80gb.price_per_gpu_hour = -1: must be a finite number > 0``.

Default prices: public on-demand list prices per GPU-hour, the midpoint of the "specialty cloud"
tier (CoreWeave, Lambda, Crusoe and the like, between the hyperscalers and the long tail) of
Mercatus' cloud GPU price survey, May 2026 (https://www.mercatus-ai.com/blog/cloud-gpu-pricing):
A100 80GB $1.10-1.50 -> 1.30, H100 SXM5 $2.50-3.50 -> 3.00, H200 SXM5 $3.50-4.50 -> 4.00. The
L40S is not in that table: $0.87 per hour, the on-demand price quoted by AI Hardware Index's
cost-per-token analysis of December 31, 2025
(https://aihardwareindex.com/blog/h100-vs-a100-vs-l40s-the-cost-per-token-analysis). Prices move
(the same survey finds a 2.5x spread for one H100 between providers): pass your own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from llmscale.errors import ConfigError

__all__ = [
    "DEFAULT_CURRENCY",
    "DEFAULT_PRICES",
    "GpuPrice",
    "GpuPrices",
    "canonical_gpu",
    "default_prices",
    "load_gpu_prices",
    "parse_gpu_prices",
]

DEFAULT_CURRENCY: Final = "USD"

#: on-demand price per GPU-hour by canonical GPU name (sources in the module docstring)
DEFAULT_PRICES: Final[Mapping[str, float]] = MappingProxyType(
    {
        "a100-80gb": 1.30,
        "h100-80gb": 3.00,
        "h200": 4.00,
        "l40s": 0.87,
    }
)

_FIELDS: Final = ("price_per_gpu_hour", "max_gpus")


@dataclass(frozen=True, slots=True)
class GpuPrice:
    """One GPU type: its price per GPU-hour and the most GPUs of it the fleet may hold."""

    gpu: str
    price_per_gpu_hour: float
    #: None: no limit
    max_gpus: int | None = None


@dataclass(frozen=True, slots=True)
class GpuPrices:
    """Prices and limits per canonical GPU name, in one currency."""

    prices: tuple[GpuPrice, ...]
    currency: str = DEFAULT_CURRENCY
    #: where they came from (a file path, or "defaults"), for messages
    source: str = "defaults"

    def of(self, gpu: str) -> GpuPrice:
        """The price of ``gpu`` (any accepted spelling); its default with no limit when not listed.

        Raises ConfigError naming the source when the GPU has neither a listed nor a default price.
        """
        name = canonical_gpu(gpu)
        for p in self.prices:
            if p.gpu == name:
                return p
        if name in DEFAULT_PRICES:
            return GpuPrice(name, DEFAULT_PRICES[name])
        known = ", ".join(sorted({*DEFAULT_PRICES, *(p.gpu for p in self.prices)}))
        raise ConfigError(f"{self.source}: no price for GPU {gpu!r}; priced GPUs: {known}")

    def cost(self, gpu_hours_by_gpu: Mapping[str, float]) -> float:
        """Currency units for these GPU-hours per GPU type, e.g. {h100-80gb: 10} at 3.00 -> 30.0."""
        return sum(h * self.of(g).price_per_gpu_hour for g, h in gpu_hours_by_gpu.items())


def default_prices() -> GpuPrices:
    """The cited defaults, no limits."""
    return GpuPrices(tuple(GpuPrice(g, p) for g, p in DEFAULT_PRICES.items()))


def canonical_gpu(name: str) -> str:
    """The catalogue's name for a GPU spelling (``H100`` -> ``h100-80gb``, ``L40S-48GB`` -> ``l40s``).

    Raises ConfigError (listing the catalogue's GPUs) for a GPU the catalogue does not know.
    """
    key = name.strip().lower()
    from llmscale.perf.catalogue import get_gpu

    return get_gpu(key).name


def parse_gpu_prices(data: Any, source: str) -> GpuPrices:
    """Check a parsed prices document; errors start with ``source`` and name the key path."""
    if data is None:
        return GpuPrices((), source=source)
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: expected a mapping with 'gpus' (and 'currency'), got {type(data).__name__}"
        )
    unknown = sorted(str(k) for k in data if k not in ("currency", "gpus"))
    if unknown:
        raise ConfigError(f"{source}: {unknown[0]}: unknown key; expected 'currency' and 'gpus'")
    currency = data.get("currency", DEFAULT_CURRENCY)
    if not isinstance(currency, str) or not currency.strip():
        raise ConfigError(f"{source}: currency = {currency!r}: must be a non-empty string such as USD")
    gpus = data.get("gpus") or {}
    if not isinstance(gpus, dict):
        raise ConfigError(
            f"{source}: gpus: expected a mapping of GPU name -> price, got {type(gpus).__name__}"
        )
    out: list[GpuPrice] = []
    seen: dict[str, str] = {}
    for raw_name, entry in gpus.items():
        where = f"gpus.{raw_name}"
        try:
            name = canonical_gpu(str(raw_name))
        except ConfigError as e:
            raise ConfigError(f"{source}: {where}: {e}") from e
        if name in seen:
            raise ConfigError(f"{source}: {where}: the same GPU as gpus.{seen[name]} ({name})")
        seen[name] = str(raw_name)
        if isinstance(entry, (int, float)) and not isinstance(entry, bool):
            entry = {"price_per_gpu_hour": entry}
        if not isinstance(entry, dict):
            raise ConfigError(
                f"{source}: {where}: expected a price or a mapping with price_per_gpu_hour, max_gpus"
            )
        extra = sorted(str(k) for k in entry if k not in _FIELDS)
        if extra:
            raise ConfigError(f"{source}: {where}.{extra[0]}: unknown field; expected {', '.join(_FIELDS)}")
        price = entry.get("price_per_gpu_hour", DEFAULT_PRICES.get(name))
        if price is None:
            raise ConfigError(f"{source}: {where}.price_per_gpu_hour: required (no default price for {name})")
        if isinstance(price, bool) or not isinstance(price, (int, float)) or not 0.0 < price < math.inf:
            raise ConfigError(
                f"{source}: {where}.price_per_gpu_hour = {price!r}: must be a finite number > 0"
            )
        limit = entry.get("max_gpus")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ConfigError(f"{source}: {where}.max_gpus = {limit!r}: must be an integer >= 0")
        out.append(GpuPrice(name, float(price), limit))
    return GpuPrices(tuple(out), currency.strip(), source)


def load_gpu_prices(path: str | Path) -> GpuPrices:
    """Read and check ``path`` (see the module docstring). Raises ConfigError starting with the path."""
    from llmscale.documents import read_yaml_file

    data = read_yaml_file(path, "the GPU prices")
    return parse_gpu_prices(data, str(path))
