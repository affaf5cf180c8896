"""Record the Kubernetes HPA's own replica calculation: ``tests/peers/tables/kube_hpa.json``.

The HPA controller's ``ReplicaCalculator`` (``pkg/controller/podautoscaler/replica_calculator.go``)
runs in Kubernetes' own source tree, with its own vendored dependencies: Debian's ``kubernetes``
source package (the one ``scripts/build_kube.sh`` builds the API server from), unpacked anywhere.
``kube_hpa/zz_llmscale_record_test.go`` is copied into that package for the run (a pod lister on an
in-memory indexer, a metrics client answering the case's external values) and removed after:

* ``pods`` cases: a Pods metric with an AverageValue target (hpa-gpu-util's set-up): running pods
  with and without a sample, Pending and Failed pods, through ``calcPlainMetricReplicas``;
* ``external-per-pod`` cases: an External metric with an AverageValue target (what KEDA's
  ScaledObject creates, keda-queue), through ``GetExternalPerPodMetricReplicas``.

    apt-get source --download-only kubernetes && tar xzf kubernetes_*.orig.tar.gz
    python tests/peers/recorders/record_kube_hpa.py --tree kubernetes-1.20.2 \
        --version 1.20.5+really1.20.2-1.1+deb12u1

``tests/peers/test_kube_hpa_recorded.py`` replays every case through llmscale's ports. The HPA's
behaviour (stabilisation and rate policies) is not recorded here: Debian's 1.20 predates the
stabilisation that llmscale follows (both directions' windows applied together).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TABLE = HERE.parent / "tables" / "kube_hpa.json"
HARNESS = HERE / "kube_hpa" / "zz_llmscale_record_test.go"
PACKAGE = "pkg/controller/podautoscaler"


def pods_cases() -> list[dict[str, object]]:
    """Running pods with samples x running pods without x Pending x Failed, at a few load levels
    around the target 70 (milli-units: 70000), tolerance 0.1."""
    levels = {"idle": [5000], "under": [40000, 50000], "near": [72000, 75000], "over": [95000, 100000, 90000]}
    out: list[dict[str, object]] = []
    for (level, values), running, missing, pending, failed in itertools.product(
        levels.items(), (1, 2, 3, 5), (0, 1, 2), (0, 1, 3), (0, 1)
    ):
        pods: list[dict[str, object]] = []
        for i in range(running):
            pods.append({"name": f"run-{i}", "phase": "Running", "milli_value": values[i % len(values)]})
        pods += [{"name": f"nosample-{i}", "phase": "Running"} for i in range(missing)]
        pods += [{"name": f"pending-{i}", "phase": "Pending"} for i in range(pending)]
        pods += [{"name": f"failed-{i}", "phase": "Failed"} for i in range(failed)]
        current = running + missing + pending
        out.append({"kind": "pods", "level": level, "current": current, "target_milli": 70000,
                    "tolerance": 0.1, "pods": pods})  # fmt: skip
    return out


def external_cases() -> list[dict[str, object]]:
    """KEDA's queue threshold 20 per pod (20000 milli) against sums from 0 to 400 waiting on 0-8 pods."""
    out: list[dict[str, object]] = []
    totals = (0, 1, 19, 20, 21, 22, 39, 40, 51, 60, 100, 399)
    for status, total in itertools.product((0, 1, 2, 3, 5, 8), totals):
        out.append({"kind": "external-per-pod", "current": status, "target_milli": 20000, "tolerance": 0.1,
                    "external_milli": [total * 1000]})  # fmt: skip
    return out


def record(tree: Path, version: str) -> dict[str, object]:
    cases = pods_cases() + external_cases()
    target = tree / PACKAGE / HARNESS.name
    with tempfile.TemporaryDirectory(prefix="kube-hpa-") as tmp:
        gopath = Path(tmp) / "gopath"
        (gopath / "src" / "k8s.io").mkdir(parents=True)
        # GOPATH mode, as Kubernetes 1.20's own build runs: the vendor tree resolves every import
        (gopath / "src" / "k8s.io" / "kubernetes").symlink_to(tree.resolve())
        cases_path, out_path = Path(tmp) / "cases.json", Path(tmp) / "out.json"
        cases_path.write_text(json.dumps(cases))
        shutil.copy(HARNESS, target)
        try:
            env = {
                **os.environ, "GO111MODULE": "off", "GOPATH": str(gopath), "GOFLAGS": "", "CGO_ENABLED": "0",
                "GOPROXY": "off", "LLMSCALE_HPA_CASES": str(cases_path), "LLMSCALE_HPA_OUT": str(out_path),
            }  # fmt: skip
            cwd = gopath / "src" / "k8s.io" / "kubernetes"
            env["PWD"] = str(cwd)  # go reads the logical (symlinked, inside GOPATH) directory from PWD
            run = subprocess.run(
                ["go", "test", f"./{PACKAGE}/", "-run", "TestLlmscaleRecord", "-count=1"],
                cwd=cwd, env=env, capture_output=True, text=True,
            )  # fmt: skip
            if run.returncode != 0:
                raise SystemExit(f"go test failed:\n{run.stdout}\n{run.stderr}")
            recorded = json.loads(out_path.read_text())
        finally:
            target.unlink(missing_ok=True)
    go_version = subprocess.run(["go", "version"], capture_output=True, text=True, check=True).stdout.strip()
    for case, rec in zip(cases, recorded, strict=True):
        case["replicas"] = rec["replicas"]
        if rec.get("error"):
            case["error"] = rec["error"]
    return {
        "source": "kubernetes (Debian source package)",
        "version": version,
        "files": [f"{PACKAGE}/replica_calculator.go"],
        "recorded_with": go_version,
        "cases": cases,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, required=True, help="unpacked Kubernetes source tree")
    ap.add_argument("--version", required=True, help="the source package's version, recorded in the table")
    ap.add_argument("--out", type=Path, default=TABLE)
    args = ap.parse_args()
    doc = record(args.tree, args.version)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{args.out}: {len(doc['cases'])} cases, kubernetes {args.version}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
