"""``test_ckpt``: which weights the test loop runs on after training (lightning-hydra-template's
``ckpt_path="best"``): ``best`` (the checkpoint callback's best by its monitor), ``last`` (its
last save) or ``final`` (the weights training ended with); null = ``best`` when a checkpoint
callback monitors a metric (and no ``swa`` callback gives the model its average), else ``final``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from framework.config.experiment import Experiment, Spec
from framework.engine.checkpoint_files import is_checkpoint, resolve_ckpt_path, saved_step

log = logging.getLogger(__name__)


def _checkpoint_callbacks(run: Experiment) -> list[Spec]:
    """The checkpoint callbacks that run (fast_dev_run runs none, as Lightning's)."""
    if run.trainer.enable_checkpointing is False or run.trainer.fast_dev_run:
        return []
    return [spec for spec in run.callbacks.values() if str(spec.target or "").endswith("ModelCheckpoint")]


def requested(run: Experiment) -> str:
    """best | last | final, with null resolved."""
    if run.test_ckpt is not None:
        return run.test_ckpt
    if any(str(spec.target or "").endswith("SWA") for spec in run.callbacks.values()):
        return "final"  # the model holds the average once training ends: that is what to test
    return "best" if any(spec.get("monitor") for spec in _checkpoint_callbacks(run)) else "final"


@dataclass(frozen=True)
class WeightsToTest:
    """The run's ``test_ckpt``: the weights its test loop runs on after training."""

    run: Experiment

    @property
    def choice(self) -> str:
        return requested(self.run)

    def checkpoint(self) -> tuple[str, Path | None]:
        return test_checkpoint(self.run)

    def problems(self) -> list[str]:
        """best needs a checkpoint callback with a monitor, last one that saves last."""
        run = self.run
        choice = run.test_ckpt
        if choice not in ("best", "last") or not run.test or not run.train:
            return []
        nodes = _checkpoint_callbacks(run)
        if choice == "best" and not any(node.get("monitor") for node in nodes):
            return [
                "test_ckpt: best needs a checkpoint callback that monitors a metric (callbacks.model_checkpoint."
                "monitor, trainer.enable_checkpointing=true); choose test_ckpt=last|final, or configure one"
            ]
        if choice == "last" and not any(node.get("save_last", True) for node in nodes):
            return [
                "test_ckpt: last needs a checkpoint callback with save_last=true (and "
                "trainer.enable_checkpointing=true); choose test_ckpt=best|final, or configure one"
            ]
        return []


def test_checkpoint(run: Experiment) -> tuple[str, Path | None]:
    """(the weights to test, the checkpoint holding them; None = the weights in memory). A
    missing best/last (no validation ran, say) falls back to final, with a warning."""
    choice = requested(run)
    if choice == "final":
        return "final", None
    nodes = _checkpoint_callbacks(run)  # its dirpath, when the callback was given another
    path = resolve_ckpt_path(choice, str(run.output_dir), nodes[0].get("dirpath") if nodes else None)
    if not is_checkpoint(path):
        log.warning("test_ckpt=%s: no such checkpoint (%s); testing the final weights", choice, path)
        return "final", None
    return choice, path


def record(which: str, path: Path | None) -> dict:
    """results.json's ``test_ckpt``."""
    return {"weights": which, "path": str(path.resolve()) if path else None, "step": saved_step(path) if path else None}
