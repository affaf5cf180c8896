"""``--policy-config policies.yaml``: parameters (and guard settings) per policy, checked on load.

The file maps a policy name to its parameters, with an optional ``guards:`` mapping of
:class:`~llmscale.guards.GuardConfig` settings for that policy::

    slo:
      target_utilization: 0.9
      guards:
        max_down_step: 2
    keda-queue:
      threshold: 15

Everything is checked here, before any simulation starts: the policy names (a misspelt
``sloo:`` used to be ignored without a word), each parameter against its declaration
(:class:`~llmscale.policies.params.Param`: name, type, range) and each guard setting against
GuardConfig. Every error is a ConfigError naming the file and the key path, e.g.
``policies.yaml: slo.target_utilization = 0: must be a finite number in (0, 1]``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llmscale.errors import ConfigError

__all__ = ["GUARDS_KEY", "check_policy_params", "load_policy_config"]

#: the key of a policy's guard settings inside its parameters
GUARDS_KEY = "guards"


def load_policy_config(path: Path) -> dict[str, dict[str, Any]]:
    """Read and check ``path``: ``{policy: {parameter: value, "guards": {...}}}``.

    Raises ConfigError whose message starts with the file name.
    """
    from llmscale.documents import read_yaml_file

    data = read_yaml_file(path, "the policy config")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a mapping of policy name -> parameters, got a YAML {_yaml_kind(data)}"
        )
    try:
        return check_policy_params(data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from e


def check_policy_params(data: Mapping[Any, Any]) -> dict[str, dict[str, Any]]:
    """Check a policy-config document (already parsed); errors name the key path."""
    from llmscale.guards import GUARD_FIELDS, MAX_REPLICAS, GuardConfig
    from llmscale.policies.base import POLICIES, policy_names, validate_params

    known = policy_names()
    out: dict[str, dict[str, Any]] = {}
    for name, params in data.items():
        if not isinstance(name, str) or name not in POLICIES:
            close = difflib.get_close_matches(str(name).strip().lower(), known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(f"{name}: unknown policy; {hint}known policies: {', '.join(known)}")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise ConfigError(
                f"{name}: expected a mapping of parameter -> value, got a YAML {_yaml_kind(params)}"
            )
        own = {k: v for k, v in params.items() if k != GUARDS_KEY}
        try:
            # The check `llmscale run` makes of policy.params: the declarations, the signal names
            # and the policy's rules across parameters, with no policy built.
            validate_params(name, own)
        except ConfigError as e:
            # Range and type errors already name "policy.parameter"; an unknown name gets the policy.
            raise ConfigError(str(e) if str(e).startswith(f"{name}.") else f"{name}: {e}") from e
        checked: dict[str, Any] = dict(own)
        if GUARDS_KEY in params:
            guards = params[GUARDS_KEY]
            if guards is None:
                guards = {}
            if not isinstance(guards, dict):
                raise ConfigError(
                    f"{name}.{GUARDS_KEY}: expected a mapping of guard setting -> value, "
                    f"got a YAML {_yaml_kind(guards)}"
                )
            for key in guards:
                if key not in GUARD_FIELDS:
                    raise ConfigError(
                        f"{name}.{GUARDS_KEY}.{key}: unknown guard setting; known: {', '.join(GUARD_FIELDS)}"
                    )
            try:
                # Bounds wide open underneath: min/max_replicas given alone are checked against
                # the backtest's bounds when the policy is built, not against GuardConfig's defaults.
                GuardConfig(min_replicas=0, max_replicas=MAX_REPLICAS).merged(guards)
            except ConfigError as e:
                raise ConfigError(f"{name}.{GUARDS_KEY}.{e}") from e
            checked[GUARDS_KEY] = dict(guards)
        out[name] = checked
    return out


def _yaml_kind(value: object) -> str:
    kinds = {bool: "boolean", str: "string", int: "integer", float: "number", list: "list", dict: "mapping"}
    return kinds.get(type(value), type(value).__name__)
