"""One run as the checks before start read it: its resolved config (a read-only mapping), and what
several checks need worked out from it: the strategy's layout (class, typed options, topology),
whether the model fits this machine, and the model on the meta device. Each is worked out once,
when a check first asks, and shared by every check of that run (job/preflight.py builds one)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Optional

from framework.job.model_size import model_size_problems

_UNSET: Any = object()


class Experiment(Mapping):
    """The run's resolved config, read-only (``run["trainer"]``, ``run.get("model")``), and its derived facts."""

    def __init__(self, container: dict):
        self.config = container
        self._layout = self._size_problems = self._model = self._strategy_problems = _UNSET

    def __getitem__(self, key: str) -> Any:
        return self.config[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.config)

    def __len__(self) -> int:
        return len(self.config)

    @property
    def layout(self) -> Optional[tuple]:
        """(the strategy's class, its typed options, the topology), or None where the strategy or its
        layout is invalid (check_strategy names why)."""
        if self._layout is _UNSET:
            from framework.strategies import resolve

            try:
                self._layout = resolve(self.config)
            except Exception:  # noqa: BLE001 - named by check_strategy
                self._layout = None
        return self._layout

    @property
    def strategy_problems(self) -> list[str]:
        """What is wrong with the strategy, its options and its layout on these devices (check_strategy)."""
        if self._strategy_problems is _UNSET:
            from framework.strategies import check_strategy

            self._strategy_problems = check_strategy(self.config)
        return self._strategy_problems

    @property
    def size_problems(self) -> list[str]:
        """Why the model does not fit a rank of this machine (empty: it fits, or its size is unknown)."""
        if self._size_problems is _UNSET:
            self._size_problems = model_size_problems(self.config, self.layout)
        return self._size_problems

    @property
    def model(self):
        """The configured model on the meta device (no memory, no weights), or None where it does not
        build (its own errors surface when the ranks build it) or is too large to build even there."""
        if self._model is _UNSET:
            self._model = None if self.size_problems else _built_on_meta(self.config.get("model"))
        return self._model


def _built_on_meta(node):
    if not isinstance(node, dict):
        return None
    import torch
    from hydra.utils import instantiate

    try:
        with torch.device("meta"):
            return instantiate(node, _convert_="all")
    except Exception:  # noqa: BLE001
        return None
