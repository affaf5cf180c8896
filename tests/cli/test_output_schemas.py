"""Every command's ``--json`` document validates against its shipped schema; logs parse as JSON lines.

The documents are real outputs: a backtest on a built-in workload, analyze and diagnose on that
backtest's decision log, calibrate on a vllm bench serve file, tune for two trials, tenants on the
example file, loadgen against a real ``emulate`` fleet and node-check against a real Prometheus
scraping a node page. The schemas are the files in ``src/llmscale/schemas`` (what the package
ships), checked here to be what the pydantic models generate.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from llmscale.cli import app
from llmscale.cli.common import configure_logging
from llmscale.errors import ConfigError
from llmscale.schemas import COMMANDS, SCHEMA_VERSION, load_schema, schema_of
from support.page_server import PageServer, page_server  # noqa: F401  (fixture)
from support.prometheus_server import PrometheusServer, TargetGroup, prometheus_server  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
#: a short backtest: 10 simulated minutes of the azure-like preset at a tenth of its rate
WORKLOAD = ["--workload", "azure-like", "--duration-s", "600", "--rate-scale", "0.1"]
BOUNDS = ["--min-replicas", "1", "--max-replicas", "8", "--initial-replicas", "2"]


def _cli(*args: str) -> Any:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, f"{args}: exit {res.exit_code}\n{res.stdout}\n{res.stderr}\n{res.exception!r}"
    return res


def _valid(command: str, doc: dict[str, Any]) -> dict[str, Any]:
    assert doc["schema_version"] == SCHEMA_VERSION
    jsonschema.validate(doc, load_schema(command), cls=jsonschema.Draft202012Validator)
    return doc


def test_the_shipped_schemas_are_what_the_models_generate() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_schemas.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    for command in COMMANDS:
        assert load_schema(command) == schema_of(command)
        jsonschema.Draft202012Validator.check_schema(load_schema(command))


def test_the_backtest_row_schema_has_every_summary_key() -> None:
    from llmscale.backtest.results import SUMMARY_KEYS

    row = load_schema("backtest")["$defs"]["BacktestRow"]
    assert set(SUMMARY_KEYS) <= set(row["properties"]) and set(SUMMARY_KEYS) <= set(row["required"])
    assert {"infeasible", "slo_attainment_feasible"} <= set(row["required"])


@pytest.fixture(scope="module")
def decisions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    """A real backtest's decision log, and its --json document (stdout)."""
    d = tmp_path_factory.mktemp("bt") / "decisions.jsonl"
    res = _cli("backtest", *WORKLOAD, *BOUNDS, "--policy", "slo", "--decisions", str(d), "--json", "-")
    yield d, json.loads(res.stdout)


def test_backtest(decisions: tuple[Path, dict[str, Any]]) -> None:
    doc = _valid("backtest", decisions[1])
    assert [r["policy"] for r in doc["results"]] == ["slo"] and doc["oracle"] is not None


def test_a_document_outside_the_schema_is_refused(decisions: tuple[Path, dict[str, Any]]) -> None:
    """The check has teeth: a row without a documented field, or with an undocumented one, fails."""
    doc = json.loads(json.dumps(decisions[1]))
    del doc["results"][0]["slo_attainment_feasible"]
    with pytest.raises(jsonschema.ValidationError, match="slo_attainment_feasible"):
        _valid("backtest", doc)
    doc = json.loads(json.dumps(decisions[1]))
    doc["results"][0]["surprise"] = 1
    with pytest.raises(jsonschema.ValidationError, match="surprise"):
        _valid("backtest", doc)


