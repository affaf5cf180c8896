"""Every file a command reads, with one value or one byte range poisoned: refused in one line.

``test_cli_inputs.py`` covers malformed *files* (FIFOs, devices, bombs, deep or duplicated YAML,
mixed time zones). Here each input starts as a valid file of its kind and Hypothesis poisons it the
way an outsider's file is broken: one field set to NaN, an infinity, a negative number, 1e308,
1e400, a word, an empty cell or a 400-digit number; the file cut at any byte; binary bytes, a NUL
or Latin-1 text spliced in. Kinds: traces in every format (``--trace`` and ``--history-from``), the
``--gpu-prices`` YAML, ``calibrate``'s closed-batch CSV and ``vllm bench serve`` JSON, the guards'
``schedule`` of a policy config, and the ``--lengths`` text.

A row passes when the command exits 2 with one line that names the file (a poisoned number also
names its line or request and its field, where the format has them), or, when the poison left a
valid file (a cut after the last row, a word in a column not read), when it reaches the option that
stops it once its inputs are read. Never a traceback, never a hang (``invoke`` bounds each run).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli_inputs import BACKTEST, invoke

FUZZ = settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

#: values no numeric field of any input may take; each must be refused naming the file
NONSENSE = ["nan", "NaN", "inf", "-inf", "+Inf", "-1", "-1e308", "1e308", "1e400", "x", "9" * 400]
#: values a field may take or not, depending on the field: either outcome is fine
AMBIGUOUS = ["0", "0.0", "1e-300", "", "true", "null", "0x10", "1_000", " 7 "]
POISON = st.sampled_from(NONSENSE + AMBIGUOUS)


def _damage(raw: bytes, how: str, at: int) -> bytes:
    """``raw`` cut at byte ``at``, or with binary, a NUL or Latin-1 text spliced in there."""
    at = at % (len(raw) + 1)
    if how == "cut":
        return raw[:at]
    if how == "binary":
        return raw[:at] + bytes(range(256)) + raw[at:]
    if how == "nul":
        return raw[:at] + b"\x00" + raw[at:]
    if how == "latin1":
        return raw[:at] + "d\xe9j\xe0 vu".encode("latin-1") + raw[at:]
    return raw


DAMAGE = st.sampled_from(["none", "cut", "binary", "nul", "latin1"])


def _one_line(outcome) -> str:
    assert outcome.code == 2, outcome
    message = outcome.message.strip()
    assert "\n" not in message, message
    return message


# ---- traces of every format ----------------------------------------------------------------------

#: per format: file name, header (None: none), one row of cells, and the cells read as numbers
FORMATS: dict[str, tuple[str, str | None, list[str], list[int]]] = {
    "csv": ("t.csv", "arrival_s,input_tokens,output_tokens", ["{t}", "100", "20"], [0, 1, 2]),
    "azure": (
        "azure.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens",
        ["2023-11-16 18:00:{t:02d}.000000", "100", "20"],
        [1, 2],
    ),
    "burstgpt": (
        "burstgpt.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
        ["{t}", "ChatGPT", "100", "20", "120", "Conversation log"],
        [0, 2, 3],
    ),
    "servegen": ("chunk-1-trace.csv", None, ["{w}", "1.0", "1.0", "Gamma", "1.0", "1.0"], [0, 1, 2, 4, 5]),
}
ROWS = 6


def _trace(fmt: str, poison_row: int, poison_col: int, poison: str) -> tuple[str, bytes, bool]:
    """A valid trace of ``fmt`` with one cell poisoned; whether the cell is read as a number."""
    if fmt == "mooncake":
        lines = []
        for i in range(ROWS):
            row = {"timestamp": 1000 * i, "input_length": 100, "output_length": 20, "hash_ids": [i]}
            text = json.dumps(row)
            if i == poison_row % ROWS:
                key = ("timestamp", "input_length", "output_length")[poison_col % 3]
                text = text.replace(f'"{key}": {row[key]}', f'"{key}": {poison or chr(34) * 2}')
            lines.append(text)
        return "mooncake.jsonl", ("\n".join(lines) + "\n").encode(), True
    name, header, cells, numeric = FORMATS[fmt]
    out = [header] if header is not None else []
    col = poison_col % len(cells)
    for i in range(ROWS):
        row = [c.format(t=i, w=600 * i) for c in cells]
        if i == poison_row % ROWS:
            row[col] = poison
        out.append(",".join(row))
    return name, ("\n".join(out) + "\n").encode(), col in numeric


def _trace_refused(message: str, path: Path, poison: str, numeric: bool, stopper: str) -> None:
    if stopper in message:
        # read as valid: never a nonsense number in a column read as one
        assert not (numeric and poison in NONSENSE), (poison, message)
        return
    assert str(path) in message or path.name in message, message


@FUZZ
@given(
    fmt=st.sampled_from(["csv", "azure", "burstgpt", "servegen", "mooncake"]),
    row=st.integers(0, ROWS - 1),
    col=st.integers(0, 5),
    poison=POISON,
    how=DAMAGE,
    at=st.integers(0, 10_000),
)
def test_a_poisoned_trace_is_refused_naming_the_file(tmp_path: Path, fmt, row, col, poison, how, at):
    name, raw, numeric = _trace(fmt, row, col, poison)
    path = tmp_path / name
    path.write_bytes(_damage(raw, how, at))
    outcome = invoke([*BACKTEST, "--trace", str(path), "--format", fmt], tmp_path)
    message = _one_line(outcome)
    _trace_refused(message, path, poison, numeric and how == "none", "--burst-share")
    if numeric and how == "none" and poison in NONSENSE and fmt != "servegen":
        assert "line" in message or "row" in message, message  # where in the file


#: a stopper checked after --history-from and --gpu-prices are read
LATE_STOP = ["--disaggregated", "--seeds", "2"]
SMALL = ["backtest", "--policy", "static", "--no-oracle", "--trace"]


def _small(tmp_path: Path) -> list[str]:
    """A backtest of a 6-request trace: the run reads its other inputs in milliseconds."""
    trace = tmp_path / "small.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{i},100,20\n" for i in range(6)))
    return [*SMALL, str(trace)]


def test_a_poisoned_history_and_price_file_are_refused_by_the_command(tmp_path: Path) -> None:
    # --history-from is read by the loader --trace uses (fuzzed above), --gpu-prices by
    # load_gpu_prices (fuzzed below); here the command itself, once each. Both are read before the
    # run is sized, so each refusal comes in well under a second of work; the generated cases
    # still call the readers directly, without the command's start-up.
    name, raw, _ = _trace("azure", 2, 1, "nan")
    history = tmp_path / name
    history.write_bytes(raw)
    message = _one_line(invoke([*_small(tmp_path), "--history-from", str(history), *LATE_STOP], tmp_path))
    assert f"{history}, line 4, field 'ContextTokens'" in message, message
    prices = tmp_path / "prices.yaml"
    prices.write_text("gpus:\n  h100-80gb: {price_per_gpu_hour: .nan}\n")
    message = _one_line(invoke([*_small(tmp_path), "--gpu-prices", str(prices), *LATE_STOP], tmp_path))
    assert "prices.yaml: gpus.h100-80gb.price_per_gpu_hour = nan" in message, message


@FUZZ
@given(
    gpu=st.sampled_from(["h100-80gb", "a100-80gb", "h200", "no-such-gpu"]),
    field=st.sampled_from(["price_per_gpu_hour", "max_gpus", "bare"]),
    poison=POISON,
    how=DAMAGE,
    at=st.integers(0, 200),
)
def test_poisoned_gpu_prices_are_refused_naming_the_file_and_field(
    tmp_path: Path, gpu, field, poison, how, at
):
    from llmscale.errors import LlmscaleError
    from llmscale.mix.prices import load_gpu_prices

    entry = poison if field == "bare" else f"{{{field}: {poison or '~'}}}"
    text = f"gpus:\n  a100-80gb: {{price_per_gpu_hour: 1.3, max_gpus: 4}}\n  {gpu}: {entry}\n"
    path = tmp_path / "prices.yaml"
    path.write_bytes(_damage(text.encode(), how, at))
    try:
        load_gpu_prices(path)
    except LlmscaleError as e:
        message = str(e)
        assert e.exit_code == 2 and "\n" not in message.strip(), message
        assert "prices.yaml" in message, message
        if how == "none" and poison in NONSENSE and gpu != "no-such-gpu":
            assert gpu in message, message  # the field's path: gpus.<gpu>[.field]
        return
    assert not (how == "none" and poison in NONSENSE), text


# ---- calibrate: closed-batch CSV and vllm bench serve JSON --------------------------------------------

CALIBRATION_HEAD = "model,gpu,tp,input_tokens,output_tokens,batch_size,latency_s"
CALIBRATION_ROW = ["llama-3-8b", "h100", "1", "128", "128", "1", "0.9"]


@FUZZ
@given(col=st.integers(0, 6), row=st.integers(0, 2), poison=POISON, how=DAMAGE, at=st.integers(0, 400))
def test_a_poisoned_calibration_csv_is_refused_naming_the_file(tmp_path: Path, col, row, poison, how, at):
    rows = []
    for i in range(3):
        cells = list(CALIBRATION_ROW)
        cells[4] = str(64 * (i + 1))
        cells[6] = str(0.5 * (i + 1))
        if i == row:
            cells[col] = poison
        rows.append(",".join(cells))
    path = tmp_path / "calib.csv"
    path.write_bytes(_damage(("\n".join([CALIBRATION_HEAD, *rows]) + "\n").encode(), how, at))
    message = _one_line(invoke(["calibrate", str(path), "--prometheus", "http://127.0.0.1:9"], tmp_path))
    if "--start" in message:
        assert not (how == "none" and poison in NONSENSE and col >= 2), message
        return
    assert "calib.csv" in message, message


SERVE_FIELDS = ["input_lens", "output_lens", "ttfts", "itls", "duration"]


@FUZZ
@given(
    field=st.sampled_from(SERVE_FIELDS),
    index=st.integers(0, 2),
    poison=POISON,
    how=DAMAGE,
    at=st.integers(0, 400),
)
def test_a_poisoned_bench_result_is_refused_naming_the_file(tmp_path: Path, field, index, poison, how, at):
    doc: dict[str, object] = {
        "model_id": "llama-3-8b",
        "duration": 10.0,
        "input_lens": [100, 200, 300],
        "output_lens": [20, 30, 40],
        "ttfts": [0.1, 0.2, 0.3],
        "itls": [[0.02] * 19, [0.02] * 29, [0.02] * 39],
    }
    bad: object = poison
    with_value = json.dumps(doc)
    if field == "duration":
        with_value = with_value.replace('"duration": 10.0', f'"duration": {json.dumps(bad)}')
    else:
        values = list(doc[field])  # type: ignore[call-overload]
        values[index] = bad
        with_value = with_value.replace(
            json.dumps({field: doc[field]})[1:-1], json.dumps({field: values})[1:-1]
        )
    path = tmp_path / "serve.json"
    path.write_bytes(_damage(with_value.encode(), how, at))
    argv = ["calibrate", str(path), "--gpu", "h100-80gb", "--tp", "1", "--prometheus", "http://127.0.0.1:9"]
    message = _one_line(invoke(argv, tmp_path))
    if "--start" in message:
        assert how != "none", message  # a string where a number is read never passes
        return
    assert "serve.json" in message, message
    if how == "none" and field != "duration":
        assert f"request {index}" in message and field in message, message


# ---- the guards' schedule in a policy config ------------------------------------------------------------


@FUZZ
@given(
    field=st.sampled_from(["cron", "duration_s", "min_replicas", "max_replicas", "timezone", "name"]),
    poison=st.one_of(
        POISON, st.sampled_from(["61 * * * *", "* * *", "@reboot", "Mars/Olympus", "0 0 31 2 *"])
    ),
    how=DAMAGE,
    at=st.integers(0, 300),
)
def test_a_poisoned_schedule_is_refused_naming_the_file_and_field(tmp_path: Path, field, poison, how, at):
    rule: dict[str, object] = {
        "name": "office",
        "cron": "30 7 * * 1-5",
        "duration_s": 39600,
        "min_replicas": 2,
        "timezone": "Europe/Berlin",
    }
    rule[field] = poison
    text = yaml.safe_dump({"slo": {"guards": {"min_replicas": 1, "max_replicas": 8, "schedule": [rule]}}})
    path = tmp_path / "policy.yaml"
    path.write_bytes(_damage(text.encode(), how, at))
    message = _one_line(invoke(["backtest", "--seeds", "0", "--policy-config", str(path)], tmp_path))
    if "--seeds" in message:
        return  # read as valid (a name may be anything; a cut may leave a valid document)
    assert "policy.yaml" in message, message


# ---- --lengths -------------------------------------------------------------------------------------------


@FUZZ
@given(
    text=st.one_of(
        st.text(max_size=40),
        st.builds(
            "prompt={}:{},output={}".format,
            POISON,
            POISON,
            POISON,
        ),
    )
)
def test_any_lengths_text_is_read_or_refused_naming_the_option(tmp_path: Path, text: str):
    if "\x00" in text:
        return  # an argument cannot hold a NUL
    trace = tmp_path / "chunk-1-trace.csv"
    trace.write_text("0,1.0,1.0,Gamma,1.0,1.0\n600,1.0,1.0,Gamma,1.0,1.0\n")
    message = _one_line(invoke([*BACKTEST, "--trace", str(trace), "--lengths", text], tmp_path))
    assert "--lengths" in message or "--burst-share" in message, message
    if "--burst-share" in message:
        for part in text.split(","):
            _, _, value = part.partition("=")
            for number in value.split(":"):
                if number.strip() in NONSENSE:
                    pytest.fail(f"--lengths {text!r} was read: {message}")


def test_nonsense_values_are_not_numbers_anyone_accepts() -> None:
    # the table above: each is non-finite, negative, past any bound, or not a number
    for v in NONSENSE:
        try:
            x = float(v)
        except ValueError:
            continue
        assert not math.isfinite(x) or x < 0 or x >= 1e308, v
