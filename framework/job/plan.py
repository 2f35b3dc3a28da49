"""The memory plan of an experiment (``framework-plan``): per-rank model-state memory of each strategy
and device count, predicted from the parameter count, dtype and optimizer before anything trains.

Model state = parameters + gradients + optimizer state (the ZeRO paper's accounting, fp32
training: 4 + 4 + K bytes per parameter, K = 8 for Adam/AdamW, 4 for SGD with momentum,
0 for plain SGD). Per rank with N data-parallel ranks:
single/dp/ddp/ddp2: (8 + K)·P;  zero (stage 1): 8·P + K·P/N;  fsdp: (8 + K)·P/N;
hsdp: (8 + K)·P/shard; pp: (8 + K)·(the largest stage's P)/pipelines; deepspeed: its fp32 master copy
of each partition adds 4·P/N: stage 1: 8·P + (4 + K)·P/N, stage 2: 4·P + (8 + K)·P/N, stage 3:
(12 + K)·P/N (offloaded optimizer state and master copy are on the host). With adapters: every
weight (4 B; QLoRA's base linears in NF4, 4 bits a weight and its scales, about 0.52 B) as the layout
splits them, and gradients and optimizer state for the adapters alone. Activations and
communication buffers are not model state.

Activations: the bytes one training forward saves for backward at the per-rank micro-batch
(datamodule.batch_size / N), measured by running the model on meta tensors (no memory, no
compute) with ``trainer.activation_checkpointing`` applied as the run applies it, so the
saving of checkpointing shows (the model's forward only; the task's loss adds little). A
pipeline's first stage holds its share (1/stages) of the activations of the micro-batches in
flight (all of them under GPipe, one per stage under 1F1B); it idles for the bubble fraction
(p - 1) / (m + p - 1) of each step (p stages, m micro-batches).
"""

from __future__ import annotations

from typing import Optional

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig

from framework.engine.activation_checkpointing import CheckpointedClasses, apply_activation_checkpointing
from framework.engine.memory import optimizer_state_bytes
from framework.job.comm_plan import comm_bytes, traffic
from framework.job.experiment import ResolvedExperiment
from framework.models.moe import GroupedExperts
from framework.models.nf4 import bytes_saved
from framework.strategies import is_named, planned, strategy_of
from framework.strategies.pipeline.schedule import bubble_fraction, microbatches_in_flight, microbatches_per_batch

# With a model that has a tensor-parallel plan: tp over every device, fsdp_tp with groups of 2.
TENSOR_PARALLEL = {"tp": {}, "fsdp_tp": {}}
# With a model that declares its position tables and a sequence: each sequence split across 2 ranks.
CONTEXT_PARALLEL = {"parallel/cp": ("parallel", {"cp": 2})}
# With a mixture of experts: its experts split across 2 ranks.
EXPERT_PARALLEL = {"parallel/ep": ("parallel", {"ep": 2})}


def meta_model(run: ResolvedExperiment) -> torch.nn.Module:
    """A model of the run's on the meta device (no memory, no init cost), with its adapters, for the
    plan to change as it measures; ValueError for one this machine could not hold (its Python objects
    alone could exhaust the memory)."""
    if run.size_problems:
        raise ValueError(run.size_problems[0])
    with torch.device("meta"):
        model = instantiate(run.model.node, _convert_="all")
    if run.adapter is not None:  # the adapters on the frozen model, as the ranks build it
        from framework.models.lora import inject_adapters

        inject_adapters(model, run.adapter, 0)
    return model


def meta_inputs(run: ResolvedExperiment, batch: int) -> Optional[torch.Tensor]:
    """A batch of ``batch`` meta inputs: token ids for a language model (datamodule.seq_len), else
    floats of datamodule.input_shape; None when neither is known."""
    shape, seq_len = run.datamodule.get("input_shape"), run.datamodule.get("seq_len")
    if not (shape or seq_len) or batch < 1:
        return None
    if seq_len:
        return torch.zeros(batch, seq_len, dtype=torch.long, device="meta")
    return torch.randn(batch, *shape, device="meta")


def activation_bytes(run: ResolvedExperiment, batch: int, model: Optional[torch.nn.Module] = None) -> Optional[int]:
    """Bytes one forward of the run's model (``model``: its meta model, when built already) saves
    for backward at ``batch`` samples (the parameters themselves not counted), or None when
    ``datamodule.input_shape`` is unknown."""
    inputs = meta_inputs(run, batch)
    if inputs is None:
        return None
    model = meta_model(run) if model is None else model
    model.to("meta")  # buffers a model keeps on the CPU while on meta (the GPT's rotary tables) too
    apply_activation_checkpointing(model, list(run.trainer.activation_checkpointing))
    params = {id(p) for p in model.parameters()}
    saved = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in params and id(t._base) not in params:  # a weight (or its transpose) is no activation
            saved[0] += t.numel() * t.element_size()
        return t

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(inputs)
    return saved[0]


