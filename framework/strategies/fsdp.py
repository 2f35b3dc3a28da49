"""FSDP2 (``torch.distributed.fsdp.fully_shard``): parameters, gradients and optimizer state sharded.

``sharding: full`` is ZeRO-3 (parameters resharded after forward and re-gathered for
backward); ``grad_op`` is ZeRO-2 (parameters stay gathered between forward and backward).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Literal, Optional

import torch
from torch import nn

from framework.config.schemas import StrategyConfig
from framework.config.topology import Topology

_DTYPES = {None: None, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class FSDPConfig(StrategyConfig):
    name: str = "fsdp"
    sharding: Literal["full", "grad_op"] = "full"  # full: ZeRO-3 (reshard after forward); grad_op: ZeRO-2
    # Each submodule whose class name is listed becomes its own FSDP unit (gathered and
    # freed on its own); the root is always wrapped. [] = one unit for the whole model.
    wrap_classes: list = field(default_factory=list)
    # Mixed-precision policy: dtype of the gathered parameters and of gradient reduction.
    param_dtype: Optional[Literal["fp32", "bf16", "fp16"]] = None
    reduce_dtype: Optional[Literal["fp32", "bf16", "fp16"]] = None  # null: the parameters' dtype
    cpu_offload: bool = False  # parameters, gradients and optimizer state kept on the CPU


def apply_fsdp(model: nn.Module, mesh, options: FSDPConfig, ignored: set | None = None) -> nn.Module:
    """Shard ``model`` in place over ``mesh`` (1-D: FSDP; 2-D (replicate, shard): HSDP), but for the
    ``ignored`` parameters (another parallelism's, already split).

    Order: the listed submodules first (innermost units), then the root, so each unit's
    parameters are gathered only while that unit runs.
    """
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    reshard = options.sharding == "full"
    param_dtype, reduce_dtype = _DTYPES[options.param_dtype], _DTYPES[options.reduce_dtype]
    kwargs = {
        "mesh": mesh,
        "mp_policy": MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype),
        "offload_policy": CPUOffloadPolicy() if options.cpu_offload else OffloadPolicy(),
        "ignored_params": ignored or None,
    }
    if param_dtype not in (None, torch.float32):
        # BatchNorm stays fp32 (as FSDP1 kept it): batch_norm will not mix low-precision
        # weights with its fp32 running statistics. Its input is cast up, its output back.
        norm_policy = MixedPrecisionPolicy(
            param_dtype=torch.float32, reduce_dtype=reduce_dtype, output_dtype=param_dtype
        )
        for module in list(model.modules())[1:]:
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                fully_shard(module, reshard_after_forward=reshard, **{**kwargs, "mp_policy": norm_policy})
    # (none named: the classes the model declares unsplittable, a Hugging Face model's _no_split_modules)
    wrap = set(options.wrap_classes or getattr(model, "fsdp_wrap_classes", None) or [])
    for module in list(model.modules())[1:]:
        if type(module).__name__ in wrap:
            fully_shard(module, reshard_after_forward=reshard, **kwargs)
    fully_shard(model, reshard_after_forward=reshard, **kwargs)
    return model


class FSDPSharding:
    """FSDP2 over the mesh that ``mesh()`` builds, one process per device: a mixin beside ``Strategy``
    (not a base of it) for strategy=parallel (and its presets fsdp, hsdp, fsdp_tp) and a strategy
    of the user's own."""

    needs_process_group = True
    process_per_device = True
    lockstep_forward = True
    # a model that initialises itself (init_weights) is built on the meta device and materialised shard
    # by shard: no rank ever holds it whole (a pretrained one reads only its shards of the saved tensors)
    builds_on_meta = True

    @classmethod
    def check(cls, options: FSDPConfig, topology: Topology, accelerator: str) -> list[str]:
        problems = []
        if options.cpu_offload and accelerator != "cuda":
            problems.append(
                f"strategy.cpu_offload: offloads CUDA parameters to the CPU; it needs "
                f"trainer.accelerator=cuda (here: {accelerator})"
            )
        if accelerator == "mps":
            problems.append(f"strategy={options.name}: FSDP needs cuda or cpu (gloo), not mps")
        return problems

    @classmethod
    def predict_model_state_bytes(
        cls, params: int, optimizer_bytes: int, topology: Topology, model=None, options=None
    ) -> float:
        return (8 + optimizer_bytes) * params / topology.dp_shard

    def parallelize(self, model: nn.Module) -> nn.Module:
        # The optimizer is then built over the sharded (DTensor) parameters: each rank keeps
        # optimizer state for its shard only.
        return apply_fsdp(model, self.mesh("dp_shard")[self.topology.dp_dims], self.options)

    @contextlib.contextmanager
    def no_sync(self, model: nn.Module):
        # FSDP2's equivalent of DDP.no_sync: keep unsharded gradients, skip reduce-scatter.
        sync = getattr(model, "set_requires_gradient_sync", None)
        if sync is None:  # not sharded (no data-parallel rank to sync with): gradients accumulate as they are
            yield
            return
        sync(False)
        try:
            yield
        finally:
            sync(True)
