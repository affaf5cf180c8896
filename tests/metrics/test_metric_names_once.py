"""Each vLLM metric name is spelt once in the sources: ``VllmMetric`` in ``llmscale.metrics.names``.

The per-version tables (:data:`~llmscale.metrics.names.VLLM`, ``VLLM_OLD``), the histogram list and
every policy or emulator naming a series pick from it, so a renamed metric is one edit. Prose
(docstrings, a policy's summary quoting its PromQL) may quote a name; a string that *is* a name,
used as one, may not.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import llmscale
from llmscale.metrics import names as n

SRC = Path(llmscale.__file__).parent
NAMES_MODULE = SRC / "metrics" / "names.py"
#: a whole string that is a vLLM series name (``vllm:`` then the name)
A_VLLM_NAME = re.compile(r"^vllm:[a-z_]+$")


def _vllm_name_literals(source: str) -> list[tuple[int, str]]:
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and A_VLLM_NAME.match(node.value)
    ]


@pytest.mark.parametrize(
    "path",
    [p for p in sorted(SRC.rglob("*.py")) if p != NAMES_MODULE],
    ids=lambda p: str(p.relative_to(SRC)),
)
def test_no_module_but_names_spells_a_vllm_metric(path):
    found = _vllm_name_literals(path.read_text())
    assert not found, (
        f"{path.relative_to(SRC)} spells {found}: name it through llmscale.metrics.names.VllmMetric"
    )


def test_names_spells_each_vllm_metric_once():
    spelt = [name for _, name in _vllm_name_literals(NAMES_MODULE.read_text())]
    assert spelt, "names.py no longer spells the vLLM names: update this test"
    assert len(spelt) == len(set(spelt)), sorted(name for name in spelt if spelt.count(name) > 1)


def test_the_check_finds_a_second_spelling():
    source = 'KV = VLLM.kv_usage or "vllm:kv_cache_usage_perc"\nSUMMARY = "sum(vllm:num_requests_waiting)"\n'
    assert _vllm_name_literals(source) == [(1, "vllm:kv_cache_usage_perc")]


def test_the_version_tables_and_histograms_pick_from_the_one_list():
    every = {v for k, v in vars(n.VllmMetric).items() if k.isupper()}
    for table in (n.VLLM, n.VLLM_OLD):
        assert {v for v in vars(table).values() if v is not None} <= every
    assert every >= n.VLLM_HISTOGRAMS
    # the two generations differ exactly where vLLM renamed (0.9-0.11: KV gauge, per-token latency)
    assert {(k, v) for k, v in vars(n.VLLM).items()} ^ {(k, v) for k, v in vars(n.VLLM_OLD).items()} == {
        ("kv_usage", n.VllmMetric.KV_USAGE),
        ("kv_usage", n.VllmMetric.KV_USAGE_OLD),
        ("itl", n.VllmMetric.ITL),
        ("itl", n.VllmMetric.ITL_OLD),
        ("tpot", n.VllmMetric.TPOT),
        ("tpot", None),
    }


EXPORTER_DOC = Path(llmscale.__file__).parents[2] / "docs" / "notes" / "exporters-and-peer-autoscalers.md"


@pytest.mark.parametrize("name", sorted(v for k, v in vars(n.VllmMetric).items() if k.isupper()))
def test_each_vllm_name_is_in_the_exporters_notes(name):
    # The notes are prose with vLLM's sources; names.py cites them. A name added to the table
    # without its source in the notes (or a note left behind by a rename) fails here.
    if not EXPORTER_DOC.exists():
        pytest.skip(f"{EXPORTER_DOC} is not in this checkout (an installed package)")
    assert re.search(re.escape(name) + r"(?![a-z0-9])", EXPORTER_DOC.read_text()), name