def test_analyze_and_diagnose(decisions: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    log = str(decisions[0])
    out = tmp_path / "analyze.json"
    res = _cli("analyze", log, "--json", str(out))
    doc = _valid("analyze", json.loads(out.read_text()))
    assert doc["ticks"] > 0 and set(doc["summaries"]) == {"knee", "phase", "effect", "predictors"}
    assert "ticks from" in res.stdout  # the terminal's text is still printed
    doc = _valid("diagnose", json.loads(_cli("diagnose", log, "--json", "-").stdout))
    assert doc["ticks"] > 0


def test_calibrate(tmp_path: Path) -> None:
    """Two plain --save-result files (vLLM's default shape) at two loads: two points to fit."""
    files = []
    for k, (completed, tpot_ms) in enumerate([(4, 22.5), (40, 31.0)]):
        serve = tmp_path / f"serve-{k}.json"
        serve.write_text(
            json.dumps(
                {
                    "duration": 10.0,
                    "completed": completed,
                    "total_input_tokens": 512 * completed,
                    "total_output_tokens": 200 * completed,
                    "mean_ttft_ms": 50.0,
                    "median_tpot_ms": tpot_ms,
                    "mean_tpot_ms": tpot_ms,
                    "median_itl_ms": tpot_ms,
                    "model_id": "meta-llama/Meta-Llama-3-8B",
                }
            )
        )
        files.append(str(serve))
    out = str(tmp_path / "p.yaml")
    res = _cli("calibrate", *files, "--gpu", "h100", "--tp", "1", "--out", out, "--json", "-")
    doc = _valid("calibrate", json.loads(res.stdout))
    assert doc["inputs"] == [{"source": f, "kind": "serve-summary", "points": 1} for f in files]
    assert len(doc["points"]) == 2


@pytest.mark.slow
def test_tune(tmp_path: Path) -> None:
    out = tmp_path / "t.yaml"
    args = [*WORKLOAD, *BOUNDS, "--param", "target_utilization", "--trials", "2", "--jobs", "1"]
    res = CliRunner().invoke(app, ["tune", *args, "--out", str(out), "--json", "-"])
    assert res.exit_code in (0, 1), res.stderr  # 1: no trial reached the target (still a document)
    doc = _valid("tune", json.loads(res.stdout))
    assert len(doc["trials"]) == 2 and doc["report"].endswith("-trials.html")


def test_tenants() -> None:
    doc = _valid(
        "tenants", json.loads(_cli("tenants", str(REPO / "examples" / "tenants.yaml"), "--json", "-").stdout)
    )
    assert [t["tenant"] for t in doc["tenants"]] == ["chat", "code"]


def test_loadgen_and_its_logs_at_each_level(tmp_path: Path) -> None:
    """loadgen's document against a real emulate fleet; httpx's request lines only at debug, and
    every stderr line a JSON object with --log-format json."""
    from llmscale.emulate import EmulateConfig, EmulatorThread

    args = ["--workload", "azure-like", "--max-requests", "3", "--rate-scale", "5", "--max-duration-s", "60"]
    with EmulatorThread(EmulateConfig(replicas=1, port=0)) as fleet:
        target = ["loadgen", "--target", fleet.base_url, *args]
        out = tmp_path / "loadgen.json"  # a file: with "-" the table would share stderr with the logs
        res = _cli(*target, "--json", str(out), "--log-format", "json", "--log-level", "debug")
        doc = _valid("loadgen", json.loads(out.read_text()))
        assert doc["sent"] == 3
        lines = [json.loads(x) for x in res.stderr.splitlines() if x.startswith("{")]
        assert [x for x in res.stderr.splitlines() if x.strip() and not x.startswith("{")] == []
        http = [x for x in lines if x["logger"] == "httpx"]
        assert http and all({"time", "level", "logger", "message"} <= set(x) for x in lines)
        assert any("POST" in x["message"] for x in http)
        quiet = _cli(*target, "--log-level", "info")
        assert "httpx" not in quiet.stderr and "HTTP Request" not in quiet.stderr


def test_json_log_lines_carry_the_extra_fields(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json")
    try:
        logging.getLogger("llmscale.test").info("tick %d", 7, extra={"replicas": 3, "path": Path("/x")})
        logging.getLogger("httpx").info("HTTP Request: GET http://x")  # a request line: DEBUG only
    finally:
        configure_logging("warning", "text")
    (line,) = capsys.readouterr().err.splitlines()
    doc = json.loads(line)
    assert doc["message"] == "tick 7" and doc["replicas"] == 3 and doc["path"] == "/x"
    assert (doc["level"], doc["logger"]) == ("INFO", "llmscale.test") and doc["time"].endswith("+00:00")


def test_options_read_their_environment_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """LLMSCALE_<OPTION> sets an option; the command line wins over it."""
    out = tmp_path / "nope" / "x.json"
    monkeypatch.setenv("LLMSCALE_JSON", str(out))
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path / "missing.jsonl")])
    assert res.exit_code != 0 and "nope" in str(res.exception)  # --json from the variable, checked first
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path / "missing.jsonl"), "--json", "-"])
    assert res.exit_code != 0 and "nope" not in str(res.exception) + res.stderr
    help_text = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["diagnose", "--help"]).stdout
    assert "LLMSCALE_SELECTOR" in help_text and "LLMSCALE_LOG_FORMAT" in help_text


