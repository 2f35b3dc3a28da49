"""Every reason a run stops, in one place, and how the ranks agree on it.

A run stops when a callback asks (``requested``: early stopping, an epoch-interval timer), when
a stop signal arrived on any rank (``signal``), when the training loss stopped being finite
(``diverged``), or at ``max_steps``. Requests wait for ``min_epochs`` / ``min_steps``; the
others do not. Every rank stops after the same step: requests are all-reduced at validation
and epoch ends, signals and ``request_stop`` travel with a vote started at each step and read
one step later (no step waits for the reduction it starts).
"""

from __future__ import annotations

import logging
from typing import Optional

import torch

from framework.strategies.comm.collectives import all_reduce, all_reduce_async, is_distributed

log = logging.getLogger(__name__)


def unlimited(value: Optional[int]) -> bool:
    return value is None or value == -1


class Stopping:
    """The stop state of one rank's run. ``signals``: a StopSignals (engine/signals.py) whose
    first signal stops the run at a step boundary (None: signals are not watched)."""

    def __init__(self, config, device: torch.device, signals=None, is_global_zero: bool = True):
        self.config, self.device, self.signals, self.is_global_zero = config, device, signals, is_global_zero
        self.requested = False  # Trainer.should_stop: set by callbacks, agreed at validation and epoch ends
        self.signal: Optional[int] = None  # the signal number every rank stopped on
        self.diverged: Optional[dict] = None  # {"after_step", "by_step"} once a non-finite loss was seen
        self._vote_requested = False  # request_stop(): goes to every rank with the next vote
        self._vote = None  # (work, tensor) of the vote started at the last step
        self._told_minimum = False
        # The training losses since the last finiteness check, kept on the device: one list append
        # per step (no kernel, no host sync); the check sums them, and NaN/inf propagate into the sum.
        self._unchecked_losses: list[torch.Tensor] = []
        self._checked_step = 0

    def request_stop(self) -> None:
        """Stop every rank after the same step, on one rank's decision (its clock, say)."""
        self._vote_requested = True

    @property
    def votes_each_step(self) -> bool:
        return self.signals is not None or (self._vote_requested and not is_distributed())

    def vote(self) -> None:
        """Send this rank's flags (a signal received, request_stop) and read the flags all ranks
        sent one step earlier: every rank reads the same values at the same step."""
        received = [float(self.signals.received or 0) if self.signals is not None else 0.0, float(self._vote_requested)]
        agreed = received
        if is_distributed():
            agreed = [0.0, 0.0]
            if self._vote is not None:
                work, vote = self._vote
                work.wait()
                agreed = vote.tolist()
            vote = torch.tensor(received, device=self.device)
            self._vote = (all_reduce_async(vote, "max"), vote)
        if agreed[0]:
            self.requested, self.signal = True, int(agreed[0])
        elif agreed[1]:
            self.requested = True

    def finish_vote(self) -> None:
        """The last step's vote: complete it, its result is not needed."""
        if self._vote is not None:
            self._vote[0].wait()
            self._vote = None

    def agree(self) -> None:
        """A request made on any rank stops every rank at the same step."""
        if is_distributed():
            flag = torch.tensor(float(self.requested), device=self.device)
            self.requested = bool(all_reduce(flag, "max").item())

    def track_loss(self, loss: torch.Tensor) -> None:
        self._unchecked_losses.append(loss)

    def check_finite(self, step: int) -> bool:
        """False once a training loss was NaN or infinite; then the run stops (status "diverged").
        Collective: every rank calls it at the same point (log steps, epoch ends, checkpoint saves)."""
        if self.diverged is not None or not self._unchecked_losses:
            return self.diverged is None
        bad = torch.isfinite(torch.stack(self._unchecked_losses).sum()).logical_not().float().reshape(1)
        if all_reduce(bad, "max").item():
            self.diverged = {"after_step": self._checked_step, "by_step": step}
            self.requested = True
            if self.is_global_zero:
                log.error(
                    "The training loss became NaN or infinite between steps %d and %d: stopping; no "
                    "checkpoint is saved from now on",
                    self._checked_step + 1,
                    step,
                )
        else:
            self._unchecked_losses, self._checked_step = [], step
        return self.diverged is None

    def max_steps_reached(self, state) -> bool:
        return not unlimited(self.config.max_steps) and state.global_step >= self.config.max_steps

    def stops_now(self, state, num_training_batches: int) -> bool:
        """A stop was requested and ``min_epochs`` / ``min_steps`` are reached (as Lightning's: early
        stopping waits for them); a stop signal, divergence or ``max_steps`` stops regardless."""
        if not self.requested:
            return False
        if self.signal is not None or self.diverged is not None or self.max_steps_reached(state):
            return True
        cfg = self.config
        epochs_done = state.current_epoch + (state.batch_in_epoch >= num_training_batches)
        waiting = (cfg.min_epochs or 0) > epochs_done or (cfg.min_steps or 0) > state.global_step
        if waiting and not self._told_minimum and self.is_global_zero:
            log.info(
                "A stop was requested at step %d; training goes on to min_epochs=%s / min_steps=%s",
                state.global_step,
                cfg.min_epochs,
                cfg.min_steps,
            )
        self._told_minimum = self._told_minimum or waiting
        return not waiting
