"""Every command, fed malformed files from outside: exit 0 or 2, one line naming the file, no hang.

Issue 19 tried 569 malformed inputs on the commands and found tracebacks (names over the system's
limit, /dev/zero, a gzip bomb, deep YAML/JSON, binary files), hangs (a FIFO as any path) and
silently wrong answers (mixed time zones, duplicate columns or chunks, outputs over inputs,
``--replicas 0``, ``max_up_step: 0``, ``chunked_prefill: "no"``, a profile of another model).
Here each is a row of a table, run in-process through typer's CliRunner (in a thread, so a hang
fails the row after a bound instead of stopping the suite), a few through the real entry point
as subprocesses, and Hypothesis generates more of each kind. A row passes only when the command
exits 2 with one line naming the file (or the option) and no other exception escapes, or when it
exits as a correct run would.

The commands are stopped right after their inputs are read by one more invalid option that is
checked later (``--burst-share 2`` in backtest, ``--seeds 0`` after the policy config,
``--prometheus`` without ``--start`` in calibrate), so no row simulates anything: the whole
module runs in well under a minute.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from llmscale.cli import app
from llmscale.errors import LlmscaleError

#: how long one in-process command may take before the row counts as a hang
HANG_S = 30.0

HEADER = "arrival_s,input_tokens,output_tokens\n"
TRACE = HEADER + "".join(f"{i * 0.5},{100 + i},{20 + i}\n" for i in range(20))
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
PROFILE = (
    "format: llmscale calibration profile v1\nmodel: {model}\ngpu: {gpu}\ntp: {tp}\n"
    "engine: {{max_num_seqs: 256, max_num_batched_tokens: 8192, chunked_prefill: {chunked}}}\n"
    "factors: {{bandwidth: 1.0, compute: 1.0, host: 1.0, comm: 1.0}}\n"
)
CALIBRATION_CSV = (
    "model,gpu,tp,input_tokens,output_tokens,batch_size,latency_s\nllama-3-8b,h100,1,128,128,1,0.9\n"
)
RUN_CONFIG = (
    "target: {{name: llama, selector: {{app: llama}}}}\n"
    "metrics: {{source: prometheus, prometheus: {{url: 'http://127.0.0.1:9'}}}}\n"
    "policy: {{name: static, params: {{replicas: 2}}}}\n"
    "{extra}"
)


@dataclass(frozen=True)
class Outcome:
    code: int
    message: str


def invoke(argv: list[str], cwd: Path) -> Outcome:
    """Run ``llmscale argv`` in-process as ``main()`` would: an LlmscaleError is its exit code and
    message; any other exception fails the test with its traceback; a hang fails it after HANG_S."""
    box: dict[str, object] = {}

    def target() -> None:
        old = os.getcwd()
        os.chdir(cwd)
        try:
            box["result"] = CliRunner().invoke(app, argv, catch_exceptions=True)
        finally:
            os.chdir(old)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(HANG_S)
    if t.is_alive():
        pytest.fail(f"llmscale {' '.join(argv)}: still running after {HANG_S:.0f} s (a hang)")
    result = box["result"]
    exc = result.exception  # type: ignore[attr-defined]
    if exc is None or isinstance(exc, SystemExit):
        return Outcome(result.exit_code, result.output)  # type: ignore[attr-defined]
    if isinstance(exc, LlmscaleError):
        return Outcome(exc.exit_code, str(exc))
    text = "".join(traceback.format_exception(exc))
    pytest.fail(f"llmscale {' '.join(argv)} raised {type(exc).__name__}, not an LlmscaleError:\n{text}")


def refused(outcome: Outcome, *needles: str) -> None:
    """Exit 2, one line, naming each needle (a file name or an option)."""
    assert outcome.code == 2, outcome
    assert "\n" not in outcome.message.strip(), outcome.message
    for needle in needles:
        assert needle in outcome.message, (needle, outcome.message)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One directory of every malformed input, shared by the rows (built once: about 10 ms)."""
    d = tmp_path_factory.mktemp("corpus")
    (d / "trace.csv").write_text(TRACE)
    os.mkfifo(d / "fifo")
    (d / "binary.csv").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    (d / "nul.csv").write_bytes(HEADER.encode() + b"1,2,3\x00\n")
    (d / "bom.csv").write_bytes(b"\xef\xbb\xbf" + TRACE.encode())
    (d / "dupcol.csv").write_text(
        "arrival_s,input_tokens,output_tokens,input_tokens\n0,10,10,99\n1,10,10,99\n"
    )
    (d / "mixedtz.csv").write_text(
        AZURE_HEADER
        + "2023-11-16 18:00:00+00:00,10,10\n2023-11-16 18:00:10+05:00,10,10\n2023-11-16 18:00:20Z,10,10\n"
    )
    (d / "badtz.csv").write_text(
        AZURE_HEADER + "2023-11-16 18:00:00+99:99,10,10\n2023-11-16 18:00:10+99:99,10,10\n"
    )
    chunks = d / "chunks"
    chunks.mkdir()
    row = "0,1.0,1.0,Gamma,1.0,1.0\n600,1.0,1.0,Gamma,1.0,1.0\n"
    (chunks / "chunk-1-trace.csv").write_text(row)
    (chunks / "chunk-01-trace.csv").write_text(row)
    # 16 MiB of zeros in ~16 kB: over the limit the rows below set (the real one is 2 GiB)
    (d / "bomb.csv.gz").write_bytes(gzip.compress(HEADER.encode() + b"0" * (16 * 1024**2)))
    (d / "deep.yaml").write_text("slo:\n  x: " + "[" * 5000 + "]" * 5000 + "\n")
    (d / "deep-block.yaml").write_text("slo:\n" + "".join("  " * i + "- \n" for i in range(1, 200)))
    (d / "control.yaml").write_text("slo: \x1f\n")
    (d / "dupkey.yaml").write_text("slo:\n  target_utilization: 0.8\n  target_utilization: 0.5\n")
    (d / "alias.yaml").write_text(
        "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nslo: {x: [*c, *c, *c, *c, *c, *c, *c, *c, *c]}\n"
    )
    (d / "upstep0.yaml").write_text("slo:\n  guards: {max_up_step: 0}\n")
    (d / "maxrep.yaml").write_text("slo:\n  guards: {max_replicas: 100000000000}\n")
    (d / "standby.yaml").write_text("slo:\n  standby_replicas: 1000000\n")
    (d / "other.yaml").write_text(PROFILE.format(model="llama-3-70b", gpu="a100-80gb", tp=4, chunked="true"))
    (d / "chunked-no.yaml").write_text(
        PROFILE.format(model="llama-3-8b", gpu="h100-80gb", tp=1, chunked='"no"')
    )
    (d / "deep.jsonl").write_text('{"time_s": 1, "inputs": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    (d / "dupkey.jsonl").write_text('{"time_s": 1, "time_s": 2, "inputs": {}}\n')
    (d / "tenants-trace.yaml").write_text(
        "pool: {gpu: h100-80gb, gpus: 1}\n"
        "tenants:\n  chat:\n    model: llama-3-8b\n    profile: 3g.40gb\n    quota: 1\n"
        "    policy: static\n    max_replicas: 1\n    workload: {trace: trace.csv}\n"
    )
    (d / "calib-bom.csv").write_bytes(b"\xef\xbb\xbf" + CALIBRATION_CSV.encode())
    (d / "run-dup.yaml").write_text(RUN_CONFIG.format(extra="policy: {name: static}\n"))
    (d / "run-upstep0.yaml").write_text(RUN_CONFIG.format(extra="guards: {max_up_step: 0}\n"))
    (d / "run-maxrep.yaml").write_text(RUN_CONFIG.format(extra="guards: {max_replicas: 1e11}\n"))
    (d / "run-fifo-log.yaml").write_text(RUN_CONFIG.format(extra=f"decision_log: {{path: {d / 'fifo'}}}\n"))
    (d / "run-log-is-config.yaml").write_text(
        RUN_CONFIG.format(extra=f"decision_log: {{path: {d / 'run-log-is-config.yaml'}}}\n")
    )
    (d / "tenants-dup.yaml").write_text("pool: {gpu: h100-80gb}\npool: {gpu: a100-80gb}\ntenants: {}\n")
    return d


LONG = "x" * 5000  # over NAME_MAX (255) and PATH_MAX (4096) alike

# Each row: id, argv (``{d}`` is the corpus directory), and the needles of a refusal, or None for a
# command that must run (its exit code, 2 here, comes from the stopping option named in the needle).
BACKTEST = ["backtest", "--policy", "static", "--no-oracle", "--burst-share", "2"]
ROWS: list[tuple[str, list[str], tuple[str, ...]]] = [
    # ---- traces
    ("trace-fifo", [*BACKTEST, "--trace", "{d}/fifo"], ("fifo", "named pipe")),
    ("trace-dev-zero", [*BACKTEST, "--trace", "/dev/zero"], ("/dev/zero", "character device")),
    ("trace-binary", [*BACKTEST, "--trace", "{d}/binary.csv"], ("binary.csv",)),
    ("trace-nul", [*BACKTEST, "--trace", "{d}/nul.csv", "--format", "csv"], ("nul.csv",)),
    ("trace-long-name", [*BACKTEST, "--trace", "{d}/" + LONG], ("file name too long",)),
    ("trace-missing", [*BACKTEST, "--trace", "{d}/absent.csv"], ("absent.csv", "not found")),
    ("trace-dup-columns", [*BACKTEST, "--trace", "{d}/dupcol.csv"], ("dupcol.csv", "appears twice")),
    ("trace-mixed-tz", [*BACKTEST, "--trace", "{d}/mixedtz.csv"], ("mixedtz.csv", "one zone")),
    ("trace-impossible-tz", [*BACKTEST, "--trace", "{d}/badtz.csv"], ("badtz.csv", "no time zone")),
    ("trace-dup-chunks", [*BACKTEST, "--trace", "{d}/chunks"], ("chunk-01-trace.csv", "chunk-1-trace.csv")),
    # a BOM is read, and the run goes on to the option that stops it
    ("trace-bom-is-read", [*BACKTEST, "--trace", "{d}/bom.csv"], ("--burst-share",)),
    # ---- policy configs (stopped by --seeds 0, checked after the file is read)
    (
        "policy-config-fifo",
        ["backtest", "--seeds", "0", "--policy-config", "{d}/fifo"],
        ("fifo", "named pipe"),
    ),
    (
        "policy-config-binary",
        ["backtest", "--seeds", "0", "--policy-config", "{d}/binary.csv"],
        ("binary.csv",),
    ),
    ("policy-config-deep", ["backtest", "--seeds", "0", "--policy-config", "{d}/deep.yaml"], ("deep.yaml",)),
    (
        "policy-config-deep-block",
        ["backtest", "--seeds", "0", "--policy-config", "{d}/deep-block.yaml"],
        ("deep-block.yaml", "nested"),
    ),
    (
        "policy-config-dup-key",
        ["backtest", "--seeds", "0", "--policy-config", "{d}/dupkey.yaml"],
        ("dupkey.yaml", "duplicate key 'target_utilization'"),
    ),
    (
        "policy-config-control-char",
        ["backtest", "--seeds", "0", "--policy-config", "{d}/control.yaml"],
        ("control.yaml", "not valid YAML"),
    ),
    (
        "policy-config-alias",
        ["backtest", "--seeds", "0", "--policy-config", "{d}/alias.yaml"],
        ("alias.yaml", "alias"),
    ),
    (
        "policy-config-max-up-step-0",
        ["backtest", "--seeds", "0", "--policy-config", "{d}/upstep0.yaml"],
        ("upstep0.yaml", "max_up_step = 0"),
    ),
    (
        "policy-config-max-replicas-1e11",
        ["backtest", "--seeds", "0", "--policy-config", "{d}/maxrep.yaml"],
        ("maxrep.yaml", "max_replicas"),
    ),
    # ---- options
    ("replicas-0", ["backtest", "--replicas", "0"], ("--replicas = 0",)),
    ("standby-million", ["backtest", "--standby-replicas", "1000000"], ("--standby-replicas",)),
    (
        "standby-above-max",
        ["backtest", "--max-replicas", "8", "--standby-replicas", "9"],
        ("--standby-replicas = 9", "[0, 8]"),
    ),
    (
        "policy-config-standby-above-max",
        [
            "backtest",
            "--policy",
            "slo",
            "--no-oracle",
            "--workload",
            "flash-crowd",
            "--duration-s",
            "60",
            "--max-replicas",
            "8",
            "--initial-replicas",
            "1",
            "--policy-config",
            "{d}/standby.yaml",
        ],
        ("standby.yaml", "standby_replicas = 1000000", "max_replicas (8)"),
    ),
    # ---- calibration profiles (read when the engine settings are, after the workload)
    (
        "profile-other-model",
        ["backtest", "--policy", "static", "--workload", "flash-crowd", "--calibration", "{d}/other.yaml"],
        ("other.yaml", "llama-3-70b", "llama-3-8b"),
    ),
    (
        "profile-chunked-no",
        [
            "backtest",
            "--policy",
            "static",
            "--workload",
            "flash-crowd",
            "--calibration",
            "{d}/chunked-no.yaml",
        ],
        ("chunked-no.yaml", "chunked_prefill = 'no'"),
    ),
    ("profile-fifo", ["backtest", "--workload", "flash-crowd", "--calibration", "{d}/fifo"], ("fifo",)),
    # ---- outputs
    (
        "json-over-trace",
        [*BACKTEST, "--trace", "{d}/trace.csv", "--json", "{d}/trace.csv"],
        ("--json", "--trace"),
    ),
    (
        "report-is-decisions",
        [*BACKTEST, "--report", "{d}/out.html", "--decisions", "{d}/out.html"],
        ("--decisions", "--report"),
    ),
    ("json-fifo", [*BACKTEST, "--json", "{d}/fifo"], ("--json", "named pipe")),
    ("json-device", [*BACKTEST, "--json", "/dev/full"], ("--json /dev/full", "character device")),
    ("json-long-name", [*BACKTEST, "--json", "{d}/" + LONG], ("--json", "file name too long")),
    # ---- run's config
    ("run-fifo", ["run", "--config", "{d}/fifo", "--once"], ("fifo", "named pipe")),
    ("run-binary", ["run", "--config", "{d}/binary.csv", "--once"], ("binary.csv",)),
    ("run-deep", ["run", "--config", "{d}/deep.yaml", "--once"], ("deep.yaml",)),
    (
        "run-dup-key",
        ["run", "--config", "{d}/run-dup.yaml", "--once"],
        ("run-dup.yaml", "duplicate key 'policy'"),
    ),
    (
        "run-max-up-step-0",
        ["run", "--config", "{d}/run-upstep0.yaml", "--once"],
        ("run-upstep0.yaml", "max_up_step"),
    ),
    (
        "run-max-replicas",
        ["run", "--config", "{d}/run-maxrep.yaml", "--once"],
        ("run-maxrep.yaml", "max_replicas"),
    ),
    (
        "run-log-fifo",
        ["run", "--config", "{d}/run-fifo-log.yaml", "--once"],
        ("decision_log.path", "named pipe"),
    ),
    (
        "run-log-is-config",
        ["run", "--config", "{d}/run-log-is-config.yaml", "--once"],
        ("decision_log.path", "--config"),
    ),
    ("run-long-name", ["run", "--config", "{d}/" + LONG, "--once"], ("file name too long",)),
    # ---- analyze / diagnose
    ("analyze-fifo", ["analyze", "{d}/fifo"], ("fifo", "named pipe")),
    ("analyze-dev-zero", ["analyze", "/dev/zero"], ("/dev/zero",)),
    ("analyze-binary", ["analyze", "{d}/binary.csv"], ("binary.csv",)),
    ("analyze-deep", ["analyze", "{d}/deep.jsonl"], ("deep.jsonl", "nested")),
    ("analyze-dup-key", ["analyze", "{d}/dupkey.jsonl"], ("dupkey.jsonl", "duplicate key 'time_s'")),
    (
        "analyze-report-over-log",
        ["analyze", "{d}/dupkey.jsonl", "--report", "{d}/dupkey.jsonl"],
        ("--report",),
    ),
    ("diagnose-fifo", ["diagnose", "{d}/fifo"], ("fifo",)),
    # ---- calibrate (stopped by --prometheus without --start, checked after the files are read)
    (
        "calibrate-bom-is-read",
        ["calibrate", "{d}/calib-bom.csv", "--prometheus", "http://127.0.0.1:9"],
        ("--start",),
    ),
    ("calibrate-fifo", ["calibrate", "{d}/fifo"], ("fifo",)),
    ("calibrate-binary", ["calibrate", "{d}/binary.csv"], ("binary.csv",)),
    (
        "calibrate-out-over-input",
        ["calibrate", "{d}/calib-bom.csv", "--out", "{d}/calib-bom.csv"],
        ("--out",),
    ),
    # ---- tune: its SQLite storage is an output too
    (
        "tune-storage-over-trace",
        ["tune", "--policy", "slo", "--trace", "{d}/trace.csv", "--storage", "{d}/trace.csv"],
        ("--storage", "--trace"),
    ),
    # ---- tenants
    ("tenants-fifo", ["tenants", "{d}/fifo"], ("fifo",)),
    ("tenants-deep", ["tenants", "{d}/deep.yaml"], ("deep.yaml",)),
    ("tenants-dup-key", ["tenants", "{d}/tenants-dup.yaml"], ("tenants-dup.yaml", "duplicate key 'pool'")),
    ("tenants-binary", ["tenants", "{d}/binary.csv"], ("binary.csv",)),
    (
        "tenants-json-over-a-tenants-trace",
        ["tenants", "{d}/tenants-trace.yaml", "--json", "{d}/trace.csv"],
        ("--json", "tenants.chat.workload.trace"),
    ),
    (
        "tenants-json-over-config",
        ["tenants", "{d}/tenants-dup.yaml", "--json", "{d}/tenants-dup.yaml"],
        ("--json",),
    ),
]


def _argv(argv: list[str], d: Path) -> list[str]:
    return [a.replace("{d}", str(d)) for a in argv]


@pytest.mark.parametrize(("argv", "needles"), [pytest.param(a, n, id=i) for i, a, n in ROWS])
def test_a_malformed_input_is_refused_in_one_line(corpus: Path, argv: list[str], needles: tuple[str, ...]):
    refused(invoke(_argv(argv, corpus), corpus), *needles)


def test_a_gzip_bomb_is_refused_by_its_inflated_size(corpus: Path, monkeypatch: pytest.MonkeyPatch):
    """The limit is 2 GiB; 1 MiB here, so the 16 MiB member is refused after ~16 MiB of inflating."""
    import llmscale.workloads._io as trace_io

    monkeypatch.setattr(trace_io, "MAX_TRACE_BYTES", 1024**2)
    outcome = invoke([*BACKTEST, "--trace", str(corpus / "bomb.csv.gz")], corpus)
    refused(outcome, "bomb.csv.gz", "inflates to over the 1 MiB")


def test_the_inputs_were_not_overwritten(corpus: Path):
    """The rows that aimed an output at an input left the input as it was."""
    refused(invoke(_argv(ROWS[-1][1], corpus), corpus), "--json")
    assert (corpus / "trace.csv").read_text() == TRACE
    assert (corpus / "calib-bom.csv").read_bytes().startswith(b"\xef\xbb\xbfmodel,")


# ---- the real entry point, as a user runs it ---------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        pytest.param(["backtest", "--trace", "{d}/fifo"], "named pipe", id="backtest-trace-fifo"),
        pytest.param(["run", "--config", "{d}/run-fifo-log.yaml"], "named pipe", id="run-decision-log-fifo"),
        pytest.param(["analyze", "/dev/zero"], "/dev/zero", id="analyze-dev-zero"),
    ],
)
def test_the_command_exits_2_without_a_traceback(corpus: Path, argv: list[str], needle: str):
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "llmscale.cli", *_argv(argv, corpus)],
        capture_output=True,
        text=True,
        timeout=60,  # a hang (the FIFO) fails here
        env=env,
        cwd=corpus,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmscale: error: ") and needle in lines[0], lines


