"""The run's callbacks: their hooks by event, their checkpointed state by key, and the weights
they choose for evaluation passes."""

from __future__ import annotations

import contextlib
from typing import Mapping, Optional, Sequence

import torch

from framework.engine.protocols import EVENTS


class CallbackList:
    """Calls each event's hooks in the configured order (each gets the trainer first)."""

    def __init__(self, callbacks: Mapping[str, object] | Sequence[object] = ()):
        # Callback state in checkpoints is keyed by the callback's config name (or its own
        # state_key), so removing one callback never hands its state to another.
        named = (
            list(callbacks.items())
            if isinstance(callbacks, Mapping)
            else [(type(cb).__qualname__, cb) for cb in callbacks]
        )
        self.callbacks = [cb for _, cb in named]
        self.keys = [getattr(cb, "state_key", None) or name for name, cb in named]
        self._hooks = {e: [getattr(cb, e) for cb in self.callbacks if callable(getattr(cb, e, None))] for e in EVENTS}
        # Callbacks that run evaluation on other weights (EMA, SWA): contexts around each pass's forwards.
        self._evaluation_weights = [
            cb.evaluation_weights for cb in self.callbacks if callable(getattr(cb, "evaluation_weights", None))
        ]
        # ... and those that keep tensors laid out like the model's (saved through DCP with it).
        self.sharded_keys = [
            key for key, cb in zip(self.keys, self.callbacks) if callable(getattr(cb, "sharded_state_dict", None))
        ]

    def __iter__(self):
        return iter(self.callbacks)

    def __len__(self) -> int:
        return len(self.callbacks)

    def has(self, event: str) -> bool:
        return bool(self._hooks[event])

    def call(self, event: str, trainer, *args) -> None:
        for hook in self._hooks[event]:
            hook(trainer, *args)

    def weights_for(self, trainer, stage: str) -> contextlib.ExitStack:
        """The weights callbacks choose for a ``stage`` pass ("val", "test", "predict") swapped in."""
        stack = contextlib.ExitStack()
        for weights in self._evaluation_weights:
            stack.enter_context(weights(trainer, stage))
        return stack

    def state_dict(self) -> dict:
        return {
            key: cb.state_dict()
            for key, cb in zip(self.keys, self.callbacks)
            if callable(getattr(cb, "state_dict", None))
        }

    def sharded_state(self, trainer) -> dict[str, dict[str, torch.Tensor]]:
        """The tensors of callbacks that keep some laid out like the model (EMA, SWA), by state key."""
        return {
            key: cb.sharded_state_dict(trainer)
            for key, cb in zip(self.keys, self.callbacks)
            if key in self.sharded_keys
        }

    def load_states(self, states: dict, only: Optional[Sequence[str]] = None) -> dict:
        """Give each callback (of the keys ``only``, when given) its saved state; returns the
        states no configured callback took."""
        saved = dict(states)
        for key, cb in zip(self.keys, self.callbacks):
            if key in saved and (only is None or key in only) and callable(getattr(cb, "load_state_dict", None)):
                cb.load_state_dict(saved.pop(key))
        return saved
