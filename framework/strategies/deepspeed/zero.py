"""DeepSpeed (``strategy=deepspeed``): the real library's ZeRO stages 1-3 and CPU offload, as one
more strategy of the same loop.

The model and the user's torch optimizer go through ``deepspeed.initialize`` with the merged
config (deepspeed_config.py); a micro-batch's backward is the engine's ``backward``, the
optimizer step its ``step`` (clipping inside it, from ``gradient_clipping``), with DeepSpeed's
unmanaged accumulation: the framework's loop decides where a window ends, as for every strategy.
The scheduler and the LR monitor work on the user's optimizer, whose param groups ZeRO steps.
Checkpoints are this framework's own (deepspeed_state.py), so they move between strategies.
"""

from __future__ import annotations

import contextlib
import io
import os
from typing import Callable

import torch
from torch import nn

from framework.config.experiment import Experiment
from framework.config.topology import Topology
from framework.strategies.base import Strategy
from framework.strategies.deepspeed.config import DeepSpeedOptions, deepspeed_config
from framework.strategies.deepspeed.library import INSTALL, deepspeed_missing, forget_process_groups, quiet_import
from framework.strategies.deepspeed.memory import gradient_bytes, model_state_bytes
from framework.strategies.deepspeed.state import (
    gathered,
    load_model_state,
    load_optimizer_state,
    model_state,
    optimizer_state,
)