# ---- generated inputs ---------------------------------------------------------------------------------

FUZZ = settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.sampled_from(["no", "yes", "off", "on", "~", ".inf", "1e11", "0"]),
)
_documents = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["slo", "guards", "max_up_step", "a"]), inner),
    ),
    max_leaves=12,
)


def _damage(text: str, how: str, depth: int) -> str:
    """A YAML/JSON text made malformed in one of the ways issue 19 found."""
    if how == "deep":
        return text + "\nz: " + "[" * depth + "]" * depth + "\n"
    if how == "dup":
        return "k: 1\n" + text + "k: 2\n"
    if how == "alias":
        return "a: &a [1]\nb: *a\n" + text
    if how == "bom":
        return "\ufeff" + text
    return text


@FUZZ
@given(
    doc=_documents,
    how=st.sampled_from(["none", "deep", "dup", "alias", "bom"]),
    depth=st.integers(1, 3000),
    command=st.sampled_from(["policy-config", "run", "tenants", "calibration"]),
)
def test_generated_yaml_documents(tmp_path: Path, doc, how: str, depth: int, command: str):
    import yaml

    text = _damage(yaml.safe_dump({"slo": doc}, allow_unicode=True), how, depth)
    path = tmp_path / "doc.yaml"
    path.write_text(text, encoding="utf-8")
    argv = {
        "policy-config": ["backtest", "--seeds", "0", "--policy-config", str(path)],
        "run": ["run", "--config", str(path), "--once"],
        "tenants": ["tenants", str(path)],
        "calibration": ["backtest", "--workload", "flash-crowd", "--calibration", str(path)],
    }[command]
    outcome = invoke(argv, tmp_path)
    assert outcome.code == 2, outcome  # never a valid document by chance: each stops with exit 2
    assert "\n" not in outcome.message.strip(), outcome.message


