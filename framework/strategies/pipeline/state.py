"""A stage's checkpoint state, in the model's own names: its parameters and their optimizer state
(DCP writes each rank's own), and parameter groups that list every stage's parameters, the same on
every rank, as a whole model's optimizer would. So a pipeline's checkpoint loads into one device,
FSDP or TP, and theirs into a pipeline (each stage keeps its own names of the groups on load)."""

from __future__ import annotations

import torch.distributed as dist
from torch import nn


def stage_checkpoint_state(stage: nn.Module, optimizer, group) -> dict:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    if optimizer is None:
        return {"model": get_model_state_dict(stage)}
    model_state, optim_state = get_state_dict(stage, optimizer)
    groups = optim_state["param_groups"]
    every: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(every, [g["params"] for g in groups], group=group)  # names, between this job's ranks
    for i, g in enumerate(groups):
        g["params"] = [name for stage_groups in every for name in stage_groups[i]]
    return {"model": model_state, "optim": optim_state}


def load_stage_checkpoint_state(stage: nn.Module, optimizer, state: dict) -> None:
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

    if optimizer is None:
        set_model_state_dict(stage, state["model"])
        return
    own = {name for name, _ in stage.named_parameters()}
    optim = state["optim"]
    for g in optim["param_groups"]:
        g["params"] = [name for name in g["params"] if name in own]
    set_state_dict(stage, optimizer, model_state_dict=state["model"], optim_state_dict=optim)
