"""Malformed traces in every format: the loaders answer with a Workload or the project's own error.

Each example starts from a small valid trace of one format and breaks it: one cell replaced by
a hostile value (1e30, 2^63, NaN, "true", a year, epoch seconds or milliseconds, unicode
digits...), rows dropped or duplicated, the whole file replaced by noise, or gzip damaged.
Properties:

* no exception escapes but :class:`TraceFormatError` / :class:`ConfigError` (no traceback);
* a TraceFormatError names the file, and a line inside it when it gives one;
* a token count that is not a whole number in [0, MAX_TOKENS] is reported at its own line and
  field (checked against an oracle written here, independently of the loaders);
* what loads satisfies the workload's limits: finite times, a span within the limit, token
  counts in [1, MAX_TOKENS].

Example counts are bounded so each format's fuzzer runs in seconds (``FUZZ`` below).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmscale.errors import ConfigError, TraceFormatError
from llmscale.workloads import load_trace
from llmscale.workloads.limits import MAX_SPAN_S, MAX_TOKENS
from llmscale.workloads.model import Workload

#: 120 examples a test in CI (the whole file runs in ~5 s); LLMSCALE_FUZZ_EXAMPLES=5000 searches
#: deeper, with fresh random examples, on a quiet machine.
_DEEP = int(os.environ.get("LLMSCALE_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=_DEEP or 120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=not _DEEP,
    database=None,
)

#: values that broke, or could break, a loader: overflow, NaN, unit slips, types, encodings
HOSTILE = [
    "",
    " ",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e30",
    "1e300",
    "-1e300",
    "1e-320",
    "-1",
    "-0",
    "0",
    "0.5",
    "1.0",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551616",
    "9" * 400,
    "1_000",
    "0x10",
    "1e",
    "١٢٣",
    "true",
    "null",
    '"5"',
    "2023",
    "1700000000",
    "1700000000.25",
    "1700000000000",
    "0001-01-01 00:00:00",
    "9999-12-31 23:59:59",
    "2023-13-45 25:61:61",
    "2023-11-16 18:17:03.9799600+25:00",
    "2023-11-16T18:17:03Z",
    "\x00",
    "a,b",
    "\u2028",
]
hostile_cell = st.one_of(
    st.sampled_from(HOSTILE),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.text(max_size=12),
)


def _token_count_ok(text: str) -> bool:
    """The oracle: is ``text`` a token count the loaders must accept? (whole, 0..MAX_TOKENS)"""
    try:
        x = float(text.strip())
    except ValueError:
        return False
    return math.isfinite(x) and 0 <= x <= MAX_TOKENS and x == math.floor(x)


def _check_workload(w: Workload) -> None:
    assert np.all(np.isfinite(w.arrival_s))
    assert w.duration_s <= MAX_SPAN_S
    assert int(w.input_tokens.min()) >= 1 and int(w.output_tokens.min()) >= 1
    assert int(w.input_tokens.max()) <= MAX_TOKENS and int(w.output_tokens.max()) <= MAX_TOKENS


def _load(path: Path, fmt: str) -> Workload | Exception:
    """load_trace's outcome; any exception other than the project's own fails the test here."""
    try:
        return load_trace(path, fmt, max_span_s=MAX_SPAN_S, max_requests=20_000)
    except (TraceFormatError, ConfigError) as e:
        if isinstance(e, TraceFormatError):
            assert e.path is not None and Path(e.path).name == path.name, str(e)
            if e.line is not None:
                assert 1 <= e.line <= max(1, _line_count(path)), str(e)
        return e


def _line_count(path: Path) -> int:
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except Exception:
            return 1
    text = raw.decode("utf-8", errors="replace")
    # Lines as an editor counts them (\n, \r\n or \r), which is how errors must number them.
    return text.replace("\r\n", "\n").replace("\r", "\n").count("\n") + 1


# ---- one valid trace per format, as rows of cells -------------------------------------------------

rows_strategy = st.lists(
    st.tuples(st.floats(0, 50, allow_nan=False), st.integers(1, 4000), st.integers(1, 800)),
    min_size=1,
    max_size=12,
).map(lambda rows: sorted(rows))


def _csv(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join([",".join(header), *(",".join(r) for r in rows)]) + "\n"


def _azure_rows(rows: list[tuple[float, int, int]]) -> list[list[str]]:
    base = np.datetime64("2023-11-16T18:15:46.6805900", "ns")
    return [
        [str(base + np.timedelta64(int(t * 1e9), "ns")).replace("T", " "), str(i), str(o)] for t, i, o in rows
    ]


FORMATS: dict[str, tuple[list[str], Callable[[list[tuple[float, int, int]]], list[list[str]]], str]] = {
    # format: header, cells of the valid rows, file name
    "azure": (["TIMESTAMP", "ContextTokens", "GeneratedTokens"], _azure_rows, "t.csv"),
    "csv": (
        ["arrival_s", "input_tokens", "output_tokens"],
        lambda rows: [[repr(t), str(i), str(o)] for t, i, o in rows],
        "t.csv",
    ),
    "burstgpt": (
        ["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"],
        lambda rows: [
            [repr(t), "ChatGPT", str(i), str(o), str(i + o), "Conversation log"] for t, i, o in rows
        ],
        "t.csv",
    ),
}
TOKEN_FIELDS = {
    "azure": ("ContextTokens", "GeneratedTokens"),
    "csv": ("input_tokens", "output_tokens"),
    "burstgpt": ("Request tokens", "Response tokens"),
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@FUZZ
@given(rows=rows_strategy, data=st.data())
def test_csv_formats_with_one_hostile_cell(fmt: str, rows, data) -> None:
    header, render, name = FORMATS[fmt]
    cells = render(rows)
    r = data.draw(st.integers(0, len(cells) - 1), label="row")
    c = data.draw(st.integers(0, len(header) - 1), label="column")
    value = data.draw(hostile_cell, label="value")
    cells[r][c] = value
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text(_csv(header, cells), encoding="utf-8")
        outcome = _load(path, fmt)
    if isinstance(outcome, Workload):
        _check_workload(outcome)
    column = header[c]
    one_field = "," not in value and '"' not in value and "\n" not in value and "\r" not in value
    printable = value.strip() != "" and value.isprintable()
    if column in TOKEN_FIELDS[fmt] and one_field and printable and not _token_count_ok(value):
        # The hostile cell is the only bad one: the error is about it, at its line and field
        # (BurstGPT drops failed rows, but a bad count is still an error, not a skip).
        assert isinstance(outcome, TraceFormatError), (value, outcome)
        assert outcome.line == r + 2 and outcome.field == column, (value, str(outcome))


def _mooncake_text(rows: list[tuple[float, int, int]]) -> list[dict[str, object]]:
    return [
        {"timestamp": int(t * 1000), "input_length": i, "output_length": o, "hash_ids": [k, k + 1]}
        for k, (t, i, o) in enumerate(rows)
    ]


json_value = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**80), max_value=2**80),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=8),
        st.sampled_from([2**63, 10**30, 1e30, "100", "true", 1.5, -1, 0]),
    ),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=6,
)


@FUZZ
@given(rows=rows_strategy, data=st.data())
def test_mooncake_with_one_hostile_value(rows, data) -> None:
    objs = _mooncake_text(rows)
    r = data.draw(st.integers(0, len(objs) - 1), label="row")
    key = data.draw(st.sampled_from(["timestamp", "input_length", "output_length", "hash_ids"]), label="key")
    value = data.draw(json_value, label="value")
    objs[r][key] = value
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        path.write_text("\n".join(json.dumps(o) for o in objs) + "\n", encoding="utf-8")
        outcome = _load(path, "mooncake")
    if isinstance(outcome, Workload):
        _check_workload(outcome)
    is_count = type(value) in (int, float) and _token_count_ok(str(value))
    if key in ("input_length", "output_length") and not is_count:
        # true, "100", 2^63, 1.5, null...: refused at their own line and field.
        assert isinstance(outcome, TraceFormatError), (value, outcome)
        assert outcome.line == r + 1 and outcome.field == key, (value, str(outcome))


@FUZZ
@given(
    lines=st.lists(
        st.one_of(
            st.text(max_size=30),
            st.sampled_from(
                [
                    "{",
                    "[" * 5000,
                    '{"timestamp": 1, "input_length": ' + "9" * 5000 + ', "output_length": 1}',
                    '{"timestamp": NaN, "input_length": 1, "output_length": 1}',
                    '{"timestamp": 1e400, "input_length": 1, "output_length": 1}',
                    '{"timestamp": 1, "input_length": 1}',
                    "[1, 2, 3]",
                    '"text"',
                ]
            ),
        ),
        max_size=6,
    )
)
def test_mooncake_lines_of_noise(lines: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        good = '{"timestamp": 0, "input_length": 10, "output_length": 2}'
        path.write_text("\n".join([good, *lines]) + "\n", encoding="utf-8")
        outcome = _load(path, "mooncake")
    if isinstance(outcome, Workload):
        _check_workload(outcome)


# ---- ServeGen: per-client chunks and total-rate files ----------------------------------------------

chunk_rows = st.lists(
    st.tuples(st.floats(0.0, 5.0), st.sampled_from(["Gamma", "Weibull", ""]), st.floats(0.2, 3.0)),
    min_size=1,
    max_size=6,
)


@FUZZ
@given(rows=chunk_rows, data=st.data())
def test_servegen_chunk_with_one_hostile_cell(rows, data) -> None:
    cells = [
        [str(600 * k), repr(rate), "1.0", fam, repr(shape), repr(1.0 / max(rate, 1e-3) / shape)]
        for k, (rate, fam, shape) in enumerate(rows)
    ]
    r = data.draw(st.integers(0, len(cells) - 1), label="row")
    c = data.draw(st.integers(0, 5), label="column")
    cells[r][c] = data.draw(hostile_cell, label="value")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "chunk-3-trace.csv"
        path.write_text("\n".join(",".join(row) for row in cells) + "\n", encoding="utf-8")
        outcome = _load(path, "servegen")
    if isinstance(outcome, Workload):
        _check_workload(outcome)


@FUZZ
@given(rates=st.lists(st.floats(0.0, 5.0), min_size=1, max_size=6), data=st.data())
def test_servegen_total_rate_with_one_hostile_cell(rates, data) -> None:
    cells = [[str(600 * k), repr(rate), "3"] for k, rate in enumerate(rates)]
    r = data.draw(st.integers(0, len(cells) - 1), label="row")
    c = data.draw(st.integers(0, 1), label="column")
    cells[r][c] = data.draw(hostile_cell, label="value")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x_total_rate_10min.csv"
        path.write_text(_csv(["window_start_s", "total_rate_rps", "active_clients"], cells), encoding="utf-8")
        outcome = _load(path, "servegen")
    if isinstance(outcome, Workload):
        _check_workload(outcome)


# ---- whole files: noise, binary, damaged gzip, any format sniffed -----------------------------------


@FUZZ
@given(
    body=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(lambda s: s.encode("utf-8"))),
    name=st.sampled_from(["t.csv", "t.jsonl", "t.csv.gz", "t.jsonl.gz", "t"]),
    fmt=st.sampled_from(["auto", "azure", "csv", "burstgpt", "mooncake", "servegen"]),
)
def test_any_bytes_in_any_format(body: bytes, name: str, fmt: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(body)
        outcome = _load(path, fmt)
    if isinstance(outcome, Workload):
        _check_workload(outcome)


@FUZZ
@given(
    mode=st.sampled_from(["truncate", "flip"]),
    where=st.integers(0, 10**6),
    fmt=st.sampled_from(list(FORMATS)),
)
def test_damaged_gzip_is_said_to_be_corrupt(mode: str, where: int, fmt: str) -> None:
    columns, render, _ = FORMATS[fmt]
    text = _csv(columns, render([(0.0, 10, 2), (1.5, 20, 3), (3.0, 30, 4)]))
    raw = gzip.compress(text.encode())
    i = where % len(raw)
    damaged = raw[:i] if mode == "truncate" else raw[:i] + bytes([raw[i] ^ 0x5A]) + raw[i + 1 :]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.csv.gz"
        path.write_bytes(damaged)
        outcome = _load(path, "auto")
    if mode == "truncate" and i > 0:
        # Every cut loses at least the 8-byte trailer: the archive is corrupt, and says so
        # (it used to be reported as an "empty file").
        assert isinstance(outcome, TraceFormatError), outcome
        assert "gzip" in str(outcome) and "empty file" not in str(outcome), str(outcome)
    elif isinstance(outcome, Workload):
        _check_workload(outcome)
