"""Seeding and determinism, as Lightning's seed_everything and Trainer(deterministic=True)."""

from __future__ import annotations

import contextlib
import logging
import os
import random

import numpy as np
import torch

log = logging.getLogger(__name__)


def seed_everything(seed: int | None) -> int:
    """Seed python, numpy and torch (all devices) with ``seed``; None draws one. Returns the seed used."""
    if seed is None:
        seed = random.SystemRandom().randrange(0, 2**31 - 1)
        log.info("No seed given; drew seed=%d", seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return seed


@contextlib.contextmanager
def random_states_kept():
    """Every random state (python, numpy, torch on the CPU and each CUDA device) as it was, after work
    that seeds or draws on its own (lm-eval's scoring seeds all three): training after it draws what it
    would have drawn without it."""
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def set_deterministic(enabled: bool) -> None:
    """Ask torch for deterministic kernels (errors on ops that have none)."""
    if not enabled:
        return
    # cuBLAS needs a fixed workspace for reproducible matmuls.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def set_debug_flags(detect_anomaly: bool, benchmark: bool | None) -> None:
    """``trainer.detect_anomaly`` (autograd names the forward op behind a NaN gradient) and
    ``trainer.benchmark`` (cuDNN picks the fastest kernels; null leaves torch's setting)."""
    torch.autograd.set_detect_anomaly(detect_anomaly)
    if benchmark is not None:
        torch.backends.cudnn.benchmark = benchmark
