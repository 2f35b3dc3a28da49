"""Fixtures: compose a shrunk config; tests marked ``gpu`` run only where CUDA is."""

from __future__ import annotations

import pytest
import torch

from framework import compose
from tests.helpers.configs import TINY

# What starts other processes: ranks, a CLI, a venv, a cluster (the quick subset leaves these out:
# python -m pytest -m "not multiprocess").
_STARTS_PROCESSES = ("trainer.devices=2", "trainer.devices=4", "subprocess", "LAYOUTS", "horovodrun", "srun")


def _starts_processes(path) -> bool:
    if path not in _SCANNED:
        _SCANNED[path] = any(s in path.read_text() for s in _STARTS_PROCESSES)
    return _SCANNED[path]


_SCANNED: dict = {}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _starts_processes(item.path):
            item.add_marker(pytest.mark.multiprocess)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (benchmarks/gpu_check.sh runs these on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def tiny_cfg():
    def make(*overrides: str):
        return compose(TINY + list(overrides))

    return make
