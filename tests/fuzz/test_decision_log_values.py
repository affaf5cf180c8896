"""Numbers no writer wrote, in the files the other fuzz modules start from a valid copy of.

``test_cli_input_values.py`` poisons traces, price files, calibration inputs and schedules with
NaN, infinities, negatives and 400-digit numbers; these are the readers it did not reach, each
found with a traceback or a silently wrong answer:

* ``analyze`` / ``diagnose`` decision logs: a 400-digit integer in any number raised
  OverflowError; a ``trace_id`` that is a list or an object raised TypeError (unhashable); a
  log of 1e308 serving replicas raised ZeroDivisionError in the knee, one of 1e308 bandwidth a
  ValueError in DBSCAN; -3 serving replicas read 20 unchanged ticks as "20 scale-up ticks"; a
  policy name holding U+2028 (valid JSON, raw in a string) was split into two lines, "not JSON";
* a calibration profile with a 400-digit factor: OverflowError (``emulate --calibration``), and
  the same in a policy config's ``guards`` (``cooldown_up_s``, ``max_up_ratio``);
* Mooncake JSONL: a repeated key was read as its last value; a first line longer than the
  64 KiB sniffed for the format, or one that is not JSON, was refused as lacking its fields;
* ``tenants``: ``quota: true`` / ``gpus: true`` were read as 1;
* a ServeGen file named ``chunk-N-trace.csv`` whose first row has a bad family: "column '1'
  appears twice" (it was read as a total-rate file's header);
* Prometheus answering 1e308 at every step: ``calibrate --prometheus`` raised OverflowError (a
  running batch float() could not hold), ``analyze`` / ``diagnose`` printed numpy's overflow
  warnings; -5 serving replicas was read as a fleet.

A row passes when the command exits 2 with one line naming the file, the line where the format
has lines, and the field. Everything here is read, not simulated: the module runs in seconds.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli_inputs import BACKTEST, invoke

FUZZ = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _one_line(outcome) -> str:
    assert outcome.code == 2, outcome
    message = outcome.message.strip()
    assert "\n" not in message, message
    return message


# ---- decision logs ---------------------------------------------------------------------------------


def _tick(i: int) -> dict[str, Any]:
    """One tick of a backtest decision log (the shape TickRecord.as_json writes), load rising."""
    load = 2.0 + i
    return {
        "time_s": 15.0 * (i + 1),
        "policy": "slo",
        "replicas": {"spec": 4, "pending": 0, "loading": 0, "warmup": 0, "ready": 4, "draining": 0},
        "desired_before_guards": 4,
        "desired": 4,
        "rule": "forecast",
        "inputs": {"arrival_rps": load, "ttft_p99_s": 0.1 + 0.001 * i * i, "trend_rps_per_s": -0.5},
        "note": "",
        "guard": None,
        "guard_note": "",
        "applied": False,
        "observed": {
            "request_rate_rps": load,
            "generation_tps": 200.0 * load,
            "ttft_p99_s": 0.1 + 0.001 * i * i,
            "queue_waiting": 0.0,
            "serving_replicas": 4.0,
            "queue_entropy": 0.3 + 0.01 * i,
            "bw_saturation_p95": 0.4 + 0.01 * i,
            "tenant_drift": 0.01,
        },
    }


TICKS = [_tick(i) for i in range(40)]
#: every number a log line carries, by its path
NUMBER_FIELDS = [
    ("time_s",),
    ("replicas", "spec"),
    ("replicas", "ready"),
    ("desired",),
    ("inputs", "arrival_rps"),
    ("inputs", "trend_rps_per_s"),
    ("observed", "request_rate_rps"),
    ("observed", "serving_replicas"),
    ("observed", "ttft_p99_s"),
    ("observed", "queue_entropy"),
    ("observed", "bw_saturation_p95"),
]


def _log(tmp: Path, ticks: list[dict[str, Any]], raw: dict[int, str] | None = None) -> Path:
    """The ticks as a JSONL file; ``raw`` replaces the placeholder string in line i by raw JSON."""
    lines = [json.dumps(t, ensure_ascii=False) for t in ticks]
    for i, text in (raw or {}).items():
        lines[i] = lines[i].replace('"__RAW__"', text)
    path = tmp / "decisions.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _set(tick: dict[str, Any], field: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(tick)
    node = out
    for key in field[:-1]:
        node = node[key]
    node[field[-1]] = value
    return out


@pytest.mark.parametrize(
    ("change", "says"),
    [
        pytest.param(
            {"trace_id": [1]},
            "decisions.jsonl:8: field trace_id must be a string, got [1]",
            id="trace-id-list",
        ),
        pytest.param(
            {"trace_id": {"a": 1}}, "decisions.jsonl:8: field trace_id must be a string", id="trace-id-object"
        ),
        pytest.param(
            {"observed": {**TICKS[7]["observed"], "serving_replicas": -3.0}},
            "decisions.jsonl:8: field observed.serving_replicas = -3.0: a replica count "
            "must be in [0, 10,000]",
            id="serving-negative",
        ),
        pytest.param(
            {"observed": {**TICKS[7]["observed"], "serving_replicas": 1e308}},
            "field observed.serving_replicas = 1e+308: a replica count",
            id="serving-1e308",
        ),
        pytest.param(
            {"replicas": {**TICKS[7]["replicas"], "spec": -1}},
            "decisions.jsonl:8: field replicas.spec = -1: a replica count",
            id="spec-negative",
        ),
        pytest.param({"desired": 20_000}, "decisions.jsonl:8: field desired = 20000", id="desired-over-max"),
    ],
)
@pytest.mark.parametrize("command", ["analyze", "diagnose"])
def test_a_log_line_with_an_impossible_value_is_refused(
    tmp_path: Path, change: dict[str, Any], says: str, command: str
) -> None:
    ticks = list(TICKS)
    ticks[7] = {**ticks[7], **change}
    path = _log(tmp_path, ticks)
    assert says in _one_line(invoke([command, str(path)], tmp_path))


@FUZZ
@given(
    field=st.sampled_from(NUMBER_FIELDS),
    row=st.integers(0, len(TICKS) - 1),
    digits=st.integers(310, 5000),
    sign=st.sampled_from(["", "-"]),
    command=st.sampled_from(["analyze", "diagnose"]),
)
def test_a_number_float_cannot_hold_is_refused_naming_line_and_field(
    tmp_path: Path, field: tuple[str, ...], row: int, digits: int, sign: str, command: str
) -> None:
    """json reads 400 digits as a Python int; float() of it raised OverflowError. (Python refuses
    integers of more than 4,300 digits itself: "not accepted JSON", also one line.)"""
    ticks = list(TICKS)
    ticks[row] = _set(ticks[row], field, "__RAW__")
    path = _log(tmp_path, ticks, {row: sign + "9" * digits})
    message = _one_line(invoke([command, str(path)], tmp_path))
    assert f"decisions.jsonl:{row + 1}" in message, message
    if digits <= 4300:
        shown = ".".join(field[-2:]) if len(field) > 1 and field[0] != "replicas" else ".".join(field)
        assert shown.split(".")[-1] in message and "characters" in message, message


@FUZZ
@given(
    field=st.sampled_from(NUMBER_FIELDS[4:]),
    value=st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308, 1e-308, 0.0]),
    rows=st.lists(st.integers(0, len(TICKS) - 1), min_size=1, max_size=40, unique=True),
    command=st.sampled_from(["analyze", "diagnose"]),
)
def test_extreme_signal_values_are_analysed_or_refused_never_a_traceback(
    tmp_path: Path, field: tuple[str, ...], value: float, rows: list[int], command: str
) -> None:
    """NaN and infinities are a missing reading (a writer rounds a NaN to NaN); 1e308 is a number
    the analyses must survive: it overflowed the knee's range and DBSCAN's coordinates."""
    ticks = [_set(t, field, value) if i in rows else t for i, t in enumerate(TICKS)]
    path = _log(tmp_path, ticks)
    out = invoke([command, str(path), "--json", str(tmp_path / "out.json")], tmp_path)
    if out.code == 0:
        json.loads((tmp_path / "out.json").read_text())  # a whole document, no NaN where JSON has none
        return
    message = _one_line(out)
    assert "decisions.jsonl" in message and field[-1] in message, message


def test_a_string_holding_a_line_separator_stays_on_its_line(tmp_path: Path) -> None:
    """U+2028 is valid raw inside a JSON string; str.splitlines() broke the line there."""
    ticks = [{**t, "policy": "slo\u2028b"} for t in TICKS]
    path = _log(tmp_path, ticks)
    out = invoke(["diagnose", str(path)], tmp_path)
    assert out.code == 0, out


def test_a_log_of_one_instant_and_one_tick_is_read(tmp_path: Path) -> None:
    """Degenerate but possible logs: every tick at one time (tick length 0), a single tick."""
    same = [{**t, "time_s": 15.0} for t in TICKS]
    for ticks in (same, TICKS[:1], TICKS[::-1]):
        path = _log(tmp_path, ticks)
        for command in ("analyze", "diagnose"):
            out = invoke([command, str(path)], tmp_path)
            assert out.code == 0, (command, out)


# ---- calibration profiles --------------------------------------------------------------------------

PROFILE = (
    "format: llmscale calibration profile v1\nmodel: llama-3-8b\ngpu: h100-80gb\ntp: 1\n"
    "engine: {{max_num_seqs: 256, max_num_batched_tokens: 8192, chunked_prefill: true}}\n"
    "factors: {{bandwidth: {bandwidth}, compute: 1.0, host: 1.0, comm: 1.0}}\n"
)


@pytest.mark.parametrize("factor", ["9" * 400, "-" + "9" * 400])
def test_a_profile_factor_float_cannot_hold_is_refused(tmp_path: Path, factor: str) -> None:
    from llmscale.errors import ConfigError
    from llmscale.perf.profile import load_profile

    path = tmp_path / "profile.yaml"
    path.write_text(PROFILE.format(bandwidth=factor))
    with pytest.raises(ConfigError, match=r"profile\.yaml: factors: bandwidth = -?99999") as err:
        load_profile(path)
    assert "\n" not in str(err.value) and len(str(err.value)) < 200


def test_a_state_time_float_cannot_hold_is_a_state_error() -> None:
    from llmscale.controller.persist import StateFormatError, _time_in

    with pytest.raises(StateFormatError, match="last_up_s = 9999"):
        _time_in(int("9" * 400), "last_up_s")


# ---- Mooncake JSONL ---------------------------------------------------------------------------------


def _mooncake(**fields: Any) -> str:
    return json.dumps({"timestamp": 0, "input_length": 100, "output_length": 20, "hash_ids": [1], **fields})


@pytest.mark.parametrize(
    ("text", "says"),
    [
        pytest.param(
            _mooncake()
            + "\n"
            + '{"timestamp": 0, "timestamp": 9000, "input_length": 1, "output_length": 1}\n',
            "mooncake.jsonl, line 2: invalid JSON: duplicate key 'timestamp'",
            id="duplicate-key",
        ),
        pytest.param(
            _mooncake()[:-1] + ",}\n",
            "mooncake.jsonl, line 1: invalid JSON: Expecting property name",
            id="first-line-not-json",
        ),
    ],
)
def test_a_malformed_mooncake_line_is_refused_for_what_it_is(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "mooncake.jsonl"
    path.write_text(text)
    assert says in _one_line(invoke([*BACKTEST, "--trace", str(path)], tmp_path))


def test_a_mooncake_first_line_longer_than_the_sniffed_head_is_read(tmp_path: Path) -> None:
    """12,000 hash ids (a 6M-token prompt, under the 10M limit): ~90 KiB, over the 64 KiB sniffed."""
    path = tmp_path / "long.jsonl"
    path.write_text(
        _mooncake(input_length=6_000_000, hash_ids=list(range(12_000)))
        + "\n"
        + _mooncake(timestamp=500)
        + "\n"
    )
    assert "--burst-share" in _one_line(invoke([*BACKTEST, "--trace", str(path)], tmp_path))


# ---- tenants ------------------------------------------------------------------------------------------

TENANTS = (
    "pool: {{gpu: h100-80gb, gpus: {gpus}}}\n"
    "tenants:\n  chat:\n    model: llama-3-8b\n    profile: 3g.40gb\n    quota: {quota}\n"
    "    policy: static\n    max_replicas: {max_replicas}\n    workload: {{preset: flash-crowd}}\n"
)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        pytest.param({"gpus": "true"}, "pool.gpus", id="gpus-true"),
        pytest.param({"quota": "true"}, "tenants.chat.quota", id="quota-true"),
        pytest.param({"max_replicas": "true"}, "tenants.chat.max_replicas", id="max-replicas-true"),
        pytest.param({"quota": "1.0"}, "tenants.chat.quota", id="quota-float"),
    ],
)
def test_a_boolean_or_float_count_in_a_tenants_file_is_refused(
    tmp_path: Path, values: dict[str, str], field: str
) -> None:
    path = tmp_path / "tenants.yaml"
    path.write_text(TENANTS.format(**({"gpus": 1, "quota": 1, "max_replicas": 1} | values)))
    message = _one_line(invoke(["tenants", str(path)], tmp_path))
    assert "tenants.yaml" in message and field in message, message


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        # lax pydantic read `true` as 1.0: a one-second TTFT SLO nobody wrote
        pytest.param(
            ("max_replicas: 1\n", "max_replicas: 1\n    slo_ttft_s: true\n"), "slo_ttft_s", id="slo-true"
        ),
        pytest.param(("tenants:\n  chat:", "tenants:\n  '':"), "tenants.", id="empty-name"),
    ],
)
def test_a_boolean_number_or_an_empty_tenant_name_is_refused(
    tmp_path: Path, edit: tuple[str, str], says: str
) -> None:
    path = tmp_path / "tenants.yaml"
    text = TENANTS.format(gpus=1, quota=1, max_replicas=1)
    assert edit[0] in text
    path.write_text(text.replace(edit[0], edit[1], 1))
    message = _one_line(invoke(["tenants", str(path)], tmp_path))
    assert "tenants.yaml" in message and says in message, message


def test_the_analyses_survive_extreme_loads_from_any_source() -> None:
    """A Prometheus range is read without the log's edge: loads of 1e-306 req/s per replica (a
    range that squares to 0: ZeroDivisionError) and bandwidths of 1e308 (doubled to inf: DBSCAN's
    ValueError) give no knee and leave those ticks out of the phase diagram."""
    import numpy as np

    from llmscale.analyze.knee import find_knee
    from llmscale.analyze.phase import cluster_phase_diagram

    load = np.linspace(1.0, 40.0, 40) * 1e-307
    assert find_knee(load, 0.1 + load * 1e300) is None
    assert find_knee(np.linspace(1.0, 40.0, 40) * 1e306, np.linspace(0.1, 4.0, 40) ** 2) is None
    h = np.full(40, 0.5)
    u = np.full(40, 0.5)
    u[:20] = 1e308
    phase = cluster_phase_diagram(h, u, np.full(40, 15.0))
    assert phase.bandwidth.size == 20 and sum(c.num_ticks for c in phase.clusters) == 20


@pytest.mark.parametrize("name", ["cooldown_up_s", "cooldown_down_s", "stabilization_down_s", "max_up_ratio"])
def test_a_guard_setting_float_cannot_hold_is_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(f"slo:\n  guards: {{{name}: {'9' * 400}}}\n")
    message = _one_line(invoke(["backtest", "--seeds", "0", "--policy-config", str(path)], tmp_path))
    assert f"policy.yaml: slo.guards.{name} = 999999999999... (400 characters)" in message, message


# ---- ServeGen chunk files -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "says"),
    [
        pytest.param(
            "0,1,1,Pareto,1,1", "field 'iat_family': unknown inter-arrival family 'Pareto'", id="family"
        ),
        pytest.param("0,1,1,Gamma,,", "field 'p1': not a number: ''", id="empty-parameter"),
        pytest.param("0,,,,,", "field 'rate_rps': not a rate: ''", id="empty-rate"),
    ],
)
@pytest.mark.parametrize("fmt", ["auto", "servegen"])
def test_a_chunk_file_with_a_bad_first_row_names_the_field(
    tmp_path: Path, row: str, says: str, fmt: str
) -> None:
    """A chunk named chunk-N-trace.csv is a chunk even when its first row does not parse: read as
    a total-rate file, "0,1,1,Pareto,1,1" was a header whose "column '1' appears twice"."""
    path = tmp_path / "chunk-1-trace.csv"
    path.write_text(row + "\n600,1,1,Gamma,1,1\n")
    message = _one_line(invoke([*BACKTEST, "--trace", str(path), "--format", fmt], tmp_path))
    assert f"chunk-1-trace.csv, line 1, {says}" in message, message


# ---- the same numbers answered by Prometheus ---------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "says"),
    [
        pytest.param("1e308", "= 1e+308: beyond +-1e+15", id="1e308"),
        pytest.param(
            "-5",
            "count(vllm:num_requests_running)' at t=1000: field value = -5.0: a replica count",
            id="negative",
        ),
    ],
)
@pytest.mark.parametrize("command", ["analyze", "diagnose", "calibrate"])
def test_a_prometheus_answer_no_fleet_gives_is_refused_naming_the_query(
    tmp_path: Path, value: str, says: str, command: str
) -> None:
    """Every query answered with one value at each step: 1e308 reached the step-time model as a
    running batch float() could not hold (calibrate: OverflowError) and overflowed the analyses
    (RuntimeWarnings on stderr); -5 serving replicas was read as a fleet."""
    from test_prometheus_answers import commands, matrix, run_cli

    from support.answer_server import Reply, answer_server

    times = [1000.0 + 60.0 * i for i in range(11)]
    body = json.dumps(matrix([(t, value) for t in times])).encode()
    with answer_server(lambda path, params: Reply(body)) as server:
        code, _, err = run_cli(commands(server.url, tmp_path)[command])
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert server.url in err, err
    if command != "calibrate":
        assert f"prometheus {server.url}: query " in err and says in err, err
    elif value == "1e308":
        assert f"prometheus {server.url}: query " in err and "outside [" in err, err
    # calibrate at -5: no step had a sequence running, so none was measured (said so, naming the server)


@pytest.mark.parametrize("key", ["temperature", "top_p"])
def test_emulate_answers_400_to_a_sampling_number_float_cannot_hold(key: str) -> None:
    """A request body is JSON from outside too: math.isfinite(10**400) raised OverflowError."""
    from llmscale.emulate.openai_api import ApiError, _finite

    with pytest.raises(ApiError) as err:
        _finite({key: int("9" * 400)}, key)
    assert err.value.status == 400 and err.value.param == key
    assert "999999999999... (400 characters)" in str(err.value)
