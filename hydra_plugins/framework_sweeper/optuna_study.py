"""``hydra/sweeper=optuna_study`` (hparams_search=digits_optuna's): Hydra's Optuna sweeper, whose study
continues in its sweep directory.

The stored trials are the sweep's own jobs: each job's overrides hold its sampled parameters, its
results.json the value it reached. The same command into the same ``hydra.sweep.dir`` rebuilds the
study from them (``storage: null``, the default; a ``storage`` of your own is loaded as Optuna loads it),
so the sampler continues from every trial so far, and:

- ``n_trials`` is the study's total: a rerun runs only the trials it lacks;
- a job that finished (completed, or failed, invalid, diverged: a failed trial) is a trial that ended;
- a job that did not finish (interrupted, stopped while it was set up) is asked again first, with its
  parameters, so that it resumes from its checkpoint in its own directory (the launcher is the
  framework's ``StudyLauncher``: jobs are known by their overrides, new ones numbered after the highest).

(A database storage, Optuna's own way, needs SQLAlchemy < 2 with the Optuna 2 that hydra-optuna-sweeper
requires; the jobs' records need nothing beside them.)
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any, List, Optional

from omegaconf import OmegaConf

from hydra_plugins.framework_sweeper.sweeper import override_key

try:  # pip install 'framework[sweep]'; Hydra imports every plugin module, installed or not
    from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper
except ImportError:  # pragma: no cover - hydra/sweeper=optuna_study then fails on its missing defaults
    OptunaSweeper = object

log = logging.getLogger(__name__)

# The study's name when the config names none.
STUDY_NAME = "study"


class FrameworkOptunaSweeper(OptunaSweeper):
    def setup(self, *, hydra_context, task_function, config) -> None:
        # (imported here: the console registers this plugin at every start, --help too)
        from hydra_plugins.framework_sweeper.study_launcher import StudyLauncher

        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self.sweeper.launcher = StudyLauncher(self.sweeper.launcher, hydra_context, config)
        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        self.metric = config.get("optimized_metric") or "val/loss"
        self.sampler_config = OmegaConf.select(config, "hydra.sweeper.sampler")

    def sweep(self, arguments: List[str]) -> Any:
        impl = self.sweeper
        impl.study_name = impl.study_name or STUDY_NAME
        if impl.storage is None and len(impl._get_directions()) == 1:
            impl.storage, impl.n_trials = self._stored_study(list(arguments))
        return super().sweep(arguments)

    def _stored_study(self, arguments: list[str]):
        """The study rebuilt from the sweep directory's jobs (an in-memory storage the sweeper loads),
        and how many trials it lacks of ``n_trials``."""
        import optuna
        from optuna.storages import InMemoryStorage

        from hydra_plugins.framework_sweeper.study import FINISHED, job_key, past_jobs
        from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides

        impl = self.sweeper
        impl._process_searchspace_config()
        distributions, fixed = create_params_from_overrides(impl._parse_sweeper_params_config() + arguments)
        distributions = {**(impl.search_space_distributions or {}), **distributions}
        storage = InMemoryStorage()
        study = optuna.create_study(study_name=impl.study_name, storage=storage, directions=impl._get_directions())
        fixed_key = job_key(f"{k}={v}" for k, v in fixed.items() if override_key(k) not in distributions)
        ended = asked_again = 0
        for job in past_jobs(self.sweep_dir)[0].values():
            params = trial_params(job, distributions, fixed_key)
            if params is None:
                continue  # not a trial of this study (other fixed overrides, other parameters)
            if job.status in FINISHED or job.status in ("failed", "invalid"):
                value = _value(job, self.metric)
                state = optuna.trial.TrialState.COMPLETE if value is not None else optuna.trial.TrialState.FAIL
                study.add_trial(
                    optuna.trial.create_trial(state=state, value=value, params=params, distributions=distributions)
                )
                ended += 1
            else:  # it did not finish: asked again first, it resumes in its directory
                study.enqueue_trial(params)
                asked_again += 1
        left = max(0, impl.n_trials - ended)
        self._continued_sampler(ended + asked_again)
        if ended or asked_again:
            log.info(
                "Optuna study '%s' from %s: %d trial(s) ended, %d asked again first; %d of n_trials=%d to run",
                impl.study_name,
                self.sweep_dir,
                ended,
                asked_again,
                left,
                impl.n_trials,
            )
        return storage, left

    def _continued_sampler(self, trials: int) -> None:
        """A seeded sampler, made again with its seed moved on by the ``trials`` so far: with the seed it
        started with, it would draw the first session's parameters again (its random start-up trials)."""
        config = self.sampler_config
        if trials and config is not None and config.get("seed") is not None and not config.get("_partial_"):
            from hydra.utils import instantiate

            self.sweeper.sampler = instantiate(config, seed=int(config.seed) + trials)


def trial_params(job, distributions: dict, fixed_key: tuple) -> Optional[dict]:
    """The job's sampled parameters, as Optuna's values of ``distributions``; None when the job is not a
    trial of this study (its other overrides are not ``fixed_key``, or a value is outside its distribution)."""
    from hydra_plugins.framework_sweeper.study import job_key

    own: dict[str, str] = {}
    for override in job.overrides:  # the sampled value comes first (a fixed one of the same key after it)
        if "=" in override:
            own.setdefault(override_key(override), override.split("=", 1)[1])
    if any(name not in own for name in distributions):
        return None
    if job_key(o for o in job.overrides if override_key(o) not in distributions) != fixed_key:
        return None
    params = {}
    for name, distribution in distributions.items():
        value = _parsed(own[name], distribution)
        if value is None or not distribution._contains(distribution.to_internal_repr(value)):
            return None
        params[name] = value
    return params


def _parsed(text: str, distribution) -> Any:
    """``text`` (as the sweeper wrote the value into the override) as a value of ``distribution``."""
    from optuna.distributions import CategoricalDistribution, IntLogUniformDistribution, IntUniformDistribution

    if isinstance(distribution, CategoricalDistribution):
        return next((c for c in distribution.choices if str(c) == text), None)
    try:
        return (
            int(text) if isinstance(distribution, (IntUniformDistribution, IntLogUniformDistribution)) else float(text)
        )
    except ValueError:
        return None


def _value(job, metric: str) -> Optional[float]:
    """The job's value of ``metric`` (what the trial told Optuna); None when it has none (a failed trial)."""
    try:
        value = (json.loads((job.path / "results.json").read_text()).get("metrics") or {}).get(metric)
    except (OSError, ValueError):
        return None
    if job.status != "completed" or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)
