"""Fixtures: compose a shrunk config; tests marked ``gpu`` run only where CUDA is."""

from __future__ import annotations

import os

import pytest
import torch

from framework import compose
from framework.config.environment import PARALLEL_JOBS, available_cores
from tests.helpers.configs import TINY

# What starts other processes: ranks, a CLI, a venv, a cluster (the quick subset leaves these out:
# python -m pytest -m "not multiprocess").
_STARTS_PROCESSES = ("trainer.devices=2", "trainer.devices=4", "subprocess", "LAYOUTS", "horovodrun", "srun")


def _starts_processes(path) -> bool:
    if path not in _SCANNED:
        _SCANNED[path] = any(s in path.read_text() for s in _STARTS_PROCESSES)
    return _SCANNED[path]


_SCANNED: dict = {}

# Where a job's ranks rendezvous on a port derived from its job id (SLURM's, submitit's: 15000 + id)
# or horovodrun picks random ports from 1024 up: outside the kernel's ephemeral range, so two of
# these at once may take the same port. (Seen: two workers' SLURM clusters, each numbering its jobs
# from 1, both jobs on port 15001.) They share one worker, and tests/slurm one cluster.
_TAKE_FIXED_PORTS = (
    "tests/slurm/",
    "tests/strategies/test_horovod_backend.py",
    "tests/e2e/test_sweep.py::test_slurm_launcher_layout_through_submitit_local",
)


def pytest_xdist_auto_num_workers(config) -> int:
    """-n auto: two workers on two cores (a test's ranks fill the cores one worker leaves idle),
    one per two cores beyond, as a test's ranks take two."""
    cores = available_cores()
    return 1 if cores < 2 else max(2, cores // 2)


def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile (pyproject.toml), with the tests that take ports of their own choosing as one
    file: one after the other on one worker. (xdist_group marks would do it, but under pytest 9 the
    group that xdist appends to a test's id never reaches its scheduler.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ByFileAndPorts(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "fixed_ports" if nodeid.startswith(_TAKE_FIXED_PORTS) else super()._split_scope(nodeid)

    return ByFileAndPorts(config, log)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _starts_processes(item.path):
            item.add_marker(pytest.mark.multiprocess)
    # the long files first, the quick ones last: a worker left alone at the end finishes soon
    items.sort(key=lambda item: "multiprocess" not in item.keywords)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (benchmarks/gpu_check.sh runs these on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def workers_share_the_cores():
    """The xdist workers are jobs beside one another, as a sweep's are: each fit takes its share of the
    cores (framework/rank/run.py: cpu_threads), not every core. Two workers of two threads each on two
    cores would wait for one another's threads (a real model's step several times slower)."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    before = os.environ.get(PARALLEL_JOBS)
    if workers and before is None:
        os.environ[PARALLEL_JOBS] = workers
    yield
    if before is None:
        os.environ.pop(PARALLEL_JOBS, None)


@pytest.fixture
def tiny_cfg():
    def make(*overrides: str):
        return compose(TINY + list(overrides))

    return make


@pytest.fixture(scope="session", autouse=True)
def session_cache(tmp_path_factory):
    """``$XDG_CACHE_HOME`` (the framework's cache: a GGUF file's conversion) in one directory of this test
    session that both xdist workers share, so the real model converts once per session (a lock makes
    the first use safe) and no test writes to the user's ~/.cache. Set for the processes tests start too."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # (a worker's is popen-gw<n>/)
    cache = shared / "xdg-cache"
    cache.mkdir(exist_ok=True)
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(cache)
    yield cache
    if before is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = before
