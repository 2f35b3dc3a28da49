"""``test_ckpt``: which weights the test loop runs on after training (lightning-hydra-template's
``ckpt_path="best"``): ``best`` (the checkpoint callback's best by its monitor), ``last`` (its
last save) or ``final`` (the weights training ended with); null = ``best`` when a checkpoint
callback monitors a metric (and no ``swa`` callback gives the model its average), else ``final``."""

from __future__ import annotations

import logging
from pathlib import Path

from framework.engine.checkpoint_files import is_checkpoint, resolve_ckpt_path, saved_step

log = logging.getLogger(__name__)


def _checkpoint_callbacks(container: dict) -> list[dict]:
    """The checkpoint callbacks that run (fast_dev_run runs none, as Lightning's)."""
    trainer = container.get("trainer") or {}
    if trainer.get("enable_checkpointing") is False or trainer.get("fast_dev_run"):
        return []
    return [
        node
        for node in (container.get("callbacks") or {}).values()
        if isinstance(node, dict) and str(node.get("_target_", "")).endswith("ModelCheckpoint")
    ]


def requested(container: dict) -> str:
    """best | last | final, with null resolved."""
    choice = container.get("test_ckpt")
    if choice is not None:
        return choice
    if any(
        isinstance(node, dict) and str(node.get("_target_", "")).endswith("SWA")
        for node in (container.get("callbacks") or {}).values()
    ):
        return "final"  # the model holds the average once training ends: that is what to test
    return "best" if any(node.get("monitor") for node in _checkpoint_callbacks(container)) else "final"


def test_ckpt_problems(container: dict) -> list[str]:
    """best needs a checkpoint callback with a monitor, last one that saves last."""
    choice = container.get("test_ckpt")
    if choice not in ("best", "last") or not container.get("test") or not container.get("train", True):
        return []
    nodes = _checkpoint_callbacks(container)
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


def test_checkpoint(container: dict) -> tuple[str, Path | None]:
    """(the weights to test, the checkpoint holding them; None = the weights in memory). A
    missing best/last (no validation ran, say) falls back to final, with a warning."""
    choice = requested(container)
    if choice == "final":
        return "final", None
    nodes = _checkpoint_callbacks(container)  # its dirpath, when the callback was given another
    path = resolve_ckpt_path(choice, str(container["output_dir"]), nodes[0].get("dirpath") if nodes else None)
    if not is_checkpoint(path):
        log.warning("test_ckpt=%s: no such checkpoint (%s); testing the final weights", choice, path)
        return "final", None
    return choice, path


def record(which: str, path: Path | None) -> dict:
    """results.json's ``test_ckpt``."""
    return {"weights": which, "path": str(path.resolve()) if path else None, "step": saved_step(path) if path else None}
