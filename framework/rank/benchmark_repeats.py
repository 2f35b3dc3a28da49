"""``benchmark_repeats``: the job's training again, for the spread of its throughput.

A timing from one run says little on a shared machine. The extra runs train a fresh model
from the same seed through the same strategy (the process group stays), with no callbacks,
loggers, checkpoints or resume, so nothing the job wrote or reports changes but the
throughput's figures: ``samples_per_s_repeats`` (the job's own run first) and
``samples_per_s``, their median.
"""

from __future__ import annotations

import logging
import statistics
import tempfile

from framework.config.environment import RankEnv
from framework.config.experiment import Experiment
from framework.engine.results import throughput
from framework.engine.trainer import Trainer
from framework.rank.build import apply_configured_init, build_trainer
from framework.strategies.base import Strategy

log = logging.getLogger(__name__)


def fit_quietly(run: Experiment, env: RankEnv, strategy: Strategy, scratch: str, signals=None) -> Trainer:
    """Train a fresh model of ``run`` from its seed through ``strategy`` with no callbacks, loggers,
    checkpoints or resume, writing only to ``scratch``; the trainer that did it (its step times).
    Shared by the benchmark repeats and strategy=auto's probe (rank/strategy_probe.py)."""
    quiet = run.with_config(callbacks=None, logger=None, ckpt_path=None, output_dir=scratch)
    trainer, parts = build_trainer(quiet, env, strategy, signals)
    apply_configured_init(quiet, parts.model)
    trainer.fit(parts.model, parts.datamodule, parts.optimizer_factory, parts.scheduler)
    return trainer


def repeat_timing(run: Experiment, env: RankEnv, strategy: Strategy, first: dict) -> dict:
    """``first`` (the job's throughput) with ``run.benchmark_repeats - 1`` more runs' samples/s."""
    rates = [first.get("samples_per_s")]
    with tempfile.TemporaryDirectory(prefix="framework-repeat-") as scratch:
        for repeat in range(1, run.benchmark_repeats):
            trainer = fit_quietly(run, env, strategy, scratch)
            rates.append(throughput(trainer.step_times, trainer.train_samples)["samples_per_s"])
            log.info("benchmark repeat %d/%d: %.4g samples/s", repeat + 1, run.benchmark_repeats, rates[-1])
    measured = [r for r in rates if r]
    return {
        **first,
        "samples_per_s_repeats": rates,
        "samples_per_s": statistics.median(measured) if measured else first.get("samples_per_s"),
    }
