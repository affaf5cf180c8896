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
