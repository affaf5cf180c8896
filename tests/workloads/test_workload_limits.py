"""The sane ranges of a workload (workloads/limits.py), each refused at its file, line and field."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from llmscale.errors import ConfigError, TraceFormatError
from llmscale.workloads import Workload, load_trace, rate_scale
from llmscale.workloads.limits import MAX_SPAN_S

Write = Callable[[str, str], Path]

AZ_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZ_ROW = "2023-11-16 18:15:46.6805900,374,44\n"
CSV_HEAD = "arrival_s,input_tokens,output_tokens\n"
MC_ROW = '{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
CHUNK_ROW = "0,1.0,1.0,Gamma,1.0,1.0\n"


@pytest.mark.parametrize(
    ("name", "text", "line", "field", "fragment"),
    [
        pytest.param(
            "p.csv", CSV_HEAD + "0,1,1e30\n", 2, "output_tokens", "above the limit", id="tokens-1e30"
        ),
        pytest.param(
            "p.csv",
            CSV_HEAD + "0,1,1\n1,18446744073709551616,1\n",
            3,
            "input_tokens",
            "above",
            id="tokens-2^64",
        ),
        pytest.param("p.csv", CSV_HEAD + "0,1,1\n1e300,1,1\n", 3, "arrival_s", "(1e11 s)", id="time-1e300"),
        pytest.param(
            "a.csv",
            AZ_HEAD + AZ_ROW + "2024,1,1\n",
            3,
            "TIMESTAMP",
            "bare number among date-times",
            id="bare-year",
        ),
        pytest.param(
            "a.csv", AZ_HEAD + AZ_ROW + "0001-01-01 00:00:00,1,1\n", 3, "TIMESTAMP", "1678-2261", id="year-1"
        ),
        pytest.param(
            "a.csv",
            AZ_HEAD + "1700-01-01 00:00:00,1,1\n2250-01-01 00:00:00,1,1\n",
            3,
            "TIMESTAMP",
            "more than 146 years after",
            id="550-years",
        ),
        pytest.param(
            "a.csv", AZ_HEAD + "1700000000000,1,1\n", 2, "TIMESTAMP", "epoch milliseconds", id="epoch-ms"
        ),
        pytest.param(
            "a.csv",
            AZ_HEAD + "1700000000,1,1\n" + AZ_ROW,
            3,
            "TIMESTAMP",
            "not a number of seconds",
            id="mixed",
        ),
        pytest.param(
            "m.jsonl",
            MC_ROW + '{"timestamp": 1, "input_length": true, "output_length": 1}\n',
            2,
            "input_length",
            "true is a JSON boolean",
            id="mooncake-true",
        ),
        pytest.param(
            "m.jsonl",
            MC_ROW + '{"timestamp": 1, "input_length": 1, "output_length": ' + "9" * 400 + "}\n",
            2,
            "output_length",
            "not a finite token count",
            id="mooncake-int-beyond-float",
        ),
        pytest.param(
            "m.jsonl",
            MC_ROW + '{"timestamp": 1e300, "input_length": 1, "output_length": 1}\n',
            2,
            "timestamp",
            "beyond the largest",
            id="mooncake-time-1e300",
        ),
        pytest.param(
            "m.jsonl", MC_ROW + "[" * 100_000 + "\n", 2, None, "nested too deeply", id="mooncake-deep-json"
        ),
        pytest.param(
            # U+2028 inside a field is no line break for an editor: the row after it is line 4.
            "p.csv",
            CSV_HEAD + "0,1,1\n1,1,1\u2028\n2,x,1\n",
            4,
            "input_tokens",
            "not a token count",
            id="line-separator-in-a-field",
        ),
        pytest.param(
            "chunk-0-trace.csv",
            CHUNK_ROW.replace("Gamma,1.0", "Gamma,1e-59"),
            1,
            "p1",
            "shape must be in [0.001, 10000]",
            id="servegen-tiny-shape",
        ),
    ],
)
def test_values_beyond_the_limits_are_named(write: Write, name, text, line, field, fragment):
    path = write(name, text)
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), line, field), str(err)
    assert fragment in str(err)


def test_epoch_seconds_are_seconds_from_the_first_row(write: Write):
    path = write("a.csv", AZ_HEAD + "1700000000.25,10,2\n1700000001.75,20,3\n1700000000.5,30,4\n")
    w = load_trace(path)
    assert w.arrival_s.tolist() == [0.0, 0.25, 1.5]
    assert w.meta["timestamps"] == "epoch seconds" and w.meta["sorted"] is True


def test_the_span_limit_names_the_last_row_kept_and_a_window_passes(write: Write):
    path = write("p.csv", CSV_HEAD + "0,1,1\n10,1,1\n4e6,1,1\n")
    with pytest.raises(TraceFormatError) as info:
        load_trace(path, max_span_s=MAX_SPAN_S)
    assert (info.value.line, info.value.field) == (4, "arrival_s")
    assert "from line 2 to this one" in str(info.value)
    assert load_trace(path, max_span_s=MAX_SPAN_S, duration_s=60).num_requests == 2
    assert load_trace(path).num_requests == 3, "no limit unless asked for"


def test_servegen_span_limit_counts_only_windows_with_traffic(write: Write):
    far = int(MAX_SPAN_S) + 6000
    text = "0,1.0,1.0,Gamma,1.0,1.0\n600,0,0,,0,0\n" + f"{far},0,0,,0,0\n"
    assert load_trace(write("chunk-1-trace.csv", text), max_span_s=MAX_SPAN_S).num_requests > 0
    busy = text.replace(f"{far},0,0,,0,0", f"{far},1.0,1.0,Gamma,1.0,1.0")
    with pytest.raises(TraceFormatError) as info:
        load_trace(write("chunk-2-trace.csv", busy), max_span_s=MAX_SPAN_S)
    assert (info.value.line, info.value.field) == (3, "window_start_s")


def test_rate_scale_refuses_before_allocating_and_says_how_much():
    w = Workload.from_arrays("w", np.arange(20.0), np.full(20, 10), np.full(20, 5))
    with pytest.raises(ConfigError) as info:
        rate_scale(w, 1e9)
    message = str(info.value)
    assert "20,000,000,000 requests" in message and "2,086.2 GiB" in message and "20,000,000" in message
    assert rate_scale(w, 1000.0).num_requests == 20_000  # well inside the limit


@pytest.mark.parametrize("fmt", ["auto", "csv", "servegen"])
def test_a_named_pipe_is_refused_without_blocking(tmp_path: Path, fmt: str):
    # Opening a pipe without a writer blocks: the loader must refuse it before opening it.
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def load() -> None:
        try:
            load_trace(fifo, fmt)
        except BaseException as e:  # reported to the test thread below
            outcome.append(e)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(timeout=10)
    if thread.is_alive():
        with open(fifo, "wb"):  # a writer that closes at once releases the blocked reader
            pass
        pytest.fail("load_trace blocked on a named pipe")
    assert len(outcome) == 1 and isinstance(outcome[0], TraceFormatError), outcome
    assert "not a regular file" in str(outcome[0])