_json_values = st.recursive(
    _scalars.filter(lambda v: not isinstance(v, float) or v == v),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["time_s", "inputs", "replicas", "x"]), inner),
    ),
    max_leaves=10,
)


@FUZZ
@given(lines=st.lists(_json_values, min_size=1, max_size=4), deep=st.integers(0, 3000), dup=st.booleans())
def test_generated_decision_logs(tmp_path: Path, lines, deep: int, dup: bool):
    text = "".join(json.dumps(v) + "\n" for v in lines)
    if deep:
        text += '{"time_s": 1, "inputs": ' + "[" * deep + "]" * deep + "}\n"
    if dup:
        text += '{"time_s": 1, "time_s": 1, "inputs": {}}\n'
    path = tmp_path / "d.jsonl"
    path.write_text(text)
    outcome = invoke(["analyze", str(path)], tmp_path)
    assert outcome.code in (0, 2), outcome
    if outcome.code == 2:
        assert "\n" not in outcome.message.strip(), outcome.message


_cells = st.one_of(
    st.integers(-5, 10**8).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(
        ["", "x", '"1"', "2023-11-16 18:00:00", "2023-11-16 18:00:00+05:00", "2023-11-16 18:00:00Z"]
    ),
)


@FUZZ
@given(
    header=st.lists(
        st.sampled_from(
            [
                "arrival_s",
                "input_tokens",
                "output_tokens",
                "TIMESTAMP",
                "ContextTokens",
                "GeneratedTokens",
                "x",
            ]
        ),
        min_size=1,
        max_size=5,
    ),
    rows=st.lists(st.lists(_cells, min_size=1, max_size=5), min_size=0, max_size=5),
    bom=st.booleans(),
    gz=st.booleans(),
)
def test_generated_traces(tmp_path: Path, header, rows, bom: bool, gz: bool):
    text = ",".join(header) + "\n" + "".join(",".join(r) + "\n" for r in rows)
    raw = (b"\xef\xbb\xbf" if bom else b"") + text.encode()
    path = tmp_path / ("t.csv.gz" if gz else "t.csv")
    path.write_bytes(gzip.compress(raw) if gz else raw)
    outcome = invoke([*BACKTEST, "--trace", str(path)], tmp_path)
    # a trace that loads reaches --burst-share 2; one that does not is refused naming the file
    assert outcome.code == 2, outcome
    assert "\n" not in outcome.message.strip(), outcome.message
    assert "--burst-share" in outcome.message or str(path) in outcome.message, outcome.message


