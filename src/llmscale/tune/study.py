"""The study of ``llmscale tune``: Optuna's TPE over a policy's parameters, resumable from SQLite.

**The objective and the constraint.** Each trial backtests the policy on every tuning trace
(:func:`llmscale.tune.objective.evaluate`). Its value is the GPU-hours summed over the traces,
minimised; SLO attainment at or above the target is a *constraint*, not a penalty term: the TPE
sampler gets the constraint ``target - attainment`` on each trial (feasible when <= 0), so it models
feasible and infeasible regions apart instead of trading SLO misses against GPU-hours at some
exchange rate, and the best trial is the fewest GPU-hours among the feasible ones (ties: the
higher attainment). A trial that saves GPU-hours by missing the SLO can never be the answer.

**The baseline.** The first trial of a new study is what the user runs today: the policy's
declared defaults with the ``--policy-config`` entry over them (when each lies in the searched
window), so the report compares every trial with it and a study that finds nothing better
returns it.

**Resuming.** Trials live in an Optuna storage (SQLite by default, beside ``--out``). Running
the same command again loads the study and runs only what ``--trials`` still asks for (a larger
``--trials`` extends it). A trial that was running when the previous run stopped (Ctrl-C,
kill -9) is marked failed and its parameters are queued again, so no work is skipped. The study
remembers what it answers (policy, target, search space, traces, SLOs): a rerun that asks
another question under the same name is refused, naming the difference. One ``llmscale tune``
per study at a time: a second would mark the first one's running trials as stale.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmscale.errors import ConfigError, LlmscaleError
from llmscale.tune.objective import TrialOutcome, TuneCase
from llmscale.tune.space import SearchParam

if TYPE_CHECKING:
    import optuna

    from llmscale.tune.executors import Executor

__all__ = ["TrialRecord", "TuneResult", "TuneSpec", "default_storage", "run_study", "storage_url"]

#: user attributes of a trial
_ATTAINMENT = "attainment"
_GPU_HOURS = "gpu_hours"
_CASES = "cases"
_BASELINE = "baseline"
_ERROR = "error"
_INTERRUPTED = "interrupted"
#: the study's user attribute holding the question it answers
_QUESTION = "llmscale_question"
_RAN_ON = "ran_on"


@dataclass(frozen=True)
class TuneSpec:
    policy: str
    target_attainment: float
    trials: int
    storage: str
    study_name: str
    seed: int = 0
    #: the policy's ``--policy-config`` entry (guards included): underneath every trial's values
    base_params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrialRecord:
    number: int
    state: str  # "complete" or "fail"
    params: dict[str, Any]
    gpu_hours: float | None = None
    attainment: float | None = None
    feasible: bool = False
    baseline: bool = False
    error: str | None = None
    cases: tuple[dict[str, Any], ...] = ()
    ran_on: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "state": self.state,
            "params": self.params,
            "gpu_hours": self.gpu_hours,
            "attainment": self.attainment,
            "feasible": self.feasible,
            "baseline": self.baseline,
            "error": self.error,
            "cases": list(self.cases),
            "ran_on": self.ran_on,
        }


@dataclass(frozen=True)
class TuneResult:
    spec: TuneSpec
    space: tuple[SearchParam, ...]
    cases: tuple[str, ...]
    trials: tuple[TrialRecord, ...]
    #: trials run by this invocation (the rest came from the storage)
    ran_now: int

    @property
    def best(self) -> TrialRecord | None:
        """Fewest GPU-hours among the trials that met the target; ties go to the higher attainment."""
        feasible = [t for t in self.trials if t.feasible and t.gpu_hours is not None]
        if not feasible:
            return None
        return min(feasible, key=lambda t: (t.gpu_hours, -(t.attainment or 0.0), t.number))

    @property
    def baseline(self) -> TrialRecord | None:
        return next((t for t in self.trials if t.baseline and t.state == "complete"), None)

    def as_json(self) -> dict[str, Any]:
        best, base = self.best, self.baseline
        return {
            "policy": self.spec.policy,
            "target_attainment": self.spec.target_attainment,
            "study_name": self.spec.study_name,
            "storage": self.spec.storage,
            "cases": list(self.cases),
            "space": [
                {"name": p.name, "range": p.describe(), "default": p.default, "unit": p.unit, "help": p.help}
                for p in self.space
            ],
            "best": None if best is None else best.number,
            "baseline": None if base is None else base.number,
            "ran_now": self.ran_now,
            "trials": [t.as_json() for t in self.trials],
        }


def storage_url(value: str) -> str:
    """``--storage``: a database URL as Optuna takes it, or a file path meaning SQLite there."""
    if "://" in value:
        return value
    return f"sqlite:///{Path(value).expanduser().resolve()}"


def default_storage(out: Path) -> Path:
    """The study's SQLite file beside ``--out``: ``tuned.yaml`` -> ``tuned.optuna.db``."""
    return out.with_name(out.stem + ".optuna.db")