def test_calibrate_takes_selector_and_its_deprecated_name(tmp_path: Path) -> None:
    help_text = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["calibrate", "--help"]).stdout
    assert "--selector" in help_text and "--prometheus-selector" not in help_text
    res = CliRunner().invoke(
        app,
        [
            "calibrate",
            "--prometheus-selector",
            'job="a"',
            "--selector",
            'job="b"',
            "--out",
            str(tmp_path / "p"),
        ],
    )
    assert "give --selector only" in str(res.exception)


_NODE_PAGE = (
    "node_memory_MemAvailable_bytes 5.1e10\n"
    'node_disk_io_time_seconds_total{device="nvme0n1"} 12.5\n'
    'container_cpu_cfs_periods_total{container="vllm"} 1000\n'
    'container_cpu_cfs_throttled_periods_total{container="vllm"} 10\n'
)


def test_node_check(
    tmp_path: Path,
    page_server: PageServer,  # noqa: F811
    prometheus_server: Callable[..., PrometheusServer],  # noqa: F811
) -> None:
    import time

    page_server.set("/node/metrics", _NODE_PAGE)
    prom = prometheus_server(
        scrape_interval_s=0.5,
        static_targets=[
            TargetGroup(
                [f"127.0.0.1:{page_server.port}"], {"node": "n1", "__metrics_path__": "/node/metrics"}
            )
        ],
    )
    out = tmp_path / "node.json"
    args = [
        "node-check",
        "--prometheus",
        prom.url,
        "--node",
        'node="n1"',
        "--window",
        "5s",
        "--json",
        str(out),
    ]
    deadline = time.monotonic() + 40.0
    while True:  # until Prometheus has the page's samples (bounded)
        res = CliRunner().invoke(app, args)
        doc = json.loads(res.stdout)
        if doc["readings"]["free_memory_bytes"] is not None or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert res.exit_code in (0, 1), res.stderr
    _valid("node-check", doc)
    assert _valid("node-check", json.loads(out.read_text())) == doc
    assert doc["readings"]["free_memory_bytes"] == pytest.approx(5.1e10)


def test_backtest_disaggregated_json_follows_its_schema(tmp_path: Path) -> None:
    out, log = tmp_path / "disagg.json", tmp_path / "disagg.jsonl"
    _cli("backtest", *WORKLOAD, "--disaggregated", "--policy", "slo-disagg,static", "--no-oracle",
         "--json", str(out), "--decisions", str(log))  # fmt: skip
    doc = _valid("backtest-disaggregated", json.loads(out.read_text()))
    assert [r["policy"] for r in doc["results"]] == ["slo-disagg", "static"]
    for row in doc["results"]:
        pools = row["pools"]
        assert row["gpu_hours"] == pytest.approx(
            pools["prefill"]["gpu_hours"] + pools["decode"]["gpu_hours"], abs=1e-4
        )
    assert {json.loads(line)["pool"] for line in log.read_text().splitlines()} == {"prefill", "decode"}


def test_backtest_disaggregated_refuses_what_only_one_pool_has(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app, ["backtest", *WORKLOAD, "--disaggregated", "--report", str(tmp_path / "r.html")]
    )
    assert isinstance(res.exception, ConfigError), res.exception  # the command line's exit 2
    assert "--disaggregated writes the table" in str(res.exception)