class DeepSpeedStrategy(Strategy):
    """One process per device; ZeRO shards optimizer state (1), gradients (2) and parameters (3)."""

    name = "deepspeed"
    runs_adapters = holds_nf4 = False  # (its engine holds the parameters and their state its own way)
    schema = DeepSpeedOptions
    needs_process_group = True
    process_per_device = True

    def __init__(self, options: DeepSpeedOptions, *args, **kwargs):
        super().__init__(options, *args, **kwargs)
        self.stage = int(options.stage or 2)  # the merged config's (job_options)
        self.lockstep_forward = self.stage == 3  # stage 3 gathers each layer's parameters in forward
        self._group_names: list[list[str]] = []
        self._gradient_bytes: int | None = None
        self._added_environment: list[str] = []
        self._wrapped = None  # the DeepSpeed engine of setup

    # ---- before any process starts ----
    @classmethod
    def config_problems(cls, options: DeepSpeedOptions, topology: Topology, run: Experiment) -> list[str]:
        missing = deepspeed_missing()
        if missing:
            return [f"strategy=deepspeed: the deepspeed package is not installed here ({missing}); {INSTALL}"]
        return deepspeed_config(options, run, topology)[1]

    @classmethod
    def job_options(cls, options: DeepSpeedOptions, topology: Topology, run: Experiment) -> DeepSpeedOptions:
        """The ranks get the merged config (and the stage it holds), not the path to the user's file."""
        from dataclasses import replace

        merged, _ = deepspeed_config(options, run, topology)
        return replace(options, config=merged, stage=merged["zero_optimization"]["stage"])

    @classmethod
    def predict_model_state_bytes(
        cls, params: int, optimizer_bytes: int, topology: Topology, model=None, options=None
    ) -> float:
        """The ZeRO paper's accounting in fp32, with DeepSpeed's fp32 master copy of each partition
        (it keeps one beside the model's parameters even when they are fp32): stage 1 shards the
        optimizer state and the master copy, 2 the gradients too, 3 the parameters too (offloaded
        optimizer state and master copy are on the host, not counted)."""
        n, stage = topology.data_parallel_size, int(getattr(options, "stage", None) or 2)
        offloaded = bool(getattr(options, "offload_optimizer", False))
        optimizer = 0 if offloaded else (4 + optimizer_bytes) * params / n
        grads = 4 * params / n if stage >= 2 else 4 * params
        weights = 4 * params / n if stage == 3 else 4 * params
        return weights + grads + optimizer

    # ---- runtime ----
    def setup_environment(self) -> None:
        """DeepSpeed's accelerator: this rank's device, not its guess (it warns when it guesses); and
        the variables it reads, which one process started without a launcher lacks; until teardown
        (in this process they would read as a launcher's to the next run of a sweep)."""
        wanted = {
            "DS_ACCELERATOR": "cuda" if self.device.type == "cuda" else "cpu",
            "LOCAL_RANK": str(self.env.local_rank),
            "RANK": str(self.env.rank),
            "WORLD_SIZE": str(self.env.world_size),
        }
        self._added_environment = [name for name in wanted if name not in os.environ]
        os.environ.update({name: wanted[name] for name in self._added_environment})
        super().setup_environment()

    def setup(self, model: nn.Module, optimizer_factory: Callable | None, ready=None) -> tuple[nn.Module, object]:
        """Without an optimizer (evaluate, predict) the model runs whole on each rank; with one,
        it is made ready (``ready``: activation checkpointing, compile), then model and optimizer
        become DeepSpeed's engine and ZeRO optimizer."""
        model = model.to(self.device)
        if ready is not None:
            ready(model)
        if optimizer_factory is None:
            return model, None
        optimizer = self.build_optimizer(model, optimizer_factory)
        names = {id(p): n for n, p in model.named_parameters()}
        self._group_names = [[names[id(p)] for p in group["params"]] for group in optimizer.param_groups]
        # (stdout: "... deepspeed_shm_comm_op built successfully", its CPU all-reduce op)
        with contextlib.redirect_stdout(io.StringIO()):
            engine, _, _, _ = quiet_import().initialize(
                model=model, optimizer=optimizer, config=dict(self.options.config), dist_init_required=False
            )
        self._wrapped = engine
        # The user's optimizer, its param groups ZeRO's (a scheduler and the LR monitor act on it).
        return engine, optimizer

    def _engine(self, model):
        """``model`` when it is the engine ``setup`` made (a model set up without an optimizer is plain)."""
        return model if model is not None and model is self._wrapped else None

    def backward(self, model: nn.Module, loss: torch.Tensor, precision) -> None:
        model.backward(loss, scale_wrt_gas=False)  # the loop scaled it by the window already

    def optimizer_step(self, model: nn.Module, optimizer, precision, clip_val, clip_algorithm) -> None:
        if self._gradient_bytes is None:  # once, while this rank's gradients exist (the step frees them)
            self._gradient_bytes = gradient_bytes(model)
        model.step()  # reduces (stages 0-1) or finalises (2-3) the window's gradients, clips, steps

    def zero_grad(self, optimizer) -> None:
        """The engine's step cleared the gradients; ZeRO's partition buffers stay as it keeps them."""

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model.module if self._engine(model) is not None else model

    def whole_parameters(self, model: nn.Module):
        return gathered(self.unwrap(model), self.stage if self._engine(model) is not None else 0, modifier_rank=0)

    def full_state_dict(self, model: nn.Module) -> dict:
        if self._engine(model) is None:
            return super().full_state_dict(model)
        return model_state(model.module, self.stage)

    def model_state_bytes(self, model: nn.Module, optimizer) -> dict | None:
        if self._engine(model) is None or optimizer is None:
            return None
        return model_state_bytes(model, optimizer, self._gradient_bytes or 0)

    def teardown(self) -> None:
        forget_process_groups()
        for name in self._added_environment:
            os.environ.pop(name, None)
        super().teardown()

    def checkpoint_state(self, model: nn.Module, optimizer) -> tuple[dict, object]:
        if self._engine(model) is None:
            return super().checkpoint_state(model, optimizer)
        state = {"model": model_state(model.module, self.stage)}
        if optimizer is not None:
            state["optim"] = optimizer_state(model, optimizer, self._group_names)
        return state, None

    def load_checkpoint_state(self, model: nn.Module, optimizer, state: dict, extra) -> None:
        if self._engine(model) is None:
            return super().load_checkpoint_state(model, optimizer, state, extra)
        load_model_state(model.module, self.stage, state["model"])
        if optimizer is not None:
            load_optimizer_state(model, optimizer, self._group_names, state["optim"])
