"""EmulateConfig refuses numbers that would start a broken fleet, NaN included.

Found from outside: `--pending-s nan` started a fleet whose replicas never became ready (NaN
compares false with everything, so `value < 0` let it through), `--served-model-name ''` served
a model no client can name, and `--max-seconds -5` was accepted.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from llmscale.emulate import EmulateConfig
from llmscale.errors import ConfigError


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("pending_s", math.nan, "pending_s = nan, must be a finite number >= 0"),
        ("loading_s", -1.0, "loading_s = -1.0"),
        ("warmup_s", math.inf, "warmup_s = inf"),
        ("time_scale", math.nan, "time_scale = nan"),
        ("time_scale", 0.0, "time_scale = 0.0"),
        ("grace_s", math.nan, "grace_s = nan"),
        ("timeout_s", math.nan, "timeout_s = nan"),
        ("served_model_name", " ", "served_model_name is empty"),
    ],
)
def test_bad_numbers_and_names_are_refused(field: str, value: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EmulateConfig(**{field: value})  # type: ignore[arg-type]


def test_no_client_time_out_is_allowed() -> None:
    assert EmulateConfig(timeout_s=math.inf).timeout_s == math.inf


def test_max_seconds_must_be_positive() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "llmscale.cli", "emulate", "--port", "0", "--max-seconds", "-5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "--max-seconds = -5.0, must be a finite number > 0" in out.stderr
