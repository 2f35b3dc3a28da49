"""Each rank's torch threads: the cores it may use, shared by the node's ranks and by the sweep's
jobs running beside it; overridable; what a launcher set (OMP_NUM_THREADS) is kept."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from framework.cli import hydra_job
from framework.config.environment import PARALLEL_JOBS, RankEnv
from framework.config.experiment import Experiment
from framework.rank import run


@pytest.fixture
def eight_cores(monkeypatch):
    monkeypatch.setattr(run, "available_cores", lambda: 8)
    monkeypatch.setattr(hydra_job, "available_cores", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv(PARALLEL_JOBS, raising=False)


def _threads(num_threads=None, local_ranks=1) -> int:
    job = Experiment({"trainer": {"num_threads": num_threads}})
    return run.cpu_threads(job, RankEnv(local_world_size=local_ranks, world_size=local_ranks))


def test_the_cores_are_shared_by_the_ranks_and_the_jobs_beside_them(eight_cores, monkeypatch):
    assert _threads() == 8
    assert _threads(local_ranks=2) == 4
    monkeypatch.setenv(PARALLEL_JOBS, "2")
    assert _threads(local_ranks=2) == 2
    assert _threads(local_ranks=16) == 1  # never none


def test_what_the_user_or_the_launcher_set_wins(eight_cores, monkeypatch):
    assert _threads(num_threads=3, local_ranks=2) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # torchrun's
    assert _threads(local_ranks=2) == 1
    assert _threads(num_threads=6) == 6


@pytest.mark.parametrize(
    "launcher, n_jobs, parallel",
    [
        ("hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher", 3, 3),
        ("hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher", -1, 8),  # joblib: one per core
        ("hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher", -2, 7),
        ("hydra._internal.core_plugins.basic_launcher.BasicLauncher", None, 1),
    ],
)
def test_a_sweeps_jobs_at_once(eight_cores, launcher, n_jobs, parallel):
    hydra_cfg = OmegaConf.create({"launcher": {"_target_": launcher, **({"n_jobs": n_jobs} if n_jobs else {})}})
    assert hydra_job.parallel_jobs(hydra_cfg) == parallel


def test_a_small_model_trains_on_one_thread_unless_told_otherwise(eight_cores, monkeypatch):
    import torch

    small, large = torch.nn.Linear(100, 10), torch.nn.Linear(1000, 1000)  # 1k and 1M parameters
    unset = Experiment({"trainer": {"num_threads": None}})
    assert run.model_threads(unset, 8, small) == 1 and run.model_threads(unset, 8, large) == 8
    assert run.model_threads(Experiment({"trainer": {"num_threads": 4}}), 4, small) == 4
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert run.model_threads(unset, 2, small) == 2
