"""A DeepSpeed engine's state in this framework's checkpoint layout: the model's weights and the
optimizer's state keyed by the model's own parameter names, whole (as one device holds them).

ZeRO keeps each rank's partition of flat fp32 tensors; DeepSpeed's tensor-fragment API
(``safe_get_full_*`` / ``safe_set_full_*``, collectives over the data-parallel group) gathers a
parameter's value or optimizer state from them and scatters it back. So a deepspeed checkpoint
is an ordinary DCP checkpoint that resumes under any strategy and world size, and any
checkpoint resumes under deepspeed; nobody runs ``zero_to_fp32``.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn


def gathered(module: nn.Module, stage: int, modifier_rank=None):
    """Stage 3's partitioned parameters whole on every rank within the block (written back from
    ``modifier_rank`` on exit); stages 1 and 2 hold them whole already."""
    if stage != 3:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=modifier_rank)


def model_state(module: nn.Module, stage: int) -> dict:
    """The model's state_dict, whole, as CPU tensors (collective under stage 3)."""
    with gathered(module, stage):
        return {name: value.detach().cpu().clone() for name, value in module.state_dict().items()}


def load_model_state(module: nn.Module, stage: int, state: dict) -> None:
    """Copy ``state`` into the model's parameters and buffers and into ZeRO's fp32 master partitions."""
    from deepspeed.utils import safe_set_full_fp32_param

    with torch.no_grad(), gathered(module, stage, modifier_rank=0):
        for name, value in module.state_dict(keep_vars=True).items():
            value.data.copy_(state[name].to(value.device, value.dtype))
    for name, param in module.named_parameters():
        if param.requires_grad:
            safe_set_full_fp32_param(param, state[name].to(torch.float32))


def flat_partitions(engine) -> list[tuple[torch.Tensor, int]]:
    """(each flat fp32 partition the user's optimizer steps on this rank, its param group): stage 3
    hands them to the optimizer one sub-group at a time, its groups empty in between."""
    zero = engine.optimizer
    if hasattr(zero, "fp32_partitioned_groups_flat"):
        return [(flat, zero.sub_group_to_group_id[i]) for i, flat in enumerate(zero.fp32_partitioned_groups_flat)]
    return [(p, i) for i, group in enumerate(zero.optimizer.param_groups) for p in group["params"]]


def ensure_optimizer_state(engine, optimizer: torch.optim.Optimizer) -> None:
    """Create the state of the optimizer over ZeRO's flat partitions (lazy in torch's optimizers):
    one step with zero gradients and learning rate 0, the partitions' gradient buffers kept
    (offload reuses them). A checkpoint then has every entry to save or load into."""
    flats = flat_partitions(engine)
    if optimizer.state or not flats:
        return
    grads, params = [p.grad for p, _ in flats], [group["params"] for group in optimizer.param_groups]
    lrs = [group["lr"] for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"], group["params"] = 0.0, []
    for p, i in flats:
        p.grad = torch.zeros_like(p) if p.grad is None else p.grad.zero_()
        optimizer.param_groups[i]["params"].append(p)
    optimizer.step()
    for group, lr, own in zip(optimizer.param_groups, lrs, params):
        group["lr"], group["params"] = lr, own
    for (p, _), grad in zip(flats, grads):
        p.grad = grad


def _linked(engine) -> None:
    """ZeRO 1/2 link each parameter's fragment to the optimizer state after their first step, but
    once, while only the first param group has state (DeepSpeed 0.19 with several groups):
    link again now that every group has it."""
    zero = engine.optimizer
    if hasattr(zero, "_lazy_init_hp_params_optimizer_state"):
        zero._hp_optimizer_states_linked = False
        zero._lazy_init_hp_params_optimizer_state()


def _state_keys(optimizer: torch.optim.Optimizer) -> dict:
    """{state key: a per-partition value (a scalar such as Adam's step) or None (a per-element tensor)}."""
    flat, state = next(iter(optimizer.state.items()))
    return {
        key: (None if isinstance(value, torch.Tensor) and value.shape == flat.shape else value)
        for key, value in state.items()
    }


def optimizer_state(engine, optimizer: torch.optim.Optimizer, group_names: list[list[str]]) -> dict:
    """torch's ``get_optimizer_state_dict`` layout: {"state": {name: {key: whole tensor}},
    "param_groups": [{..., "params": [names]}]} (collective)."""
    from deepspeed.utils import safe_get_full_optimizer_state

    ensure_optimizer_state(engine, optimizer)
    _linked(engine)
    params, keys = dict(engine.module.named_parameters()), _state_keys(optimizer)
    state = {}
    for name in (n for names in group_names for n in names):
        state[name] = {
            key: (
                safe_get_full_optimizer_state(params[name], key).detach().cpu().clone()
                if scalar is None
                else _copy(scalar)
            )
            for key, scalar in keys.items()
        }
    groups = [
        {**{k: v for k, v in group.items() if k != "params"}, "params": names}
        for group, names in zip(optimizer.param_groups, group_names)
    ]
    return {"state": state, "param_groups": groups}


def load_optimizer_state(engine, optimizer: torch.optim.Optimizer, group_names: list[list[str]], saved: dict) -> None:
    """Scatter a whole optimizer state (any strategy's, by parameter name) into ZeRO's partitions."""
    from deepspeed.utils import safe_set_full_optimizer_state

    ensure_optimizer_state(engine, optimizer)
    _linked(engine)
    params, keys = dict(engine.module.named_parameters()), _state_keys(optimizer)
    first = next(iter(saved["state"].values()))
    for flat_state in optimizer.state.values():  # per-partition scalars: the same for every parameter
        for key, scalar in keys.items():
            if scalar is not None:
                flat_state[key] = _copy(first[key], like=scalar)
    for name in (n for names in group_names for n in names):
        for key, scalar in keys.items():
            if scalar is None:
                safe_set_full_optimizer_state(params[name], saved["state"][name][key].to(torch.float32), key)
    for group, saved_group in zip(optimizer.param_groups, saved["param_groups"]):
        group.update({k: v for k, v in saved_group.items() if k != "params"})


def _copy(value, like=None):
    if isinstance(value, torch.Tensor):
        out = value.detach().clone()
        return out.to(like.device, like.dtype) if isinstance(like, torch.Tensor) else out.cpu()
    return value
