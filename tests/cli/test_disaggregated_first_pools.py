"""``backtest --disaggregated``: the pools' first sizes, sized for the first five minutes unless given.

The sized pair is the constant-pair oracle on the first five minutes
(``llmscale.backtest.disagg.initial_pools``); a size given on the command line is kept, the other
pool still sized. The JSON's ``config.disaggregated`` says what ran; stderr says which were sized.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from llmscale.backtest import disagg
from llmscale.cli import app
from llmscale.workloads import window

ARGS = ["--workload", "azure-like", "--duration-s", "120", "--rate-scale", "0.3", "--disaggregated",
        "--policy", "slo-disagg", "--no-oracle", "--max-replicas", "8"]  # fmt: skip


def _run(tmp_path: Path, *extra: str) -> tuple[dict, str]:
    out = tmp_path / "pd.json"
    res = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["backtest", *ARGS, *extra, "--json", str(out)])
    assert res.exit_code == 0, (res.stdout, res.stderr, res.exception)
    return json.loads(out.read_text())["config"]["disaggregated"], res.stderr


def test_unset_pools_start_at_the_pair_sized_for_the_first_minutes(tmp_path: Path, monkeypatch) -> None:
    # the pair initial_pools gives on the workload and settings the command built (called through)
    got = []
    real = disagg.initial_pools

    def spy(workload, settings, **kw):
        got.append(real(workload, settings, **kw))
        first = window(workload, 0.0, min(300.0, workload.duration_s + 1.0))
        oracle = disagg.run_disaggregated_oracle(first, settings)
        assert got[-1] == (oracle.summary["oracle_pair"]["prefill"], oracle.summary["oracle_pair"]["decode"])
        return got[-1]

    monkeypatch.setattr(disagg, "initial_pools", spy)
    pools, err = _run(tmp_path)
    (p, d), *_ = got
    assert (pools["prefill_initial_replicas"], pools["decode_initial_replicas"]) == (p, d)
    assert pools["interconnect"] == "infiniband"
    assert f"first pool sizes: prefill {p}, decode {d}" in " ".join(err.split())


def test_a_given_size_is_kept_and_the_other_pool_sized(tmp_path: Path) -> None:
    pools, err = _run(tmp_path, "--prefill-replicas", "3")
    assert pools["prefill_initial_replicas"] == 3
    said = " ".join(err.split())
    assert "first pool sizes: decode" in said and "prefill 3" not in said
    both, err = _run(tmp_path, "--prefill-replicas", "3", "--decode-replicas", "2")
    assert (both["prefill_initial_replicas"], both["decode_initial_replicas"]) == (3, 2)
    assert "first pool sizes" not in err
