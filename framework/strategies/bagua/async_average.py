"""Bagua's ``async`` algorithm: asynchronous model averaging. After ``warmup_steps`` of
synchronous gradient averaging, every rank trains on its own gradients while a background
thread averages the weights with all ranks every ``sync_interval_ms``, on a process group of
its own. The thread never writes the weights: it hands the main thread the change that the
average makes, applied right after the next optimizer step, so forward, backward, validation
and checkpoints never see weights change under them. Training ends with one synchronous
average: every rank tests and saves the same weights."""

from __future__ import annotations

import threading

import torch
import torch.distributed as dist

from framework.strategies.bagua.algorithms import Algorithm
from framework.strategies.bagua.reduce import allreduce_average
from framework.strategies.comm.bytes import allreduce_bytes, flat, unflatten_into


class AsyncModelAverage(Algorithm):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.group = dist.new_group(list(range(self.world)))  # every rank creates it, at set-up
        self.lock = threading.Lock()
        self.pending: torch.Tensor | None = None  # the average's change, for the main thread
        self.params: list[torch.Tensor] = []
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()
        self.rounds = 0

    def before_step(self, params) -> None:
        if self.steps < self.options.warmup_steps:  # synchronous until then
            self._average_gradients(params, lambda b: allreduce_average(b, self.world))

    def step_lock(self):
        return self.lock  # the thread reads the weights between optimizer steps only

    def after_step(self, params) -> None:
        with self.lock:
            if self.pending is not None:
                weights = [p.data for p in params]
                unflatten_into(flat(weights) + self.pending, weights)
                self.pending = None
        super().after_step(params)
        if self.thread is None and self.steps >= self.options.warmup_steps and not self.stopping.is_set():
            self.params = params
            self.thread = threading.Thread(target=self._average_forever, daemon=True, name="bagua-async")
            self.thread.start()

    def _average_forever(self) -> None:
        # Every rank takes part in every round until the vote says stop: a rank that left on
        # its own would leave the others waiting in the round's collective.
        while True:
            self.stopping.wait(self.options.sync_interval_ms / 1000)  # wakes early to vote stop
            if not self._round():
                return

    def _round(self) -> bool:
        """One averaging round, with every rank; False once any rank wants to stop."""
        go = torch.tensor([0 if self.stopping.is_set() else 1])
        dist.all_reduce(go, op=dist.ReduceOp.MIN, group=self.group)
        if not go.item():
            return False
        with self.lock:
            mine = flat([p.data for p in self.params]) + (self.pending if self.pending is not None else 0)
        average = mine / self.world
        dist.all_reduce(average, group=self.group)
        self.sent += allreduce_bytes(average.numel() * average.element_size(), self.world)
        self.rounds += 1
        with self.lock:
            change = average - mine
            self.pending = change if self.pending is None else self.pending + change
        return True

    def end_training(self, params) -> None:
        """Stop the thread (every rank's stops at the same round), then average once, synchronously."""
        if self.thread is not None:
            self.stopping.set()
            self.thread.join()  # its next round votes stop; the other ranks' threads leave with it
            self.thread = None
        weights = [p.data for p in params]
        buffer = flat(weights) + (self.pending if self.pending is not None else 0)
        self.pending = None
        self.sent += allreduce_average(buffer, self.world)
        unflatten_into(buffer, weights)
