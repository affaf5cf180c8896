"""SHA-256 of every decision log and backtest JSON of a fixed set of runs, for a refactor's identity check.

Runs with whatever ``llmscale`` is first on ``PYTHONPATH``, so the same script digests two source
trees (``git archive <base> src`` and the working tree) and a diff of its two outputs proves a
refactor changed no decision and no result:

* ``default``: ``llmscale backtest --workload default`` (every policy and the oracle, the first
  10 minutes of the preset; the CLI's own sizing of bounds, initial and static replicas);
* the shared traces (``$LLMSCALE_SHARED_DATA/traces``): the Azure conversation trace x20, the
  Mooncake synthetic trace and two hours of ServeGen m-large x0.3 (benchmarks/policies.py's
  ramp), each its first 5 minutes under every policy;
* ``matrix``: every cell of the workload matrix on the H100 8B deployment
  (``benchmarks/policies.py --matrix``'s sizing), its first 5 minutes under the default policies.

    PYTHONPATH=src LLMSCALE_PURE_PYTHON=1 python scripts/run_digests.py OUT_DIR > digests.txt

Each line is ``<sha256>  <name>``; the logs and JSON files stay in OUT_DIR for a line-by-line diff.
A results row's ``wall_s`` is the machine's time, not a result: keys naming ``wall`` or
``elapsed`` are dropped before digesting.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("LLMSCALE_SHARED_DATA", REPO.parent / "shared" / "data")) / "traces"

CLI_RUNS: dict[str, list[str]] = {
    "default": ["--workload", "default", "--policy", "all", "--duration-s", "600"],
    "azure-x20": [
        "--trace",
        str(DATA / "azure_llm_2023_conv.csv"),
        "--rate-scale",
        "20",
        "--duration-s",
        "300",
        "--policy",
        "all",
        "--no-oracle",
    ],
    "mooncake": [
        "--trace",
        str(DATA / "mooncake_synthetic_trace.jsonl"),
        "--duration-s",
        "300",
        "--policy",
        "all",
        "--no-oracle",
    ],
    "servegen-ramp": [
        "--trace",
        str(DATA / "servegen/language_m-large_total_rate_10min.csv"),
        "--format",
        "servegen",
        "--start-s",
        "75600",
        "--duration-s",
        "300",
        "--rate-scale",
        "0.3",
        "--policy",
        "all",
        "--no-oracle",
    ],
}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _strip_elapsed(doc: object) -> object:
    if isinstance(doc, dict):
        return {k: _strip_elapsed(v) for k, v in doc.items() if "elapsed" not in k and "wall" not in k}
    if isinstance(doc, list):
        return [_strip_elapsed(v) for v in doc]
    return doc


def _json_digest(path: Path) -> str:
    doc = _strip_elapsed(json.loads(path.read_text()))
    return _sha(json.dumps(doc, sort_keys=True).encode())


def cli_runs(out: Path, only: set[str] | None) -> list[tuple[str, str]]:
    rows = []
    for name, args in CLI_RUNS.items():
        if only and name not in only:
            continue
        log, doc = out / f"{name}.jsonl", out / f"{name}.json"
        cmd = [
            sys.executable,
            "-m",
            "llmscale.cli",
            "backtest",
            *args,
            "--jobs",
            "1",
            "--decisions",
            str(log),
            "--json",
            str(doc),
            "--report",
            str(out / f"{name}.html"),
        ]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=out)
        rows += [(_sha(log.read_bytes()), f"{name}.jsonl"), (_json_digest(doc), f"{name}.json")]
    return rows


def matrix_runs(out: Path) -> list[tuple[str, str]]:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from llmscale.backtest.compare import run_backtest
    from llmscale.workloads import window
    from llmscale.workloads.matrix import CELLS
    from policies import MATRIX_POLICIES, matrix_cell  # type: ignore[import-not-found]

    rows = []
    for cell in CELLS:
        w, settings, _, _ = matrix_cell("h100-8b", cell)
        w = window(w, 0.0, 300.0)
        results, _, lines = run_backtest(
            w, list(MATRIX_POLICIES), settings, include_oracle=False, want_decisions=True
        )
        name = "matrix-" + cell.name.replace("/", "-")
        (out / f"{name}.jsonl").write_text("".join(lines))
        (out / f"{name}.json").write_text(json.dumps([r.summary for r in results], indent=1, default=str))
        rows.append((_sha("".join(lines).encode()), f"{name}.jsonl"))
        rows.append((_json_digest(out / f"{name}.json"), f"{name}.json"))
    return rows


def main() -> int:
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    only = set(sys.argv[2].split(",")) if len(sys.argv) > 2 else None
    rows = cli_runs(out, only)
    if not only or "matrix" in only:
        rows += matrix_runs(out)
    for digest, name in rows:
        print(f"{digest}  {name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
