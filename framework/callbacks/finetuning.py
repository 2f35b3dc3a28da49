"""BackboneFinetuning: train the head first, then the backbone with its own learning-rate factor."""

from __future__ import annotations

import logging

from framework.config.ranges import Range

log = logging.getLogger(__name__)

_LR_KEYS = ("lr", "initial_lr", "max_lr", "min_lr")


class BackboneFinetuning:
    """Freeze the submodule ``backbone`` until epoch ``unfreeze_at_epoch``; from then on it
    trains as its own optimizer param group with lr = (the first group's lr) x ``lr_factor``."""

    argument_ranges = {"unfreeze_at_epoch": Range(low=0), "lr_factor": Range(low=0, strict=True)}

    def __init__(self, backbone: str = "features", unfreeze_at_epoch: int = 5, lr_factor: float = 0.1):
        self.backbone, self.unfreeze_at_epoch, self.lr_factor = backbone, unfreeze_at_epoch, lr_factor
        self._params: list = []

    def on_fit_start(self, trainer) -> None:
        model = trainer.unwrapped_model
        try:
            module = model.get_submodule(self.backbone)
        except AttributeError:
            names = [n for n, _ in model.named_children()]
            raise ValueError(
                f"callbacks.backbone_finetuning.backbone: no submodule {self.backbone!r} "
                f"(top-level submodules: {', '.join(names)})"
            ) from None
        self._params = list(module.parameters())
        ids = {id(p) for p in self._params}
        # Out of the optimizer until unfrozen, so that no update (weight decay, momentum) touches them.
        for group in trainer.optimizer.param_groups:
            group["params"] = [p for p in group["params"] if id(p) not in ids]
        for p in self._params:
            p.requires_grad_(False)
        if trainer.current_epoch >= self.unfreeze_at_epoch:  # resumed past the unfreeze point
            self._unfreeze(trainer)

    def on_train_epoch_start(self, trainer) -> None:
        if trainer.current_epoch == self.unfreeze_at_epoch and not self._params[0].requires_grad:
            self._unfreeze(trainer)

    def _unfreeze(self, trainer) -> None:
        for p in self._params:
            p.requires_grad_(True)
        # The new group is the first one scaled by lr_factor, scheduler keys included
        # (initial_lr, and OneCycleLR's max_lr/min_lr), so the schedule goes on for it too.
        first = trainer.optimizer.param_groups[0]
        group = {k: v * self.lr_factor if k in _LR_KEYS else v for k, v in first.items() if k != "params"}
        if "name" in first:  # named groups (optimizer.param_groups): the new one is named after the submodule
            group["name"] = self.backbone
        trainer.optimizer.add_param_group({**group, "params": self._params})
        scheduler = getattr(trainer, "scheduler", None)
        base_lrs = getattr(scheduler, "base_lrs", None)
        if base_lrs is not None and len(base_lrs) < len(trainer.optimizer.param_groups):
            base_lrs.append(group.get("initial_lr", group["lr"]))
        lr = group["lr"]
        if trainer.is_global_zero:
            log.info("Unfroze %s at epoch %d with lr %.3g", self.backbone, trainer.current_epoch, lr)
