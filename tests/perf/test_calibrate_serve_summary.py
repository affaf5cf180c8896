"""calibrate reads a plain ``vllm bench serve --save-result`` file (statistics only) like a detailed one.

The plain file is made from a detailed one as vLLM makes it (vllm/benchmarks/serve.py): the
statistics ``{mean,median,std,pNN}_{ttft,tpot,itl}_ms`` over the successful requests, then the
per-request fields (input_lens, output_lens, ttfts, itls, start_times, generated_texts, errors)
removed. Both shapes of one run must give the same target, up to what the plain file cannot say.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llmscale.errors import TraceFormatError
from llmscale.offline.calibrate import SERVE_KINDS, read_serve_result
from llmscale.perf import get_perf_model

_PER_REQUEST = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors")


def _detailed_run(seed: int = 1, n: int = 60) -> dict[str, Any]:
    """A --save-detailed result of n requests with varied lengths and latencies over a 30 s run."""
    rng = np.random.default_rng(seed)
    ins = rng.integers(100, 2000, n).tolist()
    outs = rng.integers(20, 400, n).tolist()
    ttfts = rng.uniform(0.03, 0.4, n).tolist()
    itls = [rng.normal(0.022, 0.004, o - 1).clip(0.005).tolist() for o in outs]
    latencies = [t + sum(g) for t, g in zip(ttfts, itls, strict=True)]
    return {
        "date": "20260101-000000",
        "backend": "vllm",
        "model_id": "meta-llama/Meta-Llama-3-8B",
        "num_prompts": n,
        "request_rate": 2.0,
        "burstiness": 1.0,
        "max_concurrency": None,
        "duration": 30.0,
        "completed": n,
        "failed": 0,
        "total_input_tokens": int(sum(ins)),
        "total_output_tokens": int(sum(outs)),
        "input_lens": ins,
        "output_lens": outs,
        "ttfts": ttfts,
        "itls": itls,
        "latencies": latencies,
        "start_times": [0.5 * i for i in range(n)],
        "generated_texts": ["x" * o for o in outs],
        "errors": [""] * n,
    }


def _plain(detailed: dict[str, Any], *, with_e2el: bool) -> dict[str, Any]:
    """The statistics vLLM computes (ms), and the detailed fields dropped, as without --save-detailed."""
    doc = dict(detailed)
    ttfts = np.asarray(detailed["ttfts"])
    tpots = np.asarray(
        [
            (lat - t) / (o - 1)
            for lat, t, o in zip(detailed["latencies"], ttfts, detailed["output_lens"], strict=True)
        ]
    )
    itls = np.concatenate([np.asarray(g) for g in detailed["itls"]])
    e2els = np.asarray(detailed["latencies"])
    metrics = {"ttft": ttfts, "tpot": tpots, "itl": itls, **({"e2el": e2els} if with_e2el else {})}
    for name, xs in metrics.items():
        doc[f"mean_{name}_ms"] = float(np.mean(xs)) * 1000
        doc[f"median_{name}_ms"] = float(np.median(xs)) * 1000
        doc[f"std_{name}_ms"] = float(np.std(xs)) * 1000
        doc[f"p99_{name}_ms"] = float(np.percentile(xs, 99)) * 1000
    for key in _PER_REQUEST:
        doc.pop(key)
    return doc


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "with_e2el", [pytest.param(True, id="e2el-recorded"), pytest.param(False, id="default-metrics")]
)
def test_a_plain_result_gives_the_detailed_runs_target(tmp_path: Path, with_e2el: bool) -> None:
    detailed = _detailed_run()
    (d,) = read_serve_result(_write(tmp_path / "detailed.json", detailed), model=None, gpu="h100", tp=1)
    (p,) = read_serve_result(
        _write(tmp_path / "plain.json", _plain(detailed, with_e2el=with_e2el)), model=None, gpu="h100", tp=1
    )
    assert (d.source_kind, p.source_kind) == ("serve-detailed", "serve-summary")
    assert set(SERVE_KINDS) == {d.source_kind, p.source_kind}
    assert "summary file" in p.label and "median_tpot_ms" in p.label
    # a request's mean ITL is its TPOT: the same median, to float rounding
    assert p.measured_s == pytest.approx(d.measured_s, rel=1e-9)
    perf = get_perf_model("llama-3-8b", "h100", 1)
    # With mean_e2el_ms the concurrency is Little's law on the same latencies: the same prediction.
    # Without it, mean TTFT + mean TPOT x (mean output - 1) stands in for the mean latency; over
    # this run's lengths (20-400 tokens) and TPOTs that is within ~3% of it: the prediction moves less.
    rel = 1e-6 if with_e2el else 0.03
    assert p.predict(perf) == pytest.approx(d.predict(perf), rel=rel)
    assert ("mean_e2el_ms" in p.label) == with_e2el


def test_the_plain_fields_are_checked_by_name(tmp_path: Path) -> None:
    plain = _plain(_detailed_run(), with_e2el=False)
    for key, bad, why in [
        ("duration", 0, "duration = 0"),
        ("completed", "60", "completed = '60'"),
        ("median_tpot_ms", float("inf"), "median_tpot_ms = inf"),
        ("mean_ttft_ms", -1.0, "mean_ttft_ms = -1.0"),
    ]:
        doc = {**plain, key: bad}
        with pytest.raises(TraceFormatError, match=f"bad.json: {why}"):
            read_serve_result(_write(tmp_path / "bad.json", doc), model=None, gpu="h100", tp=1)
    doc = dict(plain)
    del doc["total_output_tokens"]
    with pytest.raises(TraceFormatError, match="'total_output_tokens' missing"):
        read_serve_result(_write(tmp_path / "bad.json", doc), model=None, gpu="h100", tp=1)
    # neither shape: the message names both
    with pytest.raises(TraceFormatError, match="'input_lens' missing, and no median_tpot_ms"):
        read_serve_result(_write(tmp_path / "bad.json", {"duration": 3.0}), model=None, gpu="h100", tp=1)


def test_calibrate_says_which_shape_it_read(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from llmscale.cli import app

    detailed = _detailed_run()
    files = [
        _write(tmp_path / "detailed.json", detailed),
        _write(tmp_path / "plain.json", _plain(detailed, with_e2el=True)),
    ]
    out = tmp_path / "profile.yaml"
    res = CliRunner().invoke(
        app,
        ["calibrate", *map(str, files), "--gpu", "h100", "--tp", "1", "--out", str(out), "--json", "-"],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [(i["source"], i["kind"], i["points"]) for i in doc["inputs"]] == [
        (str(files[0]), "serve-detailed", 1),
        (str(files[1]), "serve-summary", 1),
    ]
    said = " ".join(res.stderr.split())  # the console wraps long lines
    assert f"plain.json: {SERVE_KINDS['serve-summary']}" in said
    assert f"detailed.json: {SERVE_KINDS['serve-detailed']}" in said
