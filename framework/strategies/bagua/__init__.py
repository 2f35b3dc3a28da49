"""``strategy=bagua strategy.algorithm=...``: Bagua's communication algorithms (Lightning's
BaguaStrategy accepted them) on torch.distributed, so they run wherever torch runs, CPU
included. The model is not wrapped; parameters and buffers are broadcast from rank 0.

- ``gradient_allreduce``: full-precision gradient averaging (``hierarchical``: within each
  node first, then across nodes, then back within the node);
- ``bytegrad``: gradients averaged in 8 bits (min-max quantised, all-to-all + all-gather);
- ``decentralized``: no gradient exchange; weights averaged with peers every
  ``communication_interval`` steps (``peer_selection``: ``all`` or ``shift_one``);
- ``low_precision_decentralized``: the same with all peers, of 8-bit weight differences;
- ``qadam``: Adam (the configured optimizer's lr, betas, eps, weight_decay) whose momentum is
  averaged in 8 bits after ``warmup_steps`` of full-precision Adam;
- ``async``: after ``warmup_steps`` of gradient averaging, weights averaged in the background
  every ``sync_interval_ms`` while each rank trains on its own gradients.

Every algorithm counts the bytes its rank sends per step (results.json ``comm``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.distributed as dist
from torch import nn

from framework.config.ranges import ranged
from framework.config.schemas import StrategyConfig
from framework.config.topology import Topology
from framework.strategies.bagua.algorithms import SYNCHRONOUS
from framework.strategies.bagua.async_average import AsyncModelAverage
from framework.strategies.bagua.qadam import QAdam
from framework.strategies.base import Strategy
from framework.strategies.comm.bytes import broadcast_model

ALGORITHMS = {**SYNCHRONOUS, "async": AsyncModelAverage}


@dataclass
class BaguaConfig(StrategyConfig):
    name: str = "bagua"
    # Bagua's algorithm: its all-reduce, compressed, decentralized or asynchronous variants.
    algorithm: Literal[
        "gradient_allreduce", "bytegrad", "decentralized", "low_precision_decentralized", "qadam", "async"
    ] = "gradient_allreduce"
    hierarchical: bool = False  # gradient_allreduce
    peer_selection: Literal["all", "shift_one"] = "all"  # decentralized
    communication_interval: int = ranged(1, low=1)  # (low_precision_)decentralized: every N steps
    warmup_steps: int = ranged(100, low=0)  # qadam, async: synchronous steps first
    sync_interval_ms: int = ranged(500, low=1)  # async: average the weights this often


class BaguaStrategy(Strategy):
    name = "bagua"
    runs_adapters = holds_nf4 = False
    schema = BaguaConfig
    needs_process_group = True
    process_per_device = True

    @classmethod
    def check(cls, options: BaguaConfig, topology: Topology, accelerator: str) -> list[str]:
        problems = []  # (the options' ranges are BaguaConfig's, checked with its schema)
        if options.peer_selection == "shift_one" and options.algorithm != "decentralized":
            problems.append(
                f"strategy.peer_selection=shift_one: only strategy.algorithm=decentralized chooses "
                f"peers (here: {options.algorithm}, which averages with all ranks)"
            )
        return problems

    def parallelize(self, model: nn.Module) -> nn.Module:
        broadcast_model(model)
        groups = self._hierarchy() if self.options.hierarchical else None  # collective: only when used
        self.algorithm = ALGORITHMS[self.options.algorithm](self.options, self.rank, self.world_size, groups)
        return model

    def _hierarchy(self):
        """(this node's group, the nodes' first ranks' group, this node's first rank, am I it,
        ranks per node) for hierarchical reduction; every rank creates every group."""
        per_node = self.topology.processes_per_node
        node = self.rank // per_node
        nodes = [dist.new_group(list(range(n * per_node, (n + 1) * per_node))) for n in range(self.topology.num_nodes)]
        roots = dist.new_group([n * per_node for n in range(self.topology.num_nodes)])
        return nodes[node], roots, node * per_node, self.rank % per_node == 0, per_node

    def build_optimizer(self, model: nn.Module, optimizer_factory) -> torch.optim.Optimizer:
        if self.options.algorithm != "qadam":
            return super().build_optimizer(model, optimizer_factory)
        func, given = getattr(optimizer_factory, "func", None), getattr(optimizer_factory, "keywords", {})
        if func not in (torch.optim.Adam, torch.optim.AdamW):
            raise ValueError(
                f"strategy.algorithm=qadam: QAdam replaces the optimizer and takes its settings from "
                f"optimizer=adam or adamw; got {getattr(func, '__name__', func)}"
            )
        keys = ("lr", "betas", "eps", "weight_decay")
        optimizer = QAdam(
            self.optimizer_params(model, optimizer_factory),
            **{k: v for k, v in given.items() if k in keys},
            warmup_steps=self.options.warmup_steps,
            world=self.world_size,
            counter=self._count,
        )
        self.algorithm.optimizer = optimizer
        return optimizer

    def _count(self, sent: float) -> None:
        self.algorithm.sent += sent

    def optimizer_step(self, model: nn.Module, optimizer, precision, clip_val, clip_algorithm) -> None:
        params = [p for p in model.parameters() if p.requires_grad]
        if self.world_size == 1:
            super().optimizer_step(model, optimizer, precision, clip_val, clip_algorithm)
            self.algorithm.steps += 1
            return
        self.algorithm.before_step(params)
        with self.algorithm.step_lock():
            super().optimizer_step(model, optimizer, precision, clip_val, clip_algorithm)
        self.algorithm.after_step(params)

    def end_training(self, model: nn.Module) -> None:
        if self.world_size > 1:
            self.algorithm.end_training([p for p in model.parameters() if p.requires_grad])

    def teardown(self) -> None:
        stopping = getattr(getattr(self, "algorithm", None), "stopping", None)
        if stopping is not None:  # a run that failed left the averaging thread running: it may go
            stopping.set()
        super().teardown()

    def comm_stats(self) -> dict:
        stats = {
            "bytes_per_step": self.algorithm.sent / max(self.algorithm.steps, 1),
            "algorithm": f"bagua/{self.options.algorithm}",
        }
        if self.options.algorithm in ("qadam", "async"):  # synchronous full-precision steps come first
            stats["warmup_steps"] = self.options.warmup_steps
        return stats
