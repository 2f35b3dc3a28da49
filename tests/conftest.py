"""Fixtures: compose a shrunk config; tests marked ``gpu`` run only where CUDA is."""
from __future__ import annotations

import pytest
import torch

from framework import compose
from tests.helpers.configs import TINY


def pytest_collection_modifyitems(config, items):
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
