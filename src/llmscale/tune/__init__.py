"""``llmscale tune``: search a policy's parameters for the fewest GPU-hours at a target SLO
attainment, over one or more traces, in local processes or on a Ray cluster.

Design document 002 §5.3 asks how to weigh a hybrid policy's signals and names A/B tests and
hand tuning as today's answer, reinforcement learning (an MDP with a reward of service quality
and cost, learnt with PPO) as the promising one. This package does the step between: a
black-box search (Optuna's TPE) over the parameters a policy declares, each candidate scored by
backtesting it on the simulated fleet. Learning a policy with PPO in the same simulator is left
as future work.
"""

from llmscale.tune.executors import make_executor
from llmscale.tune.objective import TrialOutcome, TuneCase, evaluate
from llmscale.tune.output import write_outputs, write_policy_config
from llmscale.tune.space import SearchParam, parse_param_options, search_space
from llmscale.tune.study import TrialRecord, TuneResult, TuneSpec, default_storage, run_study, storage_url

__all__ = [
    "SearchParam",
    "TrialOutcome",
    "TrialRecord",
    "TuneCase",
    "TuneResult",
    "TuneSpec",
    "default_storage",
    "evaluate",
    "make_executor",
    "parse_param_options",
    "run_study",
    "search_space",
    "storage_url",
    "write_outputs",
    "write_policy_config",
]
