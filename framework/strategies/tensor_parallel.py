"""Tensor parallelism (``strategy=parallel strategy.tp``, and its presets tp and fsdp_tp), through DTensor's
``parallelize_module``: each linear layer's weight is split across the ranks of a tensor-parallel
group (column-wise or row-wise), with sequence parallelism between them.

The plan is declared, not written per run: the model's own ``parallelize_plan(sequence_parallel)``
(the built-in GPT ships torchtitan's), or ``strategy.plan``, a mapping of module-name patterns
(``fnmatch``) to ``colwise``, ``rowwise`` or ``sequence``. Order (torchtitan's): tensor parallel
first, then FSDP over the data-parallel part of the mesh. A model built on the meta device (as
strategy=parallel builds it) is materialised on each rank after both, by its
``init_weights``, so a model larger than one rank's memory can be set up.
"""

from __future__ import annotations

import fnmatch

import torch
from torch import nn

from framework.config.topology import Topology

STYLES = ("colwise", "rowwise", "sequence")


def plan_of(model: nn.Module, options) -> dict:
    """The ParallelStyle of each module name: the config's patterns, else the model's own plan."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

    if options.plan is None:
        return model.parallelize_plan(sequence_parallel=options.sequence_parallel)
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel, "sequence": SequenceParallel}
    names = [name for name, _ in model.named_modules() if name]
    return {
        name: styles[style]()
        for pattern, style in options.plan.items()
        for name in names
        if fnmatch.fnmatchcase(name, pattern)
    }


def apply_tp(model: nn.Module, tp_mesh, options) -> nn.Module:
    """Split ``model``'s layers across ``tp_mesh`` by its plan (in place); the parameters it leaves
    whole replicated on the same mesh."""
    from torch.distributed.tensor.parallel import parallelize_module

    from framework.models.lora import split_adapters

    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    parallelize_module(model, tp_mesh, plan_of(model, options))
    for name, p in model.named_parameters():  # (torch's SequenceParallel makes the norms it replicates trainable)
        p.requires_grad_(name not in frozen)
    split_adapters(model)  # (adapters split with the linears they adapt)
    replicate_the_rest(model, tp_mesh)
    return model


def replicate_the_rest(model: nn.Module, tp_mesh) -> None:
    """Each module whose own parameters the plan left plain tensors (the norms without sequence
    parallelism): those parameters become replicated DTensors of ``tp_mesh``, its inputs and outputs
    converted at its boundary. The optimizer's and the clipping's foreach ops then see one mesh (the
    tensor-parallel weights', or with FSDP the 2-D one), never plain tensors beside DTensors."""
    from torch.distributed.tensor import DTensor, Replicate, distribute_tensor

    for module in model.modules():
        own = list(module.named_parameters(recurse=False))
        if not own or any(isinstance(p, DTensor) for _, p in own):
            continue
        for name, param in own:
            whole = distribute_tensor(param.data, tp_mesh, [Replicate()], src_data_rank=None)
            module.register_parameter(name, nn.Parameter(whole, requires_grad=param.requires_grad))
        module.register_forward_pre_hook(lambda _, args, mesh=tp_mesh: _replicated(args, mesh))
        module.register_forward_hook(lambda _, args, out: out.to_local() if isinstance(out, DTensor) else out)


def _replicated(args: tuple, mesh) -> tuple:
    from torch.distributed.tensor import DTensor, Replicate

    return tuple(
        DTensor.from_local(a, mesh, [Replicate()]) if isinstance(a, torch.Tensor) and not isinstance(a, DTensor) else a
        for a in args
    )


def split_parameters(model: nn.Module, options) -> int:
    """How many of the model's parameters its plan splits across a tensor-parallel group."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = plan_of(model, options)
    # an adapter's factor that stays whole beside its split linear (models/lora.py split_adapters)
    whole = {True: ("lora_a",), False: ("lora_b", "lora_magnitude")}
    whole_modules = sum(
        p.numel()
        for name, style in plan.items()
        if isinstance(style, (ColwiseParallel, RowwiseParallel))
        for leaf, p in model.get_submodule(name).named_parameters(recurse=False)
        if leaf not in whole[isinstance(style, ColwiseParallel)]
    )
    # a style of the model's own that splits some of a module's parameters says how many
    return whole_modules + sum(
        style.split_parameters(model.get_submodule(name))
        for name, style in plan.items()
        if callable(getattr(style, "split_parameters", None))
    )


def tensor_parallel_state_bytes(
    params: int, optimizer_bytes: int, topology: Topology, model=None, options=None
) -> float:
    """The model state per rank of a tensor-parallel group: the parameters the plan of ``model``
    splits are 1/TP per rank; the rest (norms) whole."""
    split = split_parameters(model, options) if model is not None and options is not None else params
    return (8 + optimizer_bytes) * ((params - split) + split / topology.tp)