def _question(spec: TuneSpec, space: Sequence[SearchParam], cases: Sequence[TuneCase]) -> dict[str, Any]:
    """What a study answers: a rerun must ask the same to add trials to it."""
    first = cases[0].settings
    return {
        "policy": spec.policy,
        "target_attainment": spec.target_attainment,
        "space": {p.name: p.describe() for p in space},
        "base_params": json.loads(json.dumps(dict(spec.base_params), default=str)),
        "traces": [[c.label, int(c.workload.num_requests)] for c in cases],
        "slo": [first.slo_ttft_s, first.slo_tpot_s, first.slo_ttft_per_1k_tokens_s],
        "deployment": [first.model, first.gpu, first.tp],
    }


def _open(spec: TuneSpec, question: dict[str, Any]) -> optuna.Study:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # The constraint (target - attainment, feasible when <= 0) is set on each trial before it is
    # told (Trial.set_constraint, Optuna 5); the TPE sampler reads it from the stored trials.
    sampler = optuna.samplers.TPESampler(seed=spec.seed)
    try:
        study = optuna.create_study(
            study_name=spec.study_name,
            storage=spec.storage,
            direction="minimize",
            sampler=sampler,
            load_if_exists=True,
        )
    except (ImportError, ValueError, OSError) as e:
        raise ConfigError(f"--storage {spec.storage}: cannot open the study there: {e}") from e
    except Exception as e:  # sqlalchemy's OperationalError (an unwritable directory, a locked file)
        if type(e).__module__.startswith("sqlalchemy"):
            raise ConfigError(f"--storage {spec.storage}: cannot open the study there: {e}") from e
        raise
    stored = study.user_attrs.get(_QUESTION)
    if stored is None:
        study.set_user_attr(_QUESTION, question)
    elif stored != question:
        diff = [k for k in question if stored.get(k) != question[k]]
        raise ConfigError(
            f"study {spec.study_name!r} in {spec.storage} was run with other "
            f"{', '.join(diff)} ({'; '.join(f'{k}: {stored.get(k)} now {question[k]}' for k in diff)}); "
            "give another --study-name or --storage to start a new study"
        )
    return study


def _record(t: optuna.trial.FrozenTrial, target: float) -> TrialRecord:
    import optuna

    complete = t.state == optuna.trial.TrialState.COMPLETE
    attainment = t.user_attrs.get(_ATTAINMENT) if complete else None
    return TrialRecord(
        number=t.number,
        state="complete" if complete else "fail",
        params=dict(t.params),
        gpu_hours=float(t.value) if complete and t.value is not None else None,
        attainment=None if attainment is None else float(attainment),
        feasible=attainment is not None and float(attainment) >= target,
        baseline=bool(t.user_attrs.get(_BASELINE, False)),
        error=t.user_attrs.get(_ERROR),
        cases=tuple(t.user_attrs.get(_CASES, ())),
        ran_on=str(t.user_attrs.get(_RAN_ON, "")),
    )


def _counts(t: optuna.trial.FrozenTrial) -> bool:
    """Whether a finished trial counts toward ``--trials`` (an interrupted one is run again)."""
    import optuna

    if t.state == optuna.trial.TrialState.COMPLETE:
        return True
    return t.state == optuna.trial.TrialState.FAIL and not t.user_attrs.get(_INTERRUPTED, False)


