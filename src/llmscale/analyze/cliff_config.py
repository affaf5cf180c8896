"""The P99 knee of a decision log as a ``--policy-config`` file: the cliff the capacity-model
policies keep a margin from (``llmscale analyze DECISIONS.jsonl --policy-config-out cliff.yaml``).

The knee (:func:`llmscale.analyze.knee.find_knee` on P99 against load per serving replica, seed
003 2.3's rule) is a property of the fleet and its workload, not of the policy that logged it, so
one log gives every policy that plans a rate per replica its ``cliff_rps_per_replica``
(:mod:`llmscale.policies._cliff`). The file is checked by the same loader ``backtest`` and ``run``
use before it is written, so what is written loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from llmscale.errors import ConfigError

__all__ = ["CLIFF_POLICIES", "cliff_policy_config", "write_cliff_config"]

#: the policies that take ``cliff_rps_per_replica``: those that plan a request rate per replica
#: (``capacity`` sizes from requests in the system with the seed's constants and reads no rate)
CLIFF_POLICIES: Final = ("slo", "capacity-calibrated")


def cliff_policy_config(cliff_rps_per_replica: float) -> dict[str, dict[str, Any]]:
    """``{policy: {"cliff_rps_per_replica": cliff}}`` for each of :data:`CLIFF_POLICIES`, checked
    against their declarations (ConfigError names the parameter when the value is out of range)."""
    from llmscale.policies.config_file import check_policy_params

    value = round(float(cliff_rps_per_replica), 4)
    return check_policy_params({name: {"cliff_rps_per_replica": value} for name in CLIFF_POLICIES})


def write_cliff_config(path: Path, cliff_rps_per_replica: float, source: str) -> dict[str, dict[str, Any]]:
    """Write the ``--policy-config`` file to ``path`` and return what it holds.

    The first lines say where the number came from, so a file found later explains itself.
    """
    import yaml

    doc = cliff_policy_config(cliff_rps_per_replica)
    header = (
        f"# llmscale analyze {source}: P99 latency turns up at {cliff_rps_per_replica:.4g} req/s per\n"
        "# serving replica (seed 003 2.3's knee). Capacity-model policies plan at most\n"
        "# cliff_margin (default 0.9) of it per replica. Use: llmscale backtest --policy-config FILE\n"
    )
    try:
        path.write_text(header + yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot write the policy config: {e.strerror or e}") from e
    return doc
