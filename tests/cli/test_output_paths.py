"""check_output_path: an output is checked writable before the work, and the check leaves no trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmscale.edge import check_option, check_output_path
from llmscale.errors import ConfigError


def test_a_new_file_in_an_existing_directory_passes_and_is_not_left_behind(tmp_path: Path):
    target = tmp_path / "out.json"
    check_output_path("--json", target)
    assert not target.exists()


def test_an_existing_file_passes_unchanged(tmp_path: Path):
    target = tmp_path / "report.html"
    target.write_text("earlier report")
    before = target.stat().st_mtime_ns
    check_output_path("--report", target)
    assert target.read_text() == "earlier report" and target.stat().st_mtime_ns == before


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        pytest.param(lambda d: d / "missing" / "out.json", "directory", id="missing-directory"),
        pytest.param(lambda d: d, "is a directory", id="a-directory"),
        pytest.param(lambda d: d / "file" / "out.json", "is not a directory", id="under-a-file"),
    ],
)
def test_unwritable_targets_name_the_option_and_the_path(tmp_path: Path, make, needle):
    (tmp_path / "file").write_text("x")
    target = make(tmp_path)
    with pytest.raises(ConfigError) as err:
        check_output_path("--decisions", target)
    assert str(err.value).startswith(f"--decisions {target}: ") and needle in str(err.value)
    assert err.value.exit_code == 2
    assert not (tmp_path / "missing").exists(), "a missing directory is never created"


def test_a_read_only_file_system_is_refused():
    # /proc refuses new files even to root, which passes every os.access check.
    with pytest.raises(ConfigError, match="cannot write there"):
        check_output_path("--json", Path("/proc/llmscale-probe.json"))


@pytest.mark.parametrize(
    ("value", "interval", "ok"),
    [
        (None, "(0, inf)", True),
        (2.0, "(0, inf)", True),
        (float("nan"), "(0, inf)", False),
        (0, "[0, 10]", True),
    ],
)
def test_check_option(value, interval, ok):
    if ok:
        check_option("--x", value, interval)
    else:
        with pytest.raises(ConfigError, match=r"^--x = nan, must be a finite number in \(0, inf\)$"):
            check_option("--x", value, interval)


def test_a_dangling_symlink_is_checked_as_the_file_it_names(tmp_path: Path):
    """A link to a report not yet written is a fine output (it was refused as 'File exists')."""
    link = tmp_path / "latest.html"
    link.symlink_to(tmp_path / "run-1.html")
    check_output_path("--report", link)
    assert link.is_symlink() and not (tmp_path / "run-1.html").exists()


def test_write_page_follows_a_symlink_and_keeps_it(tmp_path: Path):
    from llmscale.report.page import write_page

    link = tmp_path / "latest.html"
    link.symlink_to(tmp_path / "run-1.html")
    write_page(link, "<html>one</html>")
    assert link.is_symlink() and (tmp_path / "run-1.html").read_text() == "<html>one</html>"


def test_write_page_writes_a_special_file_in_place(tmp_path: Path):
    """A FIFO (like /dev/stdout or a device) receives the page and stays what it was.

    Renaming a new file over it replaced it: as root, `--report /dev/full` turned the device
    into an HTML file. A FIFO in tmp_path stands in for a device, so a regression harms nothing.
    """
    import os
    import stat
    import threading

    from llmscale.report.page import write_page

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_page(fifo, "<html>piped</html>")
    reader.join(timeout=10)
    assert got == [b"<html>piped</html>"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_device_or_a_pipe_is_refused_before_the_run(tmp_path: Path):
    """`--json /dev/full` passed the early check (a writable device) and failed after the whole
    run; a FIFO passed it too and the run then blocked at its first write (issue 19). Both are
    refused at once, naming the option and what the path is."""
    import os

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(
        ConfigError, match=r"^--decisions .*pipe: is a named pipe \(FIFO\), not a regular file"
    ):
        check_output_path("--decisions", fifo)
    if Path("/dev/full").exists():
        with pytest.raises(ConfigError, match=r"^--json /dev/full: is a character device"):
            check_output_path("--json", Path("/dev/full"))


def test_an_overlong_file_name_is_a_clean_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="file name too long"):
        check_output_path("--json", tmp_path / ("x" * 5000))


def test_a_write_that_fails_at_the_end_names_the_option(tmp_path: Path):
    """A write can still fail at the end (a full disk): an error naming the option, not a traceback."""
    from llmscale.cli.output import write_output
    from llmscale.errors import LlmscaleError

    with pytest.raises(LlmscaleError, match=r"^--json .*: cannot write: "):
        write_output(tmp_path / "missing" / "out.json", "{}", "--json")


def test_max_num_seqs_zero_is_an_error_not_the_default():
    """`--max-num-seqs 0` was read as 'not given' (a falsy `or`) and ran with 256."""
    from llmscale.backtest.setup import engine_settings
    from llmscale.cli.options import check_engine

    with pytest.raises(ConfigError, match="--max-num-seqs = 0, must be >= 1"):
        check_engine(engine_settings(None, 0, None, None))
    with pytest.raises(ConfigError, match=r"--max-num-batched-tokens = 1, must be >= --max-num-seqs \(256\)"):
        check_engine(engine_settings(None, None, 1, None))
    # without chunked prefill the budget is per prompt, and vLLM's own rule is about the context
    engine = engine_settings(None, None, 128, False)
    check_engine(engine)
    assert engine.max_num_batched_tokens == 128
