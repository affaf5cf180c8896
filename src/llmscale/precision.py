"""Number formats of a served model, named as vLLM names its engine arguments.

Three of vLLM's engine arguments decide how many bytes a step moves and which tensor-core rate
its matmuls run at:

* ``--dtype`` (``auto``, ``bfloat16``, ``float16``, ``half``): the activations' and unquantised
  weights' type. All four are 2 bytes and the same tensor-core rate, so they cost the same here;
  ``float``/``float32`` (4 bytes, no bf16 tensor cores) is refused, not modelled.
* ``--quantization fp8``: the linear layers' weights in FP8 (1 byte). On a GPU with FP8 tensor
  cores (compute capability >= 8.9: Hopper, Ada) vLLM also quantises each GEMM's input
  activations on the fly (W8A8) and runs the GEMM at the FP8 tensor-core rate, twice the bf16
  rate on an H100 (1,979 vs 989 TFLOP/s dense). On an A100 (8.0, no FP8 tensor cores) it runs
  the same checkpoint weight-only (W8A16, the FP8 Marlin kernel): the weights cross HBM at 1 byte
  and are widened to bf16 inside the kernel, so the step streams half the weight bytes but its
  GEMMs keep the bf16 rate. (vLLM documentation, "FP8 W8A8":
  https://docs.vllm.ai/en/latest/features/quantization/fp8/.) The embedding table and the LM
  head stay bf16: vLLM's FP8 method quantises linear layers, and the LM head is a vocabulary
  embedding, not one.
* ``--kv-cache-dtype`` (``auto``, ``fp8``, ``fp8_e4m3``, ``fp8_e5m2``): the KV cache's type.
  FP8 stores a K or V value in 1 byte instead of 2, so a replica holds twice the tokens in the
  same memory and a decode step reads half the KV bytes per context token. The two FP8 variants
  differ in range and precision, not in size, so they cost the same here. (vLLM documentation,
  "Quantized KV Cache": https://docs.vllm.ai/en/latest/features/quantization/quantized_kvcache/.)

See docs/fp8.md for the worked numbers and the published measurements the model is checked
against (never fitted to).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from llmscale.errors import ConfigError

__all__ = [
    "BF16",
    "DTYPES",
    "KV_CACHE_DTYPES",
    "QUANTIZATIONS",
    "Precision",
    "precision_of",
]

#: vLLM ``--dtype`` values modelled (all 2-byte types at the bf16 tensor-core rate)
DTYPES: Final[tuple[str, ...]] = ("auto", "bfloat16", "float16", "half")
#: vLLM ``--kv-cache-dtype`` values modelled
KV_CACHE_DTYPES: Final[tuple[str, ...]] = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
#: vLLM ``--quantization`` values modelled ("none": unquantised, the default)
QUANTIZATIONS: Final[tuple[str, ...]] = ("none", "fp8")


@dataclass(frozen=True, slots=True)
class Precision:
    """The served model's number formats; the default is vLLM's default (bf16 throughout)."""

    dtype: str = "auto"
    quantization: str = "none"
    kv_cache_dtype: str = "auto"

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            hint = " (FP8 weights are vLLM's --quantization fp8)" if self.dtype.startswith("fp8") else ""
            raise ConfigError(f"dtype = {self.dtype!r}, must be one of {', '.join(DTYPES)}{hint}")
        if self.quantization not in QUANTIZATIONS:
            raise ConfigError(
                f"quantization = {self.quantization!r}, must be one of {', '.join(QUANTIZATIONS)}"
            )
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ConfigError(
                f"kv_cache_dtype = {self.kv_cache_dtype!r}, must be one of {', '.join(KV_CACHE_DTYPES)}"
            )

    @property
    def is_default(self) -> bool:
        """bf16 weights, activations and KV cache: the performance model's fitted configuration."""
        return self.quantization == "none" and self.kv_cache_dtype == "auto"

    @property
    def activation_bytes(self) -> int:
        """Bytes of an activation, an unquantised weight (embeddings, LM head) or a bf16 KV value."""
        return 2

    @property
    def weight_bytes(self) -> int:
        """Bytes of one linear-layer weight: 1 with ``--quantization fp8``, else 2."""
        return 1 if self.quantization == "fp8" else 2

    @property
    def kv_bytes(self) -> int:
        """Bytes of one K or V value in the cache: 1 with an FP8 ``--kv-cache-dtype``, else 2."""
        return 1 if self.kv_cache_dtype.startswith("fp8") else 2

    @property
    def fp8_gemms(self) -> bool:
        """Whether the linear layers' weights are FP8 (GEMMs at the FP8 rate where the GPU has one)."""
        return self.quantization == "fp8"

    def label(self) -> str:
        """Short text for tables and messages, e.g. ``fp8 weights, fp8 KV``."""
        w = "fp8 weights" if self.fp8_gemms else "bf16 weights"
        kv = "fp8 KV" if self.kv_bytes == 1 else "bf16 KV"
        return f"{w}, {kv}"


#: the default precision (every committed coefficient was fitted to it)
BF16: Final = Precision()


def precision_of(
    dtype: str = "auto", kv_cache_dtype: str = "auto", quantization: str | None = None
) -> Precision:
    """Validated :class:`Precision` from vLLM-style argument values (``None`` quantization: none).

    Values are compared lower-cased, as vLLM's argument parser does not (it is case-sensitive),
    so ``FP8`` is accepted here and written back as ``fp8``.
    """
    q = "none" if quantization is None else quantization.strip().lower()
    p = Precision(dtype.strip().lower(), q, kv_cache_dtype.strip().lower())
    return BF16 if p == BF16 else p
