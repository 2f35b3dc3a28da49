"""The model's size from its config against the memory the run has, before anything is built: a
config of ``hidden_size=10**9`` or ``num_hidden_layers=10**6`` is refused naming its keys (it
started every rank, each trying to allocate 64 GB to 1 TB), and nothing checks it by building it,
not even on the meta device."""

from __future__ import annotations

import os
from typing import Optional

from framework.config.environment import resolve_accelerator
from framework.config.experiment import Experiment
from framework.config.layout import Layout
from framework.config.schemas import TrainerConfig
from framework.config.sizes import parse_bytes
from framework.engine.memory import optimizer_state_bytes
from framework.models.sizes import SIZE_KEYS, gpt_parameters, hf_parameters


def declared_parameters(model: dict) -> tuple[Optional[int], str]:
    """(parameters, the keys that size them) of a built-in GPT or a Hugging Face model's config;
    (None, "") for any other model, or a config that does not load (its own check names it)."""
    target = str(model.get("_target_", ""))
    if target.endswith(".GPT"):
        keys = ", ".join(f"model.{k}={model[k]}" for k in SIZE_KEYS["gpt"] if k in model)
        return gpt_parameters(model), keys
    if not target.endswith((".HFCausalLM", ".HFSequenceClassifier")):
        return None, ""
    from framework.models import hf_files

    try:
        config = hf_files.load_config(model.get("path"), model.get("config"))
    except (ValueError, KeyError, TypeError, OSError):  # a config that does not load: the model's own check names it
        return None, ""
    keys = ", ".join(f"model.config.{k}={getattr(config, k)}" for k in SIZE_KEYS["hf"] if hasattr(config, k))
    return hf_parameters(config), keys


def memory_limit(trainer: TrainerConfig) -> tuple[int | None, str]:
    """The bytes per device to plan against, and where the figure comes from."""
    if trainer.memory_limit is not None:
        return parse_bytes(trainer.memory_limit), "trainer.memory_limit"
    if resolve_accelerator(trainer.accelerator or "auto") == "cuda":
        import torch

        return torch.cuda.get_device_properties(0).total_memory, "the CUDA device's total memory"
    return None, "trainer.memory_limit is not set; on CPU every candidate fits"


def memory_per_rank(trainer: TrainerConfig, processes: int) -> tuple[Optional[int], str]:
    """The bytes one rank may hold, and where the figure comes from: ``trainer.memory_limit``, the CUDA
    device's, or this machine's memory shared by its ``processes``."""
    limit, source = memory_limit(trainer)
    if limit is not None:
        return limit, source
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None, ""
    return total // max(1, processes), f"this machine's {_gib(total)} over {processes} process(es)"


def model_size_problems(
    run: Experiment, layout: Optional[Layout], layers: Optional[dict] = None, packed: Optional[float] = None
) -> list[str]:
    """The model state per rank (weights; training: with gradients and optimizer state, as the strategy
    lays them out) within the memory a rank has. With adapters (``adapter``; ``layers``: the adapted
    linears' (in, out), once known): the base's weights, and the adapters with their gradients and
    optimizer state (``predict_adapted_state_bytes``, framework-plan's accounting). QLoRA's base counts
    in NF4: ``packed``, the bytes it holds fewer than fp32 (``nf4.bytes_saved`` of the model on the meta
    device); before that model is built, every weight at NF4's 0.5 B, a lower bound (so a model too large
    even in 4 bits is refused before it is built on the meta device, and one that fits is not)."""
    params, keys = declared_parameters(run.model.node) if layout is not None else (None, "")
    if params is None:
        return []
    cls, topology = layout.strategy, layout.topology
    adapters = run.adapter.parameters(layers or {}) if run.adapter is not None else None
    if run.adapter is None or not run.adapter.quantize:
        packed = 0
    elif packed is None:
        packed = 3.5 * params  # (4 B a weight, less NF4's 0.5 B)
    state = _state_bytes(run, cls, topology, params, adapters, packed)
    budget, source = memory_per_rank(run.trainer, topology.processes_per_node)
    if budget is None or state <= budget:
        return []
    what = "weights, gradients and optimizer state" if run.train else "weights"
    name = layout.name
    fits = (
        f"{_gib(state)} of {what} per rank under strategy={name} on {topology.world_size} rank(s), more than the "
        f"{_gib(budget)} a rank has ({source})"
    )
    if adapters:
        return [
            f"adapter.r: {run.adapter.r} makes about {adapters:.3g} adapter parameters (r x (in + out) on each of "
            f"its {len(layers)} linear layers) beside the base's {params:.3g} ({keys}): {fits}; choose a smaller "
            "adapter.r, or more ranks of a sharding strategy (fsdp)"
        ]
    return [
        f"model: its config makes about {params:.3g} parameters ({keys}): {fits}; choose a smaller model, or more "
        "ranks of a sharding strategy (fsdp)"
    ]


def _state_bytes(run: Experiment, cls, topology, params: int, adapters: Optional[int], packed: float) -> float:
    """A rank's bytes of model state: every parameter trained (``adapters`` None), else the base frozen
    (4 B a weight, less the ``packed`` bytes QLoRA's NF4 base saves) and the ``adapters`` trained; weights
    alone where the run does not train."""
    optimizer = optimizer_state_bytes(run.optimizer.node) if run.optimizer.node else 8
    if adapters is not None:
        trained = adapters if run.train else 0
        return cls.predict_adapted_state_bytes(params + adapters, trained, optimizer, topology, packed=packed)
    state = cls.predict_model_state_bytes(params, optimizer, topology)
    if run.strategy.get("name") == "auto":  # its plan chooses: the most sharded it could
        state = (8 + optimizer) * params / topology.world_size
    return state if run.train else state * 4 / (8 + optimizer)  # (weights only)


def _gib(count: float) -> str:
    return f"{count / 2**30:,.1f} GiB"
