"""One job = one experiment: validate, save the resolved config, launch the ranks.

Shared by the Hydra entry point (``python -m framework.train``) and the Python API.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import shutil
from pathlib import Path
from typing import Callable, Optional

from omegaconf import DictConfig, OmegaConf

from framework.config import ConfigError
from framework.config.environment import detect_environment
from framework.config.experiment import Experiment
from framework.engine.attempts import attempt_dir, next_attempt
from framework.engine.run_directory import DirectoryLock
from framework.engine.signals import Interrupted
from framework.job.overwrite import replaces_previous_run
from framework.job.preflight import preflight
from framework.job.strategy_choice import auto_node
from framework.launch.start import launch, start_ranks_early
from framework.rank.known_warnings import quiet_known_warnings
from framework.strategies import launched_layout

log = logging.getLogger(__name__)


def run_job(cfg: DictConfig, after_validation: Optional[Callable[[Path], None]] = None) -> dict:
    """Validate ``cfg`` (raises ConfigError listing every problem, before anything is written
    but the log), take the run directory (one writer at a time: a run already writing there is
    refused), write ``config.yaml`` to this attempt's record in ``cfg.output_dir`` (and, on rank 0,
    whatever ``after_validation`` writes into that record's directory), train; return the results."""
    start_ranks_early(cfg)
    env = detect_environment()
    owner = env is None or env.rank == 0  # SLURM tasks share the job's directory; rank 0 writes
    quiet_known_warnings(0 if owner else 1)  # (the checks import what warns too: transformers, torchao)
    # Taken first: a run already writing there is named at once, before anything is checked or written.
    with DirectoryLock(Path(cfg.output_dir)) if owner else contextlib.nullcontext():
        checked = preflight(cfg)
        # Ranks get the run resolved once, here: ${now:...} and friends fixed, the strategy's layout
        # and its options in full (its schema's defaults filled in; `auto` on several devices: the
        # candidates that fit, for the ranks to choose from, the first one's layout meanwhile).
        auto = auto_node(checked)
        changes = {"strategy": auto} if auto else {}
        if owner:
            _remove_previous_run(checked)
            # A later attempt in a run's directory (a resume) records itself beside the run's record,
            # which it replaces only when it ends (engine/attempts.py).
            changes["attempt"] = next_attempt(Path(checked.output_dir))
        run = checked.launched(launched_layout(checked.with_config(**changes) if auto else checked), **changes)
        output_dir = Path(run.output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        if owner:
            _write_record(run, attempt_dir(output_dir, run.attempt), after_validation)
        log.info("Experiment '%s', output in %s", run.name, output_dir)
        results = launch(run)
    _log_outcome(run.name, results, output_dir)
    if results.get("status") == "interrupted":
        raise Interrupted(results["signal_number"], results)
    return results


def _write_record(run: Experiment, record: Path, after_validation: Optional[Callable[[Path], None]]) -> None:
    """This attempt's config.yaml (the run's config, at the boundary out) and what ``after_validation``
    writes into ``record``; a disk that is full or read-only from the start is named before any
    process starts, not a traceback."""
    try:
        record.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(OmegaConf.create(run.config), record / "config.yaml")
        if after_validation is not None:
            after_validation(record)
    except OSError as err:
        raise ConfigError(
            [
                f"output_dir: cannot write the run's config.yaml to '{record}': {err.strerror or err}"
                + (" (the disk is full)" if err.errno == errno.ENOSPC else "")
            ]
        ) from None


def _log_outcome(name: str, results: dict, output_dir: Path) -> None:
    metrics = results.get("metrics", {})
    shown = ", ".join(
        f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
        for k, v in sorted(metrics.items())
        if k.startswith(("val/", "test/", "harness_start/", "harness/"))
    )
    log.info("Finished '%s' (%s): %s", name, results.get("status"), shown or "no metrics")
    written = ", ".join(sorted(p.name + ("/" if p.is_dir() else "") for p in output_dir.iterdir()))
    log.info("Outputs: %s (%s)", output_dir.resolve(), written)


def _remove_previous_run(run: Experiment) -> None:
    """overwrite=true: the previous run's outputs go, so that its TensorBoard events, metrics and
    checkpoints do not mix into this run's."""
    from framework.models.hf_export import remove_export

    replaced = replaces_previous_run(run)
    for name in replaced:
        path = Path(run.output_dir) / name
        if name == "model_hf" and (path.is_dir() or path.is_symlink()):  # an export's own files: the user's stay
            kept = remove_export(path)
            if kept:
                log.warning("overwrite=true: kept %s in %s, not written by the previous run's export", kept, path)
            continue
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()  # (a link: itself)
    if replaced:
        log.warning("overwrite=true: removed the previous run's %s from %s", ", ".join(replaced), run.output_dir)
