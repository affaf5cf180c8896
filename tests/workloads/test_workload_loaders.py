"""Loaders on tiny fixtures: values, meta, auto-detection and every error path."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from workload_fixtures import (
    AZURE_TEXT,
    BURSTGPT_TEXT,
    CHUNK_0_TEXT,
    MOONCAKE_TEXT,
    PLAIN_CSV_TEXT,
    TOTAL_RATE_TEXT,
)

from llmscale.errors import ConfigError, LlmscaleError, TraceFormatError
from llmscale.workloads import FORMATS, detect_format, load_trace

Write = Callable[[str, str], Path]


def test_azure_fixture_values(write: Write) -> None:
    w = load_trace(write("az.csv", AZURE_TEXT))
    assert w.name == "az"
    np.testing.assert_allclose(w.arrival_s, [0.0, 4.314579, 4.541877, 4.710427, 15.81941], atol=1e-9)
    assert w.input_tokens.tolist() == [374, 396, 879, 91, 1200]
    # GeneratedTokens 0 is raised to 1 and counted.
    assert w.output_tokens.tolist() == [44, 109, 55, 16, 1]
    assert w.meta["format"] == "azure"
    assert w.meta["rows"] == 5
    assert w.meta["clamped_rows"] == 1
    assert w.meta["sorted"] is False
    assert w.meta["start_timestamp"] == "2023-11-16 18:15:46.6805900"


def test_azure_timezone_suffix_is_honoured(write: Write) -> None:
    text = (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-10 02:00:00.000000+02:00,10,5\n"
        "2024-05-10 02:00:01.500000+02:00,10,5\n"
    )
    w = load_trace(write("tz.csv", text))
    np.testing.assert_allclose(w.arrival_s, [0.0, 1.5])


@pytest.mark.parametrize(
    ("rows", "line", "needle"),
    [
        # rows 10 s apart as written, one at +05:00: converted, they spanned 18,010 s (issue 19)
        pytest.param(
            ("18:00:00+00:00", "18:00:10+05:00", "18:00:20Z"), 3, r"UTC offset \+05:00", id="two-zones"
        ),
        pytest.param(
            ("18:00:00", "18:00:10+05:00", "18:00:20"), 3, "the first row's has none", id="one-zoned"
        ),
        pytest.param(("18:00:00Z", "18:00:10", "18:00:20Z"), 3, "has no UTC offset", id="one-naive"),
        pytest.param(("18:00:00+99:99", "18:00:10+99:99"), 2, "is no time zone", id="impossible"),
    ],
)
def test_azure_mixed_or_impossible_zones_are_refused(write: Write, rows, line, needle) -> None:
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"2023-11-16 {r},10,10\n" for r in rows)
    with pytest.raises(TraceFormatError, match=needle) as err:
        load_trace(write("tz.csv", text))
    assert err.value.line == line and err.value.field == "TIMESTAMP"


def test_mooncake_fixture_values(write: Write) -> None:
    w = load_trace(write("mc.jsonl", MOONCAKE_TEXT))
    np.testing.assert_allclose(w.arrival_s, [0.0, 0.0, 1.5, 2.75])
    assert w.input_tokens.tolist() == [6955, 6472, 8338, 100]
    assert w.output_tokens.tolist() == [52, 26, 8, 300]
    assert w.meta["format"] == "mooncake"
    # Blocks 0-3 reused by row 2 (4 of 13), blocks 0-1 by row 3 (2 of 17): 6 of 45 blocks.
    assert w.meta["prefix_reuse_share"] == pytest.approx(6 / 45, abs=1e-6)


def test_burstgpt_skips_failed_rows_and_clamps_zero_prompts(write: Write) -> None:
    w = load_trace(write("burst.csv", BURSTGPT_TEXT))
    assert w.meta["format"] == "burstgpt"
    assert w.meta["rows"] == 6
    assert w.meta["skipped_rows"] == 2
    assert w.meta["clamped_rows"] == 1
    assert w.meta["models"] == {"ChatGPT": 2, "GPT-4": 2}
    np.testing.assert_allclose(w.arrival_s, [0.0, 113.0, 135.0, 206.0])
    assert w.input_tokens.tolist() == [472, 417, 1, 1009]
    assert w.output_tokens.tolist() == [18, 217, 30, 343]


def test_plain_csv_is_rebased(write: Write) -> None:
    w = load_trace(write("plain.csv", PLAIN_CSV_TEXT))
    np.testing.assert_allclose(w.arrival_s, [0.0, 0.5, 2.25])
    assert w.meta["t0_offset_s"] == 10.0
    assert w.input_tokens.tolist() == [100, 200, 300]


def test_unsorted_rows_are_sorted_stably(write: Write) -> None:
    text = "arrival_s,input_tokens,output_tokens\n5,1,1\n1,2,2\n3,3,3\n1,4,4\n"
    w = load_trace(write("unsorted.csv", text))
    assert w.meta["sorted"] is True
    np.testing.assert_allclose(w.arrival_s, [0.0, 0.0, 2.0, 4.0])
    assert w.input_tokens.tolist() == [2, 4, 3, 1]  # the two t=1 rows keep file order


def test_blank_lines_crlf_and_bom_are_tolerated(write: Write) -> None:
    text = "\ufeffarrival_s,input_tokens,output_tokens\r\n\r\n0,1,1\r\n  \r\n2,2,2\r\n"
    w = load_trace(write("crlf.csv", text))
    assert w.num_requests == 2


def test_quoted_csv_takes_the_csv_module_path(write: Write) -> None:
    text = BURSTGPT_TEXT.splitlines()[0] + '\n1,"Chat, GPT",5,6,11,"API log"\n'
    w = load_trace(write("quoted.csv", text))
    assert w.meta["models"] == {"Chat, GPT": 1}


def test_gzip_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "az.csv.gz"
    path.write_bytes(gzip.compress(AZURE_TEXT.encode()))
    w = load_trace(path)
    assert w.meta["format"] == "azure"
    assert w.name == "az"
    assert w.num_requests == 5


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        pytest.param("a.csv", AZURE_TEXT, "azure", id="azure"),
        pytest.param("m.jsonl", MOONCAKE_TEXT, "mooncake", id="mooncake-jsonl"),
        pytest.param("m.txt", MOONCAKE_TEXT, "mooncake", id="mooncake-by-content"),
        pytest.param("b.csv", BURSTGPT_TEXT, "burstgpt", id="burstgpt"),
        pytest.param("p.csv", PLAIN_CSV_TEXT, "csv", id="plain-csv"),
        pytest.param("language_total_rate_10min.csv", TOTAL_RATE_TEXT, "servegen", id="servegen-total"),
        pytest.param("chunk-3-trace.csv", CHUNK_0_TEXT, "servegen", id="servegen-chunk"),
        pytest.param(
            "reordered.csv",
            "GeneratedTokens,TIMESTAMP,ContextTokens\n1,2023-01-01,2\n",
            "azure",
            id="azure-reordered-columns",
        ),
    ],
)
def test_detect_format(write: Write, name: str, text: str, expected: str) -> None:
    assert detect_format(write(name, text)) == expected


def test_detect_format_directory(servegen_dir: Path) -> None:
    assert detect_format(servegen_dir) == "servegen"


def test_explicit_format_overrides_detection(write: Write) -> None:
    w = load_trace(write("weird.dat", PLAIN_CSV_TEXT), fmt="csv")
    assert w.num_requests == 3


def test_window_options_apply_to_recorded_traces(write: Write) -> None:
    w = load_trace(write("plain.csv", PLAIN_CSV_TEXT), start_s=0.25, duration_s=10)
    np.testing.assert_allclose(w.arrival_s, [0.0, 1.75])
    assert w.meta["window"] == {"start_s": 0.25, "duration_s": 10, "first_arrival_offset_s": 0.25}


def test_length_options_rejected_for_formats_with_lengths(write: Write) -> None:
    with pytest.raises(ConfigError, match="servegen traces only"):
        load_trace(write("plain.csv", PLAIN_CSV_TEXT), input_mean=100)


def test_to_csv_round_trip(write: Write, tmp_path: Path) -> None:
    w = load_trace(write("az.csv", AZURE_TEXT))
    out = tmp_path / "out.csv"
    w.to_csv(out)
    back = load_trace(out)
    np.testing.assert_array_equal(back.arrival_s, w.arrival_s)
    np.testing.assert_array_equal(back.input_tokens, w.input_tokens)
    np.testing.assert_array_equal(back.output_tokens, w.output_tokens)


AZ_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZ_ROW = "2023-11-16 18:15:46.6805900,374,44\n"
MC_ROW = '{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
BG_HEAD = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
CSV_HEAD = "arrival_s,input_tokens,output_tokens\n"


@pytest.mark.parametrize(
    ("name", "text", "fmt", "line", "field", "fragment"),
    [
        pytest.param(
            "a.csv",
            AZ_HEAD + AZ_ROW + "2023-11-16 18:15:47.0,abc,44\n",
            "auto",
            3,
            "ContextTokens",
            "not a token count: 'abc'",
            id="azure-non-numeric-tokens",
        ),
        pytest.param(
            "a.csv",
            AZ_HEAD + AZ_ROW + "2023-11-16 18:15:47.0,10,-4\n",
            "auto",
            3,
            "GeneratedTokens",
            "negative token count",
            id="azure-negative-tokens",
        ),
        pytest.param(
            "a.csv",
            AZ_HEAD + "2023-11-16 18:15:47.0,12.5,4\n",
            "auto",
            2,
            "ContextTokens",
            "not a whole number",
            id="azure-fractional-tokens",
        ),
        pytest.param(
            "a.csv",
            AZ_HEAD + "2023-11-16 18:15:47.0,nan,4\n",
            "auto",
            2,
            "ContextTokens",
            "not a finite token count",
            id="azure-nan-tokens",
        ),
        pytest.param(
            "a.csv",
            AZ_HEAD + AZ_ROW + AZ_ROW + "yesterday at noon,1,1\n",
            "auto",
            4,
            "TIMESTAMP",
            "unparseable timestamp 'yesterday at noon'",
            id="azure-bad-timestamp",
        ),
        pytest.param(
            "a.csv",
            AZ_HEAD + "2023-11-16 18:15:47.0,1,1\n2023-11-16 18:15:48.0,1\n",
            "auto",
            3,
            "GeneratedTokens",
            "expected 3 comma-separated fields, found 2",
            id="azure-short-row",
        ),
        pytest.param(
            "a.csv",
            "TIMESTAMP,ContextTokens,Tokens\n" + AZ_ROW,
            "azure",
            1,
            "GeneratedTokens",
            "missing column 'GeneratedTokens'",
            id="azure-missing-column",
        ),
        pytest.param(
            "a.csv",
            "\n\n" + AZ_HEAD + AZ_ROW + "\n2023-11-16 18:15:47.0,x,1\n",
            "auto",
            6,
            "ContextTokens",
            "not a token count",
            id="azure-line-numbers-count-blank-lines",
        ),
        pytest.param(
            "m.jsonl", MC_ROW + "{not json}\n", "auto", 2, None, "invalid JSON", id="mooncake-bad-json"
        ),
        pytest.param(
            "m.jsonl",
            MC_ROW + '{"timestamp": 5, "input_length": 10}\n',
            "auto",
            2,
            "output_length",
            "missing field 'output_length'",
            id="mooncake-missing-field",
        ),
        pytest.param(
            "m.jsonl",
            MC_ROW + MC_ROW + '{"timestamp": 5, "input_length": "ten", "output_length": 1}\n',
            "auto",
            3,
            "input_length",
            'not a token count: "ten" is a JSON string',
            id="mooncake-string-tokens",
        ),
        pytest.param(
            "m.jsonl",
            MC_ROW + '{"timestamp": 5, "input_length": 10, "output_length": -1}\n',
            "auto",
            2,
            "output_length",
            "negative token count",
            id="mooncake-negative-tokens",
        ),
        pytest.param(
            "m.jsonl",
            '{"timestamp": null, "input_length": 10, "output_length": 1}\n',
            "mooncake",
            1,
            "timestamp",
            "not a timestamp in milliseconds",
            id="mooncake-null-timestamp",
        ),
        pytest.param(
            "m.jsonl",
            MC_ROW + "[1, 2]\n",
            "auto",
            2,
            None,
            "expected a JSON object",
            id="mooncake-not-object",
        ),
        pytest.param(
            "b.csv",
            BG_HEAD + "5,ChatGPT,4,5,9,API log\nsoon,ChatGPT,4,5,9,API log\n",
            "auto",
            3,
            "Timestamp",
            "not a timestamp in seconds: 'soon'",
            id="burstgpt-bad-timestamp",
        ),
        pytest.param(
            "p.csv",
            CSV_HEAD + "0,1,1\n1,,1\n",
            "auto",
            3,
            "input_tokens",
            "not a token count: ''",
            id="csv-empty-field",
        ),
        pytest.param(
            "p.csv",
            CSV_HEAD + "0,1,1\ninf,1,1\n",
            "auto",
            3,
            "arrival_s",
            "not a finite time",
            id="csv-infinite-time",
        ),
    ],
)
def test_error_names_file_line_and_field(
    write: Write, name: str, text: str, fmt: str, line: int, field: str | None, fragment: str
) -> None:
    path = write(name, text)
    with pytest.raises(TraceFormatError) as info:
        load_trace(path, fmt=fmt)
    err = info.value
    assert fragment in str(err)
    assert str(path) in str(err)
    assert err.path == str(path)
    assert err.line == line
    assert f"line {line}" in str(err)
    assert err.field == field
    if field is not None:
        assert f"field {field!r}" in str(err)


@pytest.mark.parametrize(
    ("name", "text", "fmt", "fragment"),
    [
        pytest.param("e.csv", "", "auto", "empty file", id="empty-auto"),
        pytest.param("e.csv", "   \n\n", "azure", "empty file", id="blank-explicit"),
        pytest.param("h.csv", AZ_HEAD, "auto", "trace has no requests", id="header-only"),
        pytest.param("m.jsonl", "\n\n", "mooncake", "trace has no requests", id="mooncake-empty"),
        pytest.param(
            "b.csv",
            BG_HEAD + "5,ChatGPT,4,0,4,API log\n",
            "auto",
            "all 1 rows have 0 response tokens",
            id="burstgpt-all-failed",
        ),
    ],
)
def test_no_requests_is_a_clear_error(write: Write, name: str, text: str, fmt: str, fragment: str) -> None:
    path = write(name, text)
    with pytest.raises(TraceFormatError, match=fragment) as info:
        load_trace(path, fmt=fmt)
    assert str(path) in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="file not found") as info:
        load_trace(tmp_path / "nope.csv")
    assert info.value.path == str(tmp_path / "nope.csv")


@pytest.mark.parametrize("fmt", [pytest.param(f, id=f) for f in ["azure", "mooncake", "burstgpt", "csv"]])
def test_missing_file_with_explicit_format(tmp_path: Path, fmt: str) -> None:
    with pytest.raises(TraceFormatError, match="file not found"):
        load_trace(tmp_path / "nope.csv", fmt=fmt)


def test_unknown_layout_lists_supported_formats(write: Write) -> None:
    path = write("foo.csv", "foo,bar\n1,2\n")
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    message = str(info.value)
    assert "unrecognised trace format" in message
    assert info.value.line == 1
    for name in FORMATS:
        assert name in message


def test_unknown_explicit_format_lists_supported_formats(write: Write) -> None:
    with pytest.raises(TraceFormatError, match=r"unknown trace format 'parquet'.*azure"):
        load_trace(write("p.csv", PLAIN_CSV_TEXT), fmt="parquet")


def test_json_without_trace_fields(write: Write) -> None:
    with pytest.raises(TraceFormatError, match="supported formats"):
        load_trace(write("x.jsonl", '{"a": 1}\n'))


def test_binary_file_is_a_trace_format_error(tmp_path: Path) -> None:
    path = tmp_path / "bin.csv"
    path.write_bytes(b"arrival_s,input_tokens,output_tokens\n\xff\xfe\x00\x01\n")
    with pytest.raises(TraceFormatError, match="not UTF-8") as info:
        load_trace(path, fmt="csv")
    assert info.value.line == 2


def test_directory_without_chunks(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match=r"no ServeGen chunk-N-trace\.csv"):
        load_trace(tmp_path)


def test_all_errors_are_llmscale_errors_with_exit_code_2(write: Write) -> None:
    with pytest.raises(LlmscaleError) as info:
        load_trace(write("foo.csv", "foo\n"))
    assert info.value.exit_code == 2
