"""A sweep that continues in its directory, without training: each job of a grid mapped to the directory
that holds its overrides (kept, resumed, run afresh, new after the highest number), a changed config
refused by name, the launcher given only the jobs to run, and the sweep directories refused or continued."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra.core.utils import JobStatus
from omegaconf import OmegaConf

from hydra_plugins.framework_sweeper.study import (
    AFRESH,
    KEPT,
    NEW,
    RESUMED,
    differences,
    job_key,
    job_number,
    past_jobs,
    plan,
)
from hydra_plugins.framework_sweeper.study_launcher import StudyLauncher

SHARED = ["experiment=digits_mlp", "++trainer.max_epochs=2"]
CONFIG = {"seed": 0, "optimizer": {"lr": 0.1}, "trainer": {"max_epochs": 2}, "output_dir": None, "ckpt_path": None}


def grid(lrs, seeds) -> list[list[str]]:
    return [[*SHARED, f"++optimizer.lr={lr}", f"seed={seed}"] for lr in lrs for seed in seeds]


def job(sweep: Path, name: str, overrides, status=None, last=False, config=None, val_loss=1.0) -> Path:
    """A job directory as a sweep leaves it: .hydra/, results.json (``status``), checkpoints/last."""
    path = sweep / name
    (path / ".hydra").mkdir(parents=True)
    (path / "train.log").write_text("")
    OmegaConf.save(OmegaConf.create(list(overrides)), path / ".hydra" / "overrides.yaml")
    OmegaConf.save(OmegaConf.create(config or CONFIG), path / ".hydra" / "config.yaml")
    if status:
        results = {"status": status, "metrics": {"val/loss": val_loss}, "job": {"overrides": list(overrides)}}
        (path / "results.json").write_text(json.dumps(results))
    if last:
        (path / "checkpoints" / "last").mkdir(parents=True)
    return path


def test_a_job_is_known_by_its_overrides_not_by_how_it_ran():
    a = job_key(["seed=1", "++optimizer.lr=0.1", "hydra.sweep.subdir=4", "overwrite=true", "ckpt_path=last"])
    assert a == job_key(["optimizer.lr=0.1", "seed=1"]) == ("optimizer.lr=0.1", "seed=1")
    assert job_key(["seed=1", "ckpt_path=/runs/a/last"]) == ("ckpt_path=/runs/a/last", "seed=1")  # its own input
    assert job_key(["seed=1", "~callbacks.early_stopping"]) != job_key(["seed=1"])


def test_each_job_of_a_grown_grid_goes_to_the_directory_of_its_overrides(tmp_path):
    first = grid(["0.1"], [0, 1, 2, 3])
    job(tmp_path, "0", first[0], "completed")
    job(tmp_path, "1", first[1], "interrupted", last=True)
    job(tmp_path, "2", first[2], "failed")  # no checkpoint: afresh
    job(tmp_path, "3", first[3])  # set up, then stopped: nothing to replace
    (tmp_path / "5").mkdir()  # killed while it was set up: its overrides unknown, its number taken
    (tmp_path / "5" / "train.log").write_text("")
    past, taken = past_jobs(tmp_path)
    planned = plan(grid(["0.1", "0.2"], [0, 1, 2, 3]), past, taken)
    assert [(p.action, p.name) for p in planned] == [
        (KEPT, "0"),
        (RESUMED, "1"),
        (AFRESH, "2"),
        (NEW, "3"),
        *[(NEW, str(n)) for n in (6, 7, 8, 9)],  # after the highest directory, 5
    ]
    assert planned[1].launch_overrides()[-2:] == ["ckpt_path=last", "hydra.sweep.subdir=1"]
    assert planned[2].launch_overrides()[-2:] == ["overwrite=true", "hydra.sweep.subdir=2"]
    assert job_number(planned[4].launch_overrides(), 0) == 6 and job_number(["seed=1"], 3) == 3
    # overwrite=true: every job of the grid runs again, each in its own directory
    again = plan(grid(["0.1"], [0, 1]), past, list(taken), overwrite=True)
    assert [(p.action, p.name) for p in again] == [(AFRESH, "0"), (AFRESH, "1")]


def test_differences_name_every_changed_value_but_where_and_how_the_job_ran():
    now = {**CONFIG, "trainer": {"max_epochs": 3}, "output_dir": "/elsewhere", "ckpt_path": "last", "extra": 1}
    assert differences(CONFIG, now) == ["extra: (absent) -> 1", "trainer.max_epochs: 2 -> 3"]


class FakeLauncher:
    """A launcher that records what it was asked to run and answers each job completed."""

    def __init__(self, takes_job_numbers=False):
        self.calls = []
        if takes_job_numbers:
            self.takes_job_numbers = True

    def launch(self, job_overrides, initial_job_idx):
        self.calls.append((initial_job_idx, [list(o) for o in job_overrides]))
        return [type("R", (), {"status": JobStatus.COMPLETED, "overrides": o})() for o in job_overrides]


class FakeLoader:
    """Hydra's config loader as the launcher sees it: the job's config is CONFIG with its overrides."""

    def __init__(self, changed: dict | None = None):
        self.changed = changed or {}

    def load_sweep_config(self, master, overrides):
        values = {k.lstrip("+"): v for k, v in (o.split("=", 1) for o in overrides if "=" in o)}
        config = OmegaConf.create({**CONFIG, **self.changed, "seed": int(values.get("seed", 0))})
        config.hydra = {"runtime": {"choices": {"experiment": "digits_mlp"}}, "overrides": {"task": list(overrides)}}
        return config


def study_launcher(tmp_path, launcher, changed=None) -> StudyLauncher:
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}, "overwrite": False})
    context = type("Context", (), {"config_loader": FakeLoader(changed)})()
    return StudyLauncher(launcher, context, config)


def test_the_launcher_runs_only_the_jobs_not_kept_and_a_kept_job_answers_with_its_value(tmp_path):
    first = grid(["0.1"], [0, 1, 2])
    job(tmp_path, "0", first[0], "completed", config={**CONFIG, "seed": 0, "name": "digits_mlp"}, val_loss=0.25)
    job(tmp_path, "1", first[1], "interrupted", last=True, config={**CONFIG, "seed": 1, "name": "digits_mlp"})
    job(tmp_path, "2", first[2], "completed", config={**CONFIG, "seed": 2, "name": "digits_mlp"})
    (tmp_path / "sweep.json").write_text("{}")  # as the sweep's start writes it
    basic = FakeLauncher()
    returns = study_launcher(tmp_path, basic).launch(grid(["0.1"], [0, 1, 2, 3, 4]), initial_job_idx=0)
    assert returns[0].return_value == 0.25 and len(returns) == 5
    # one launch per run of consecutive numbers: hydra.job.num is the directory's number there too
    assert [(start, [o[-1] for o in jobs]) for start, jobs in basic.calls] == [
        (1, ["hydra.sweep.subdir=1"]),
        (3, ["hydra.sweep.subdir=3", "hydra.sweep.subdir=4"]),
    ]
    assert basic.calls[0][1][0][-2] == "ckpt_path=last"
    study = json.loads((tmp_path / "sweep.json").read_text())["study"]
    assert study == {"kept": ["0", "2"], "resumed": ["1"], "afresh": [], "new": ["3", "4"]}
    packed = FakeLauncher(takes_job_numbers=True)  # numbers its jobs from their directories: one batch
    study_launcher(tmp_path, packed).launch(grid(["0.1"], [0, 1, 2, 3, 4]), initial_job_idx=0)
    assert [len(jobs) for _, jobs in packed.calls] == [3]


def test_a_job_whose_saved_config_differs_is_named_and_nothing_runs(tmp_path, capsys):
    first = grid(["0.1"], [0, 1])
    job(tmp_path, "0", first[0], "completed", config={**CONFIG, "name": "digits_mlp"})
    job(tmp_path, "1", first[1], "completed", config={**CONFIG, "seed": 1, "name": "digits_mlp"})
    launcher = FakeLauncher()
    with pytest.raises(SystemExit) as exit_:
        study_launcher(tmp_path, launcher, changed={"trainer": {"max_epochs": 3}}).launch(first, 0)
    assert exit_.value.code == 2 and launcher.calls == []
    message = capsys.readouterr().err
    assert "job 0 (seed=0; completed): trainer.max_epochs: 2 -> 3 (saved -> now)" in message
    assert "job 1 (seed=1; completed)" in message and "set overwrite=true" in message


def test_a_new_sweep_keeps_hydras_numbering(tmp_path):
    launcher = FakeLauncher()
    study_launcher(tmp_path, launcher).launch(grid(["0.1"], [0, 1]), initial_job_idx=4)
    assert launcher.calls == [(4, grid(["0.1"], [0, 1]))]  # as given, nothing added


def _multirun_config(sweep_dir, sweeper="hydra_plugins.framework_sweeper.sweeper.FrameworkSweeper"):
    return OmegaConf.create(
        {
            "overwrite": False,
            "hydra": {
                "sweep": {"dir": str(sweep_dir)},
                "sweeper": {"_target_": sweeper},
                "runtime": {"choices": {}},
                "overrides": {"task": []},
            },
        }
    )


def test_a_directory_that_is_not_a_continuable_sweep_is_refused(tmp_path, capsys):
    from framework.report import SweepReport

    job(tmp_path, "0", grid(["0.1"], [0])[0], "completed")
    for config, why in [
        (_multirun_config(tmp_path), "it is not a sweep's: no sweep.json"),
        (_multirun_config(tmp_path, "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"), "BasicSweeper"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            SweepReport().on_multirun_start(config)
        assert exit_.value.code == 2
        assert f"already holds the results of jobs 0 ({why}" in capsys.readouterr().err
        (tmp_path / "sweep.json").write_text(json.dumps({"started_at": 1.0}))  # a sweep's, for the second case
    report = SweepReport()
    report.on_multirun_start(_multirun_config(tmp_path))  # the framework's sweeper continues it
    record = json.loads((tmp_path / "sweep.json").read_text())
    report._lock.release()
    assert record["session"] == 2 and record["first_started_at"] == 1.0 and "hydra.sweep.dir=" in record["command"]


def test_a_continued_optuna_study_is_rebuilt_from_the_sweeps_jobs(tmp_path):
    import optuna
    from optuna.samplers import TPESampler
    from optuna.trial import TrialState

    from hydra_plugins.framework_sweeper.optuna_study import FrameworkOptunaSweeper

    params = {"optimizer.lr": "interval(0.001, 0.1)", "datamodule.batch_size": "choice(32, 64)"}
    sweeper = FrameworkOptunaSweeper(
        sampler=TPESampler(seed=1),
        direction="minimize",
        storage=None,
        study_name="digits",
        n_trials=5,
        n_jobs=1,
        max_failure_rate=0.0,
        search_space=None,
        custom_search_space=None,
        params=OmegaConf.create(params),
    )
    sweeper.sweep_dir, sweeper.metric = tmp_path, "val/loss"
    sweeper.sampler_config = OmegaConf.create({"_target_": "optuna.samplers.TPESampler", "seed": 1})

    def trial(lr, batch, fixed="experiment=digits_mlp"):  # the overrides Optuna's sweeper gives a trial
        return [f"optimizer.lr={lr}", f"datamodule.batch_size={batch}", fixed]

    job(tmp_path, "0", trial(0.01, 32), "completed", val_loss=0.5)
    job(tmp_path, "1", trial(0.02, 64), "interrupted", last=True)  # its sweep was stopped
    job(tmp_path, "2", trial(0.05, 32), "failed")
    job(tmp_path, "3", trial(0.01, 32, "experiment=digits_cnn"), "completed")  # another study's
    storage, left = sweeper._stored_study(["experiment=digits_mlp"])
    study = optuna.load_study(study_name="digits", storage=storage)
    trials = study.get_trials(deepcopy=False)
    assert [(t.state, t.params) for t in trials] == [
        (TrialState.COMPLETE, {"optimizer.lr": 0.01, "datamodule.batch_size": 32}),
        (TrialState.WAITING, {}),  # asked again first: its parameters are the next trial's
        (TrialState.FAIL, {"optimizer.lr": 0.05, "datamodule.batch_size": 32}),
    ]
    assert trials[0].value == 0.5 and left == 3  # n_trials=5 in all, 2 ended
    asked = study.ask()
    assert asked.suggest_float("optimizer.lr", 0.001, 0.1) == 0.02
    # a seeded sampler starts again with its seed moved on, not drawing the first session's values again
    assert (
        sweeper.sweeper.sampler is not None
        and sweeper.sweeper.sampler._rng.get_state()[1][0] != (TPESampler(seed=1)._rng.get_state()[1][0])
    )


def test_hydras_plugin_scan_runs_every_module_of_the_framework_sweeper(monkeypatch):
    """Hydra's scan runs each module of hydra_plugins before it is in sys.modules (a dataclass whose
    annotations are strings fails there: the whole command did)."""
    import importlib.util
    import pkgutil
    import sys

    import hydra_plugins.framework_sweeper as package

    for info in pkgutil.walk_packages(package.__path__, prefix=package.__name__ + "."):
        monkeypatch.delitem(sys.modules, info.name, raising=False)
        spec = importlib.util.find_spec(info.name)
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