# ---- files read by a running controller: state and tokens -----------------------------------------


@pytest.mark.parametrize(
    "name", ["fifo", "binary.csv", "deep.jsonl", "dupkey.jsonl", "absent.json"], ids=lambda n: n
)
def test_unreadable_state_is_ignored_with_a_warning_not_a_traceback(corpus: Path, name: str, caplog):
    """`run` starts from no state when its file cannot be read (the store's contract): a binary file
    raised UnicodeDecodeError, a FIFO blocked the start, deep JSON raised RecursionError."""
    from llmscale.cluster.state_store import FileStateStore

    box: list[object] = []
    t = threading.Thread(target=lambda: box.append(FileStateStore(corpus / name).load()), daemon=True)
    t.start()
    t.join(HANG_S)
    assert not t.is_alive(), "loading the state blocked"
    assert box == [None]
    if name != "absent.json":
        assert name in caplog.text


@pytest.mark.parametrize("name", ["fifo", "binary.csv", "/dev/zero"], ids=lambda n: n.strip("/"))
def test_an_unreadable_token_file_is_a_config_error(corpus: Path, name: str):
    from llmscale.emulate.config import admin_token
    from llmscale.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^token_file .*: cannot read it: ") as err:
        admin_token(str(corpus / name))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["fifo", LONG, "absent"], ids=["fifo", "long-name", "absent"])
def test_an_unusable_tokenizer_path_is_a_config_error(corpus: Path, name: str):
    from llmscale.emulate.tokens import load_token_counter
    from llmscale.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^--tokenizer .*: no tokenizer.json there \("):
        load_token_counter(str(corpus / name))
