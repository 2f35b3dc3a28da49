"""``strategy=horovod strategy.backend=horovod``: the real horovod.torch, launched with ``horovodrun``
(``horovod/library.py`` wraps its calls): its broadcast of the parameters, its
``DistributedOptimizer`` (which counts the accumulation window's backward passes itself), its
shutdown. The model is not wrapped: its parameter names and checkpoints are single device's."""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from framework.config.environment import RankEnv, detect_environment
from framework.config.topology import Topology
from framework.strategies.comm.bytes import gradient_allreduce_bytes
from framework.strategies.horovod import library
from framework.strategies.horovod.config import HorovodConfig, HorovodFamily


class HorovodLibraryStrategy(HorovodFamily):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._model: nn.Module | None = None

    @classmethod
    def check(cls, options: HorovodConfig, topology: Topology, accelerator: str) -> list[str]:
        return super().check(options, topology, accelerator) + cls._library_problems(
            detect_environment(), topology.world_size, options.op
        )

    @classmethod
    def _library_problems(cls, env: RankEnv | None, world_size: int, op: str) -> list[str]:
        """Why ``strategy.backend=horovod`` cannot run here: horovod.torch not importable, Adasum
        without MPI, or several ranks not started by horovodrun."""
        try:
            import horovod.torch as hvd  # the compiled extension loads here
        except ImportError as err:
            return [
                f"strategy.backend=horovod: horovod.torch is not importable in this Python ({err}); "
                f"{library.BUILD_HINT}"
            ]
        problems = []
        if op == "adasum" and not hvd.mpi_built():
            problems.append(
                "strategy.op=adasum: Horovod runs Adasum only over MPI, and this horovod was built without "
                "it (HOROVOD_WITH_MPI=1); use strategy.backend=native for Adasum on gloo"
            )
        if world_size > 1 and (env is None or env.launcher != "horovodrun"):
            problems.append(
                f"strategy.backend=horovod: {world_size} ranks must be started by horovodrun: "
                f"horovodrun --gloo -np {world_size} python -m framework.train strategy=horovod "
                f"strategy.backend=horovod trainer.devices={world_size} ..."
            )
        return problems

    def setup_environment(self) -> None:
        library.init_horovod(self.env)  # then the torch.distributed group, from its rendezvous
        super().setup_environment()

    def teardown(self) -> None:
        super().teardown()
        library.shutdown()

    def parallelize(self, model: nn.Module) -> nn.Module:
        self._model = model
        library.broadcast_parameters(model)
        return model

    def build_optimizer(self, model: nn.Module, optimizer_factory) -> torch.optim.Optimizer:
        optimizer = super().build_optimizer(model, optimizer_factory)
        return library.distributed_optimizer(
            optimizer, model, self.options.op, self.options.compression, self.accumulate_grad_batches
        )

    def no_sync(self, model: nn.Module):
        return contextlib.nullcontext()  # horovod.torch counts the backward passes (backward_passes_per_step)

    def optimizer_step(self, model: nn.Module, optimizer, precision, clip_val, clip_algorithm) -> None:
        # as Horovod documents for clipping: synchronize, clip, then step without syncing again
        optimizer.synchronize()
        self.steps += 1
        with optimizer.skip_synchronize():
            return super().optimizer_step(model, optimizer, precision, clip_val, clip_algorithm)

    def comm_stats(self) -> dict:
        element = 2 if self.options.compression == "fp16" else None
        sent = gradient_allreduce_bytes(self._model, self.world_size, element) if self._model is not None else 0
        return {"bytes_per_step": sent, "algorithm": f"horovod.torch/{self.options.op}"}
