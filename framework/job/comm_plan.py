"""framework-plan's communication: the bytes one rank sends per optimizer step, by degree, estimated
before anything trains from the ring algorithms' counts (``strategies/comm/bytes.py``) and the
sizes one forward of the meta model passes between ranks (fp32, one micro-batch per step, backward
the mirror of forward):

- dp: the gradients' all-reduce (ddp, zero, deepspeed 1-2, pp x ddp), or FSDP's two all-gathers
  of the parameters and reduce-scatter of the gradients (``sharding: grad_op``: one all-gather),
  plus HSDP's all-reduce of the shards across ``dp_replicate``;
- tp: the activations of each row-wise layer's output (reduce-scatter, then the next layer's
  all-gather) and of a column-wise layer that hands on whole outputs (the head's logits);
- cp: attention's keys and values, all-gathered forward, their gradients all-reduced backward;
- ep: the tokens routed to the experts, two all-to-alls forward and two backward;
- pp: the hidden states at a stage's boundary forward, their gradients backward.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

from framework.config.topology import Topology
from framework.engine.compiling import model_blocks
from framework.models.moe import GroupedExperts
from framework.strategies.comm.bytes import allgather_bytes, allreduce_bytes, alltoall_bytes


def _nbytes(t) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


class _Attention(TorchFunctionMode):
    """Counts the bytes of the keys and values of every attention call."""

    def __init__(self):
        super().__init__()
        self.kv = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            self.kv += _nbytes(args[1] if len(args) > 1 else kwargs.get("key"))
            self.kv += _nbytes(args[2] if len(args) > 2 else kwargs.get("value"))
        return func(*args, **kwargs)


def _tensor_parallel_outputs(model: nn.Module) -> dict[str, int]:
    """The plan's modules whose outputs cross a tensor-parallel group: {name: times per forward}."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    try:
        plan = model.parallelize_plan(sequence_parallel=True) if hasattr(model, "parallelize_plan") else {}
    except ValueError:  # a model with no plan for this configuration
        return {}
    counted = {}
    for name, style in plan.items():
        # (a mixture of experts' style: its tokens gathered, its partial outputs reduce-scattered)
        if isinstance(style, RowwiseParallel) or callable(getattr(style, "split_parameters", None)):
            counted[name] = 2  # reduce(-scatter) of its output, the all-gather into the next layer
        elif isinstance(style, ColwiseParallel) and isinstance(style.output_layouts[0], Replicate):
            counted[name] = 1  # its split output all-gathered
    return counted


def traffic(model: nn.Module, inputs: torch.Tensor) -> dict[str, int]:
    """One training forward of the meta ``model`` on ``inputs`` (one data-parallel rank's batch):
    the bytes of attention's keys and values, of the tensor-parallel plan's crossing outputs, of
    the tokens entering the experts, and of one block's output (a pipeline stage's boundary)."""
    sizes = {"kv": 0, "tp": 0, "experts": 0, "boundary": 0}
    hooks = []

    def adder(key: str, times: int = 1, of_input: bool = False):
        def hook(module, args, output=None):
            sizes[key] += times * _nbytes(args[0] if of_input else output)

        return hook

    for name, times in _tensor_parallel_outputs(model).items():
        hooks.append(model.get_submodule(name).register_forward_hook(adder("tp", times)))
    for module in model.modules():
        if isinstance(module, GroupedExperts):
            hooks.append(module.register_forward_pre_hook(adder("experts", of_input=True)))
    blocks = model_blocks(model)
    if blocks:
        hooks.append(blocks[0][1].register_forward_hook(adder("boundary")))
    attention = _Attention()
    model.train()
    try:
        with attention, torch.no_grad():
            model(inputs)
    finally:
        for h in hooks:
            h.remove()
    return {**sizes, "kv": attention.kv}


def _data_parallel_bytes(options, topology: Topology, param_bytes: float) -> float:
    """The gradient synchronisation of one rank's ``param_bytes`` (its tensor/pipeline part)."""
    dp = topology.data_parallel_size * topology.cp
    sharded = getattr(options, "sharding", None) and getattr(options, "data_parallel", "fsdp") == "fsdp"
    if getattr(options, "stage", None) == 3:
        sharded = True
    if not sharded:
        return allreduce_bytes(param_bytes, dp)
    # FSDP's ranks (with experts split: an ep group's); HSDP all-reduces each shard across the replicas
    n = topology.ep if topology.ep > 1 else dp // topology.dp_replicate
    gathers = 2 if getattr(options, "sharding", "full") == "full" else 1
    sharding = (gathers + 1) * allgather_bytes(param_bytes / n, n)
    return sharding + allreduce_bytes(param_bytes / n, dp // n)


def comm_bytes(options, topology: Topology, params: int, sizes: dict) -> dict[str, float]:
    """Bytes one rank sends per step for each degree above 1 of ``topology`` (``sizes``: ``traffic``
    of a data-parallel rank's batch; ``params``: the model's whole count)."""
    tp, cp, ep, pp = topology.tp, topology.cp, topology.ep, topology.pp
    figures = {
        "dp": _data_parallel_bytes(options, topology, 4 * params / (tp * pp)),
        # a rank's stage holds 1/pp of the layers; forward and backward, a ring's (N-1)/N each
        "tp": 2 * alltoall_bytes(sizes["tp"] / (cp * pp), tp),
        "cp": allgather_bytes(sizes["kv"] / (cp * tp), cp) + allreduce_bytes(sizes["kv"] / tp, cp),
        "ep": 4 * alltoall_bytes(sizes["experts"] / cp, ep),
        "pp": 2.0 * sizes["boundary"] if pp > 1 else 0.0,
    }
    return {k: v for k, v in figures.items() if v}
