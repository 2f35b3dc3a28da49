"""The end of a rank's job, whatever happened: loggers closed, results.json written (rank 0),
the process group left. Teardown never hides the error that ended the run."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from framework.config.experiment import Experiment
from framework.engine.results import write_results
from framework.strategies import Strategy

log = logging.getLogger(__name__)


def lost_peer(err: BaseException) -> bool:
    """A broken connection: usually a peer died."""
    text = str(err)
    return any(
        s in text
        for s in (
            "Connection reset by peer",
            "Connection closed by peer",
            "Connection refused",
            "Socket closed",
            "remote process exited",
            "Broken pipe",
        )
    )


def cleanup(run: Experiment, strategy: Strategy, loggers: list, results: dict, error: BaseException | None) -> None:
    """Each step runs whatever the others did; an error here is logged, and raised only when the
    run itself did not fail already."""
    first = None
    for logger in loggers:
        try:
            logger.finalize(results["status"])
        except Exception as err:  # noqa: BLE001 - reported here, raised below
            log.error(
                "rank %d: %s.finalize failed: %s: %s", strategy.rank, type(logger).__name__, type(err).__name__, err
            )
            first = first or err
    if first is not None and error is None:
        results.update(
            status="failed", error=f"{type(first).__name__} in a logger's finalize: {first}", failed_rank=strategy.rank
        )
    for what, step in [
        ("writing results.json", lambda: _write_results(run, strategy, results)),
        ("leaving the process group", strategy.teardown),
    ]:
        try:
            step()
        except Exception as err:  # noqa: BLE001
            log.error("rank %d: %s failed: %s: %s", strategy.rank, what, type(err).__name__, err)
            first = first or err
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if first is not None and error is None:
        raise first


def _write_results(run: Experiment, strategy: Strategy, results: dict) -> None:
    if strategy.is_global_zero:
        write_results(Path(run.output_dir), results, run.attempt)
