"""One run as the checks before start read it: the typed run (config/experiment.py) and what several
checks need worked out from it: the strategy's layout (class, typed options, topology), whether the
model fits this machine, and the model on the meta device. Each is worked out once, when a check
first asks, and shared by every check of that run (job/preflight.py builds one)."""

from __future__ import annotations

from functools import cached_property
from typing import Optional

from framework.config.experiment import Experiment
from framework.config.layout import Layout
from framework.job.model_size import model_size_problems


class ResolvedExperiment(Experiment):
    """The typed run, with its strategy resolved and its model built on the meta device, on demand."""

    @cached_property
    def layout(self) -> Optional[Layout]:
        """The strategy's layout (config/layout.py), or None where the strategy or its layout is invalid
        (StrategyNode names why)."""
        from framework.strategies import layout_of

        if self._layout is not None or self.strategy_problems:
            return self._layout
        try:
            return layout_of(self.strategy, self.trainer.devices, self.trainer.num_nodes)
        except ValueError:  # (options that lay out no topology here: named by StrategyNode)
            return None

    @cached_property
    def strategy_problems(self) -> list[str]:
        """What is wrong with the strategy, its options and its layout on these devices (StrategyNode)."""
        from framework.strategies import StrategyNode

        return StrategyNode(self).problems()

    @cached_property
    def size_problems(self) -> list[str]:
        """Why the model, with its adapters, does not fit a rank of this machine (empty: it fits, or its
        size is unknown). The base is counted from its config, before anything is built; the adapters
        from the base's layers on the meta device (``adapted_layers``), and QLoRA's base in NF4 from them too."""
        packed = None
        if self.adapter is not None and self.adapter.quantize and self.meta_model is not None:
            from framework.models.nf4 import bytes_saved

            packed = bytes_saved(self.meta_model)
        return self._base_size_problems or model_size_problems(self, self.layout, self.adapted_layers, packed)

    @cached_property
    def _base_size_problems(self) -> list[str]:
        return model_size_problems(self, self.layout)

    @cached_property
    def meta_model(self):
        """The configured model on the meta device (no memory, no weights), without adapters, or None
        where it does not build (its own errors surface when the ranks build it) or is too large to
        build even there."""
        return None if self._base_size_problems or not self.model.given else _built_on_meta(self.model.node)

    @cached_property
    def adapted_layers(self) -> Optional[dict[str, tuple[int, int]]]:
        """The linear layers ``adapter`` adapts, name: (in, out) features (None: no adapter, or no model
        on the meta device)."""
        if self.adapter is None or self.meta_model is None:
            return None
        from framework.models.lora import adapted_layers

        return adapted_layers(self.meta_model, self.adapter)


def _built_on_meta(node: dict):
    import torch
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        with torch.device("meta"):
            return instantiate(node, _convert_="all")
    except InstantiationException:  # (hydra's wrap of whatever the model's __init__ raised: its own check names it)
        return None
