"""Where a model splits into pipeline stages, and the stage a rank keeps.

A splittable model (the built-in GPT; a user's model that follows the same contract) has its
blocks in ``layers``, an ``nn.ModuleDict`` (a ModuleList would renumber the blocks a stage keeps,
and the checkpoint names with them), declares ``pipeline_splittable = True``, and its forward
runs whatever is left when the modules of other stages are removed (set to None, or deleted
from ``layers``), from its input or from the hidden states of the stage before. The units of a
split are the model's top-level children in order, ``layers`` expanded into ``layers.<name>``.
"""

from __future__ import annotations

import copy

from torch import nn

SPLITTABLE = (
    "a model that splits into pipeline stages has its blocks in `layers`, an nn.ModuleDict, "
    "declares pipeline_splittable = True, and its forward skips the modules set to None (see "
    "framework/models/gpt.py)"
)


def units(model: nn.Module) -> list[str]:
    """The model's top-level children in order, ``layers`` expanded into its blocks."""
    names = []
    for name, child in model.named_children():
        names += [f"layers.{key}" for key in child.keys()] if name == "layers" else [name]
    return names


def stage_units(model: nn.Module, stages: int, split_points: list[str]) -> list[list[str]]:
    """Each stage's units: cut before each of ``split_points``, or (none given) equal numbers of
    blocks per stage, what comes before the blocks (the embedding) with the first stage and what
    comes after (norm, head) with the last. Raises ValueError naming the key."""
    order = units(model)
    if split_points:
        unknown = [p for p in split_points if p not in order]
        if unknown:
            raise ValueError(
                f"strategy.split_points: {unknown} name no module of the model's sequence "
                f"(valid: {', '.join(order[1:])})"
            )
        cuts = [order.index(p) for p in split_points]
        if len(cuts) != stages - 1 or cuts != sorted(set(cuts)) or cuts[0] == 0:
            raise ValueError(
                f"strategy.split_points: {list(split_points)}: {stages} stages begin at {stages - 1} "
                "module(s) (each stage after the first at one), given in the model's order and not its "
                f"first module (valid: {', '.join(order[1:])})"
            )
    else:
        blocks = [i for i, name in enumerate(order) if name.startswith("layers.")]
        if len(blocks) % stages or not blocks:
            raise ValueError(
                f"strategy.pp: {stages} stages (strategy.pp x strategy.stages_per_rank) do not divide the "
                f"model's {len(blocks)} blocks (layers) equally; choose a divisor, or set strategy.split_points"
            )
        per = len(blocks) // stages
        cuts = [blocks[i * per] for i in range(1, stages)]
    bounds = [0, *cuts, len(order)]
    return [order[bounds[i] : bounds[i + 1]] for i in range(stages)]


def keep_stage(model: nn.Module, keep: list[str]) -> nn.Module:
    """``model`` with every unit outside ``keep`` removed, in place; names unchanged."""
    for name in units(model):
        if name in keep:
            continue
        if name.startswith("layers."):
            del model.layers[name.split(".", 1)[1]]
        else:
            setattr(model, name, None)
    model.pipeline_stage_units = list(keep)
    return model


def stage_view(model: nn.Module, keep: list[str]) -> nn.Module:
    """One of the stages a rank runs interleaved: a shallow copy of its ``model`` (every stage of
    the rank) with only ``keep``, sharing the same submodules and parameters, so the optimizer and
    the checkpoint see one model under its own names while each stage runs its own forward."""
    view = copy.copy(model)
    view._modules = dict(model._modules)
    for name in list(view._modules):
        if name == "layers":
            view._modules[name] = nn.ModuleDict(
                {key: block for key, block in model.layers.items() if f"layers.{key}" in keep}
            )
        elif name not in keep:
            view._modules[name] = None
    return view