def plan_problems(run: ResolvedExperiment) -> list[str]:
    """What keeps the plan from describing the run: a model that does not build, an
    activation_checkpointing class that is no submodule's."""
    try:
        model = meta_model(run)
    except (InstantiationException, ValueError) as err:  # the plan is a report; say what failed, briefly
        cause = err.__cause__ or err
        return [f"model: {run.model.target} does not build: {type(cause).__name__}: {cause}"]
    return CheckpointedClasses(tuple(run.trainer.activation_checkpointing)).problems(model)


def plan(cfg: DictConfig | ResolvedExperiment, devices=(1, 2, 4, 8)) -> list[dict]:
    """Per-rank model-state and activation bytes of each compared strategy on each device count
    (one node; the global batch split across the data-parallel ranks). Tensor parallelism with
    sequence parallelism splits every activation across its group, context parallelism every
    sequence: estimated as the data-parallel rank's activations / (tp x cp). A layout a device
    count cannot make has None. ``cfg``: a composed config, or its typed run."""
    run = ResolvedExperiment.of(cfg)
    model = meta_model(run)
    params = sum(p.numel() for p in model.parameters())
    k = optimizer_state_bytes(run.optimizer.node)
    layouts = {name: (name, {}) for name in planned()}
    if callable(getattr(model, "parallelize_plan", None)):
        layouts.update({name: (name, extra) for name, extra in TENSOR_PARALLEL.items()})
    if hasattr(model, "context_parallel_buffers") and run.datamodule.get("seq_len"):
        layouts.update(CONTEXT_PARALLEL)
    if any(isinstance(m, GroupedExperts) for m in model.modules()):
        layouts.update(EXPERT_PARALLEL)
    if getattr(model, "pipeline_splittable", False):
        layouts["pp"] = ("pp", _pipeline_options(run))
    layouts.update(_deepspeed_layouts(run))
    layouts.update(_configured_layout(run, layouts))
    settings = getattr(model, "adapter_settings", None)
    activations: dict[int, Optional[int]] = {}
    traffic_by_batch: dict[int, Optional[dict]] = {}
    rows = []
    for label, (name, extra) in layouts.items():
        cls, options = strategy_of({"name": name, **extra})
        if settings is not None and not _runs_adapters(cls, options, settings, devices):
            continue  # (an adapted model: the layouts that run its adapters alone)
        for n in devices:
            row = {
                "strategy": label,
                "devices": n,
                "parameters": params,
                "model_state_bytes_per_rank": None,
                "activation_bytes_per_rank": None,
            }
            rows.append(row)
            try:
                row.update(layout_bytes(run, cls, options, n, model, k, activations, traffic_by_batch))
            except ValueError:  # a layout this device count (or this model) cannot make
                continue
    return rows


