"""The configuration of a standalone ``llmscale run`` over static scrape targets, for live tests.

The `slo` policy applying through KEDA's external scaler with the replica count read from the
metrics: no cluster is needed, every listener on 127.0.0.1 and the decision log in ``tmp_path``.
"""

from __future__ import annotations

from pathlib import Path

import yaml


def standalone_run_config(tmp_path: Path, urls: list[str], *, tick_s: float, timeout_s: float) -> Path:
    """Write ``tmp_path / "run.yaml"`` scraping ``urls`` (targets r0, r1, ...) and return its path."""
    doc = {
        "target": {"namespace": "serving", "name": "llm", "model": "llama-3-8b", "gpu": "h100-80gb"},
        "metrics": {
            "source": "scrape",
            "scrape": {
                "static_targets": [{"name": f"r{i}", "url": u} for i, u in enumerate(urls)],
                "timeout_s": timeout_s,
            },
        },
        "policy": {"name": "slo"},
        "guards": {"min_replicas": 1, "max_replicas": 16},
        "tick_s": tick_s,
        "mode": "apply",
        "actuator": {"kind": "keda", "keda": {"listen": "127.0.0.1:0", "replicas_from": "metrics"}},
        "server": {"listen": "127.0.0.1:0"},
        "decision_log": {"path": str(tmp_path / "decisions.jsonl")},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path
