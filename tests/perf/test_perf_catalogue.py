"""Catalogue look-ups: names, aliases, Hugging Face ids, errors, TP validation."""

from __future__ import annotations

import pytest

from llmscale.errors import ConfigError
from llmscale.perf import GPUS, MODELS, get_gpu, get_model
from llmscale.perf.catalogue import validate_tp


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("llama-3-8b", "llama-3-8b"),
        ("LLAMA-3-8B", "llama-3-8b"),
        ("meta-llama/Meta-Llama-3-8B", "llama-3-8b"),
        ("meta-llama/meta-llama-3-8b-instruct", "llama-3-8b"),
        ("Meta-Llama-3-8B", "llama-3-8b"),
        ("llama-3.1-8b", "llama-3.1-8b"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("meta-llama/Meta-Llama-3.1-70B", "llama-3.1-70b"),
        ("meta-llama/Llama-2-7b-hf", "llama-2-7b"),
        ("llama-2-13b", "llama-2-13b"),
        ("mistralai/Mistral-7B-v0.1", "mistral-7b"),
        ("meta-llama/Llama-2-70b-hf", "llama-2-70b"),
        ("meta-llama/Meta-Llama-3-70B-Instruct", "llama-3-70b"),
        ("codellama/CodeLlama-34b-Instruct-hf", "codellama-34b"),
        ("01-ai/Yi-34B-200K", "yi-34b"),
        ("bigscience/bloom", "bloom-176b"),
        ("  llama-2-7b  ", "llama-2-7b"),
    ],
)
def test_get_model_accepts_names_aliases_and_hf_ids(name: str, canonical: str) -> None:
    assert get_model(name).name == canonical


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("a100", "a100-80gb"),
        ("A100-80GB", "a100-80gb"),
        ("h100", "h100-80gb"),
        ("H100-SXM", "h100-80gb"),
        ("h200", "h200"),
        ("a100-pcie", "a100-80gb-pcie"),
    ],
)
def test_get_gpu_accepts_aliases(name: str, canonical: str) -> None:
    assert get_gpu(name).name == canonical


def test_unknown_model_lists_known_names() -> None:
    with pytest.raises(ConfigError) as exc:
        get_model("gpt-5")
    msg = str(exc.value)
    assert "gpt-5" in msg
    for name in MODELS:
        assert name in msg


def test_unknown_gpu_lists_known_names() -> None:
    with pytest.raises(ConfigError) as exc:
        get_gpu("v100")
    for name in GPUS:
        assert name in str(exc.value)


def test_specs_are_frozen() -> None:
    m = get_model("llama-3-8b")
    with pytest.raises(AttributeError):
        m.num_layers = 1  # type: ignore[misc]


def test_public_architecture_and_hardware_facts() -> None:
    l3 = get_model("llama-3-8b")
    # 2 (K, V) x 32 layers x 8 KV heads x 128 dims x 2 bytes = 128 KiB per token.
    assert l3.kv_bytes_per_token == 131_072
    assert get_model("llama-2-7b").kv_bytes_per_token == 524_288
    # Llama-3.1 is Llama-3's architecture with a 128k context.
    l31 = get_model("llama-3.1-8b")
    assert (l31.num_layers, l31.num_kv_heads, l31.param_count) == (
        l3.num_layers,
        l3.num_kv_heads,
        l3.param_count,
    )
    assert (l3.max_context_tokens, l31.max_context_tokens) == (8192, 131072)
    # Linear-layer shapes reproduce the published parameter counts (embeddings + LM head apart).
    for m in MODELS.values():
        shaped = m.num_layers * m.linear_params_per_layer + 2 * m.hidden_size * m.vocab_size
        tied = m.name == "bloom-176b"  # BLOOM ties its embedding and LM head
        expected = m.param_count + (m.hidden_size * m.vocab_size if tied else 0)
        assert shaped == pytest.approx(expected, rel=0.001), m.name
    h100 = get_gpu("h100")
    assert h100.peak_bf16_flops == 989e12
    assert h100.hbm_bandwidth_bytes_s == 3.35e12
    a100 = get_gpu("a100")
    assert a100.peak_bf16_flops == 312e12
    assert a100.hbm_bandwidth_bytes_s == 2.039e12
    h200 = get_gpu("h200")
    assert h200.hbm_bandwidth_bytes_s == 4.8e12
    assert h200.memory_bytes > 140e9


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_tp_divides_heads_of_every_catalogue_model(tp: int) -> None:
    # Qwen2-7B / Qwen2.5-7B have 28 query and 4 KV heads: vLLM refuses them at TP 8.
    for m in MODELS.values():
        if m.num_heads % tp == 0 and m.num_kv_heads % tp == 0:
            validate_tp(m, tp)
        else:
            assert m.name.startswith("qwen2") and tp == 8, m.name
            with pytest.raises(ConfigError, match="does not divide"):
                validate_tp(m, tp)


@pytest.mark.parametrize(
    ("name", "total_b", "active_fraction"),
    [
        pytest.param("qwen2-7b", 7.62, 1.0, id="qwen2-7b"),
        pytest.param("qwen2-72b", 72.71, 1.0, id="qwen2-72b"),
        pytest.param("qwen2.5-32b", 32.76, 1.0, id="qwen2.5-32b"),
        pytest.param("mixtral-8x7b", 46.70, 0.272, id="mixtral"),
    ],
)
def test_architecture_facts_add_up_to_the_published_parameter_count(
    name: str, total_b: float, active_fraction: float
) -> None:
    """Shapes from config.json give the published count (embeddings, norms and biases aside)."""
    m = get_model(name)
    assert m.param_count / 1e9 == pytest.approx(total_b, abs=0.01)
    emb = m.hidden_size * m.vocab_size * 2  # untied input and output embeddings
    shapes = m.num_layers * m.linear_params_per_layer + emb
    assert shapes == pytest.approx(m.param_count, rel=2e-3)
    active = m.active_linear_params_per_layer / m.linear_params_per_layer
    assert active == pytest.approx(active_fraction, abs=0.005)


def test_context_lengths_follow_the_published_configs() -> None:
    assert get_model("llama-3-8b").max_context_tokens == 8192
    assert get_model("meta-llama/Llama-3.1-8B-Instruct").max_context_tokens == 131072
    assert get_model("Qwen/Qwen2.5-7B-Instruct").max_context_tokens == 32768
    assert get_model("Qwen/Qwen2.5-7B").max_context_tokens == 131072
    assert get_model("mistralai/Mixtral-8x7B-v0.1").max_context_tokens == 32768
    assert get_model("llama-2-7b").max_context_tokens == 4096


def test_a100_40gb_is_its_own_card() -> None:
    a40 = get_gpu("a100-40gb")
    assert a40.family == "a100"
    assert a40.hbm_bandwidth_bytes_s == 1.555e12
    assert a40.memory_bytes == 40_960 * 1024 * 1024
    assert get_gpu("a100").name == "a100-80gb"


@pytest.mark.parametrize("tp", [0, 3, 16, -1, 2.0, True])
def test_unsupported_tp_is_config_error(tp: object) -> None:
    with pytest.raises(ConfigError):
        validate_tp(get_model("llama-3-8b"), tp)  # type: ignore[arg-type]


def test_tp_must_divide_heads() -> None:
    from dataclasses import replace

    odd = replace(get_model("llama-3-8b"), name="odd", num_kv_heads=6, num_heads=36)
    with pytest.raises(ConfigError, match="does not divide"):
        validate_tp(odd, 4)
