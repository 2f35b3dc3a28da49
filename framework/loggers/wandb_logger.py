"""Weights & Biases (optional: ``pip install wandb``). ``mode: offline`` (the default here)
writes the run under ``save_dir/wandb/`` with no network; ``wandb sync <that dir>`` uploads it
later, ``mode: online`` streams it live."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from framework.config.optional_modules import install_hint

MODES = ("online", "offline", "disabled")


class WandbLogger:
    def __init__(
        self,
        project: str = "framework",
        name: Optional[str] = None,
        save_dir: str = ".",
        mode: str = "offline",
        id: Optional[str] = None,
        group: Optional[str] = None,  # noqa: A002
        tags: Optional[Sequence[str]] = None,
        entity: Optional[str] = None,
    ):
        import wandb  # imported here: wandb is an optional extra, and slow to import

        # console off: the framework's own log and progress bar stay as they are
        settings = wandb.Settings(silent=True, console="off")
        self.run = wandb.init(
            project=project,
            name=name,
            dir=save_dir,
            mode=mode,
            id=id,
            group=group,
            tags=list(tags) if tags else None,
            entity=entity,
            settings=settings,
            resume="allow" if id else None,
        )

    @classmethod
    def check_config(cls, mode: Any = "offline", **_) -> list[str]:
        problems = []
        try:
            import wandb  # noqa: F401
        except ImportError:
            problems.append(
                f"logger.wandb: wandb is not installed; {install_hint('wandb')}, "
                "or choose logger=tensorboard / logger=csv"
            )
        if mode not in MODES:
            problems.append(f"logger.wandb.mode: {mode!r} is not one of {', '.join(MODES)}")
        return problems

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def log_hparams(self, params: dict, metrics: dict[str, float]) -> None:
        self.run.config.update(params, allow_val_change=True)
        self.run.summary.update(metrics)

    def finalize(self, status: str) -> None:
        import wandb

        self.run.finish(exit_code=0 if status == "completed" else 1)
        if wandb.run is None:  # W&B's service process would outlive the run until this process exits
            wandb.teardown()