def layout_bytes(
    run: ResolvedExperiment,
    cls,
    options,
    devices: int,
    model: torch.nn.Module,
    k: int,
    activations: dict,
    traffic_by_batch: Optional[dict] = None,
) -> dict:
    """One layout's per-rank model-state and activation bytes (and a pipeline's figures) on
    ``devices`` devices of one node; ValueError when the layout cannot be made. ``activations``
    caches the activations per data-parallel size across calls; given ``traffic_by_batch`` (the
    plan's cache of comm_plan.traffic per batch), the bytes each degree sends too (strategy=auto's
    choice needs only the memory)."""
    params = sum(p.numel() for p in model.parameters())
    topology = cls.make_topology(devices, 1, options)
    adapted = getattr(model, "adapter_settings", None) is not None
    trainable = adapter_count(model, cls, options, topology) if adapted else None
    if adapted:  # the whole model's weights (QLoRA's base in NF4); gradients and optimizer state for the adapters
        packed = bytes_saved(model) if model.adapter_settings.quantize else 0
        state = cls.predict_adapted_state_bytes(params, trainable, k, topology, model, options, packed=packed)
    else:
        state = cls.predict_model_state_bytes(params, k, topology, model, options)
    batch = int(run.datamodule.get("batch_size") or 0)
    dp = topology.data_parallel_size
    if dp not in activations:
        activations[dp] = activation_bytes(run, batch // dp, model)
    # tensor (sequence) and context parallelism split each activation across their groups
    acts = activations[dp] if activations[dp] is None else activations[dp] / (topology.tp * topology.cp)
    figures = {"model_state_bytes_per_rank": state, "activation_bytes_per_rank": acts}
    if adapted:  # what trains, and its state, per rank
        figures["trainable_parameters_per_rank"] = trainable
        figures["optimizer_state_bytes_per_rank"] = trainable * k
    sizes = None if traffic_by_batch is None else _traffic(run, model, batch // dp, traffic_by_batch)
    if sizes is not None:
        figures["comm_bytes_per_rank"] = comm_bytes(options, topology, params, sizes)
    if cls.owns_training_step:  # (a pipeline's schedule: its bubble)
        figures.update(_pipeline_figures(options, topology, acts))
    return figures


def _runs_adapters(cls, options, settings, devices) -> bool:
    """Whether the layout runs adapters of ``settings`` on each device count it can make (the class's
    ``adapter_problems``, check_adapter's rule)."""
    for n in devices:
        try:
            topology = cls.make_topology(n, 1, options)
        except ValueError:  # (a layout this device count cannot make: its row says so)
            continue
        if cls.adapter_problems(options, topology, settings):
            return False
    return True


def adapter_count(model: torch.nn.Module, cls, options, topology) -> int:
    """An adapted model's trainable parameters per rank in this layout (framework/models/lora.py)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    from framework.models.lora import trainable_per_rank
    from framework.strategies.fsdp import FSDPSharding
    from framework.strategies.tensor_parallel import plan_of

    splits = {}
    if topology.tp > 1:
        for name, style in plan_of(model, options).items():
            splits[name] = (
                "colwise"
                if isinstance(style, ColwiseParallel)
                else "rowwise"
                if isinstance(style, RowwiseParallel)
                else None
            )
    shard = topology.dp_shard * topology.cp if issubclass(cls, FSDPSharding) else 1
    return trainable_per_rank(model, topology.tp, shard, splits)


def _traffic(run: ResolvedExperiment, model: torch.nn.Module, batch: int, cache: dict) -> Optional[dict]:
    """What a data-parallel rank's forward of ``batch`` samples passes between ranks (comm_plan.py),
    once per batch size (kept in ``cache``)."""
    if batch not in cache:
        inputs = meta_inputs(run, batch)
        cache[batch] = None if inputs is None else traffic(model.to("meta"), inputs)
    return cache[batch]


def _configured_layout(run: ResolvedExperiment, layouts: dict) -> dict:
    """The config's own strategy as a row of its own (``strategy=parallel``'s degrees, a preset, an
    option changed) where no compared row is the same layout."""
    strategy = run.strategy
    name = strategy.get("name")
    if not is_named(str(name)) or strategy.get("_target_"):
        return {}  # auto (its candidates are the compared rows), or a class of the user's own
    extra = {k: v for k, v in strategy.items() if k not in ("name", "timeout_s")}  # (no layout option)
    schema = strategy_of({"name": name})[0].schema
    if any(n == name and schema(name=n, **e) == schema(name=name, **extra) for n, e in layouts.values()):
        return {}
    return {f"{name} (config)": (name, extra)}


def _deepspeed_layouts(run: ResolvedExperiment) -> dict:
    """With strategy=deepspeed: its ZeRO stages 1-3 (``deepspeed_<stage>``), with the config's offload."""
    strategy = run.strategy
    if strategy.get("name") != "deepspeed":
        return {}
    offload = {"offload_optimizer": strategy.get("offload_optimizer")}
    return {f"deepspeed_{stage}": ("deepspeed", {"stage": stage, **offload}) for stage in (1, 2, 3)}


def _pipeline_options(run: ResolvedExperiment) -> dict:
    """A pipeline of one stage per device (stages_per_rank per device, interleaved), with the
    config's schedule, micro-batches and split points when its strategy is pp (else 1F1B with as
    many micro-batches as stages)."""
    strategy = run.strategy
    if strategy.get("name") != "pp":
        return {}
    keys = ("schedule", "microbatches", "split_points", "stages_per_rank")
    return {k: strategy[k] for k in keys if k in strategy}


def _pipeline_figures(options, topology, acts: Optional[float]) -> dict:
    """The first stage's activations (its share of the micro-batches in flight) and the bubble."""
    ranks, micro = topology.pp, microbatches_per_batch(options, topology)
    in_flight = microbatches_in_flight(options.schedule, ranks, micro)
    return {
        "activation_bytes_per_rank": None if acts is None else acts / ranks * in_flight / micro,
        "bubble_fraction": bubble_fraction(ranks, micro, options.stages_per_rank),
        "microbatches": micro,
        "schedule": options.schedule,
    }