def run_study(
    spec: TuneSpec,
    space: Sequence[SearchParam],
    cases: Sequence[TuneCase],
    executor_factory: Callable[[], Executor],
    *,
    on_trial: Callable[[TrialRecord, int], None] | None = None,
) -> TuneResult:
    """Run the study until ``spec.trials`` trials have finished; return every trial of it.

    ``executor_factory`` is called only when there is a trial to run (a finished study opens no
    Ray connection). ``on_trial(record, finished)`` follows progress. A trial whose evaluation
    raised an LlmscaleError (the policy refused the combination) is recorded as failed; any other
    exception stops the study with it, after marking the running trials for a rerun.
    """
    import optuna

    if not cases:
        raise ConfigError("llmscale tune needs at least one trace (--trace or --workload)")
    if not 0.0 < spec.target_attainment <= 1.0:
        raise ConfigError(f"--target-attainment = {spec.target_attainment}, must be in (0, 1]")
    target = spec.target_attainment
    study = _open(spec, _question(spec, space, cases))
    distributions = {p.name: p.distribution() for p in space}

    trials = study.get_trials(deepcopy=False)
    for stale in (t for t in trials if t.state == optuna.trial.TrialState.RUNNING):
        # Left running by a run that stopped: failed (so it does not count) and queued again.
        # Optuna's Trial over a stored trial id is how ask/tell addresses a trial of another run.
        handle = optuna.trial.Trial(study, stale._trial_id)
        handle.set_user_attr(_INTERRUPTED, True)
        study.tell(handle, state=optuna.trial.TrialState.FAIL)
        study.enqueue_trial(
            dict(stale.params), user_attrs={_BASELINE: stale.user_attrs.get(_BASELINE, False)}
        )
    if not trials:
        # What the user runs today: the --policy-config entry over the declared defaults.
        current = {p.name: spec.base_params.get(p.name, p.default) for p in space}
        inside = {k: v for k, v in current.items() if next(p for p in space if p.name == k).contains(v)}
        study.enqueue_trial(inside, user_attrs={_BASELINE: len(inside) == len(space)})

    finished = sum(_counts(t) for t in study.get_trials(deepcopy=False))
    ran_now = 0
    if finished < spec.trials:
        executor = executor_factory()
        in_flight: dict[int, optuna.trial.Trial] = {}
        try:
            while finished < spec.trials:
                while len(in_flight) < executor.slots and finished + len(in_flight) < spec.trials:
                    trial = study.ask(distributions)
                    in_flight[trial.number] = trial
                    executor.submit(trial.number, trial.params)
                got = executor.next_done(0.5)
                if got is None:
                    continue
                number, outcome = got
                trial = in_flight.pop(number)
                if isinstance(outcome, TrialOutcome):
                    trial.set_user_attr(_ATTAINMENT, outcome.attainment)
                    trial.set_user_attr(_GPU_HOURS, outcome.gpu_hours)
                    trial.set_user_attr(_CASES, outcome.as_json()["cases"])
                    trial.set_user_attr(_RAN_ON, outcome.ran_on)
                    trial.set_constraint(_ATTAINMENT, target - outcome.attainment)
                    frozen = study.tell(trial, outcome.gpu_hours)
                elif isinstance(outcome, LlmscaleError):
                    trial.set_user_attr(_ERROR, str(outcome))
                    frozen = study.tell(trial, state=optuna.trial.TrialState.FAIL)
                else:
                    in_flight[number] = trial  # marked for a rerun below, with the others
                    raise outcome
                finished += 1
                ran_now += 1
                if on_trial is not None:
                    on_trial(_record(frozen, target), finished)
        finally:
            executor.close()
            for trial in in_flight.values():
                trial.set_user_attr(_INTERRUPTED, True)
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                study.enqueue_trial(
                    dict(trial.params), user_attrs={_BASELINE: trial.user_attrs.get(_BASELINE, False)}
                )
    finished_trials = [t for t in study.get_trials(deepcopy=False) if _counts(t)]
    return TuneResult(
        spec=spec,
        space=tuple(space),
        cases=tuple(c.label for c in cases),
        trials=tuple(_record(t, target) for t in finished_trials),
        ran_now=ran_now,
    )


def best_config(result: TuneResult) -> dict[str, dict[str, Any]] | None:
    """The ``--policy-config`` document of the best trial: the base entry with the trial's values."""
    best = result.best
    if best is None:
        return None
    params = {**dict(result.spec.base_params), **best.params}
    return {result.spec.policy: {k: _plain(v) for k, v in params.items()}}


def _plain(value: Any) -> Any:
    """A value YAML writes plainly (a numpy scalar as a Python number). Floats keep every digit:
    the file must reproduce the trial exactly (``tests/tune/test_tune_cli.py`` backtests it)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    item = getattr(value, "item", None)
    return item() if callable(item) else value
