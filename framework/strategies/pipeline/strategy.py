"""Pipeline parallelism (``strategy=pp``) through ``torch.distributed.pipelining``: the model is cut
into ``strategy.stages`` stages, one per rank of a pipeline; a training step is the schedule's
(GPipe or 1F1B over ``strategy.microbatches`` micro-batches, times the accumulation window); with
more ranks than stages, the pipelines are replicas, their stages sharded by FSDP2 over the mesh's
data-parallel dimension (pp x fsdp: the mesh (pp, dp_shard); pp x ddp: (pp, dp_replicate)).
This is ``strategy=parallel``'s path (``ParallelStrategy.parallelize``) with the cut before it and
the schedule's runner after; ``strategy=parallel strategy.pp=N`` runs this class.

The strategy owns a training step's forward and backward (``owns_training_step``): the engine
hands it the micro-batches and the task's loss, and gets back each micro-batch's loss, taken on
the last stage and shared with every rank. Validation, test and predict run the stages one after
another (``pipeline_forward``). A stage keeps the model's parameter names, so its checkpoint is
the model's own, and loads under any other strategy.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Callable, Literal, Optional

import torch
import torch.distributed as dist
from torch import nn

from framework.config.experiment import Experiment
from framework.config.ranges import are_ints, ranged
from framework.config.topology import Topology
from framework.models.moe import GroupedExperts
from framework.strategies.base import Preset
from framework.strategies.parallel import ParallelStrategy, seq_len_per_rank
from framework.strategies.pipeline.forward import PipelinedModel
from framework.strategies.pipeline.schedule import ScheduleConfig, bubble_fraction, microbatches_per_batch
from framework.strategies.pipeline.split import SPLITTABLE, keep_stage, stage_units, stage_view

SCHEDULES = ("gpipe", "1f1b")  # one stage per rank; interleaved_1f1b runs stages_per_rank


@dataclass
class PPConfig(ScheduleConfig):
    name: str = "pp"
    # Ranks of one pipeline, each running stages_per_rank stages (-1: every rank the tensor-parallel
    # groups leave, one pipeline). With fewer pipeline ranks than ranks, the pipelines are data-parallel
    # replicas: FSDP2 shards each stage over them (the FSDP options above apply), or DDP replicates it
    # (data_parallel: ddp).
    pp: int = ranged(-1, low=1, unlimited=True, note="every rank the tensor-parallel groups leave")
    data_parallel: Literal["fsdp", "ddp"] = "fsdp"  # how pipeline replicas share a stage (see pp)
    # Ranks of a tensor-parallel group inside each stage (pp x tp; the plan and sequence
    # parallelism as strategy=tp's: the model's own parallelize_plan, or strategy.plan).
    tp: int = ranged(1, low=1)
    sequence_parallel: bool = True  # as strategy=tp's
    plan: Optional[dict] = None  # as strategy=tp's


def _stages_as_ranks(stages, node: dict):
    """``strategy.stages``, pp's name before: a pipeline's stages, of stages_per_rank on each of its ranks
    (a value of the wrong type is passed on as it is, or read as 1 stage per rank: the schema names it)."""
    per_rank = node.get("stages_per_rank", 1)
    if not are_ints(per_rank) or per_rank < 1:
        per_rank = 1
    if stages is None:
        return -1
    return stages // per_rank if are_ints(stages) else stages


def _pp_degrees(options: PPConfig, devices: int, num_nodes: int) -> dict[str, int]:
    """strategy=pp's degrees from its options: pipelines of ``pp`` ranks, each stage on ``tp`` ranks,
    and the pipelines sharded (fsdp) or replicated (ddp)."""
    world = devices * num_nodes
    tp = options.tp if options.tp >= 1 else 1  # (out of range: the schema check names it; here the default)
    pp = options.pp if options.pp >= 1 else max(world // tp, 1)  # -1: every rank the tp groups leave
    if world % (pp * tp):
        split = f" x strategy.tp({tp})" if tp > 1 else ""
        raise ValueError(
            f"strategy.pp: pipelines of {pp} ranks{split} do not divide the world size {world} "
            f"(trainer.devices={devices} x trainer.num_nodes={num_nodes}); the ranks form pipelines of "
            "that many ranks, each stage on one rank or one tensor-parallel group"
        )
    replicas = world // (pp * tp)
    ddp = options.data_parallel == "ddp"  # DDP replicates, FSDP shards
    return {"pp": pp, "tp": tp, "dp_replicate": replicas if ddp else 1, "dp_shard": 1 if ddp else replicas}


def _replicated(options, topology: Topology) -> bool:
    """Pipelines replicated by DDP (strategy=pp/ddp), not sharded by FSDP2."""
    return topology.data_parallel_size > 1 and getattr(options, "data_parallel", "fsdp") == "ddp"


class PipelineStrategy(ParallelStrategy):
    """Pipelines of ``stages / stages_per_rank`` ranks each (``topology.pp``), as many as the world
    holds, on ``strategy=parallel``'s path: the stage cut first, then tensor parallelism within each
    stage, then FSDP2 (or DDP) across the pipelines. ``strategy=parallel strategy.pp=N`` runs here
    too, its degrees named as parallel's."""

    name = "pp"
    runs_adapters = holds_nf4 = False  # (a stage's checkpoint and schedule know no frozen base)
    schema = PPConfig
    # (the names pp had before for its degrees: tensor_parallel for tp, as fsdp_tp's, and stages for
    # the stages of one pipeline, read as its ranks)
    presets = {"pp": Preset(names={"tensor_parallel": "tp"}, converts={"stages": ("pp", _stages_as_ranks)})}
    owns_training_step = True
    builds_on_meta = False  # each rank builds the whole model and keeps its stages
    needed_dims = ("pp",)

    @classmethod
    def degrees(cls, devices: int, num_nodes: int, options) -> dict[str, int]:
        if isinstance(options, PPConfig):
            return _pp_degrees(options, devices, num_nodes)
        return super().degrees(devices, num_nodes, options)

    @classmethod
    def check(cls, options: PPConfig, topology: Topology, accelerator: str) -> list[str]:
        return super().check(options, topology, accelerator) + cls._schedule_problems(options, topology)

    @classmethod
    def config_problems(cls, options, topology: Topology, run: Experiment) -> list[str]:
        stages, per_rank = run.strategy.get("stages"), options.stages_per_rank
        if run.strategy.get("name") != "pp" or not are_ints(stages, per_rank) or per_rank < 1 or stages % per_rank == 0:
            return []  # (a value of the wrong type or out of range: the schema check names it)
        return [
            f"strategy.stages: {stages} stages do not make strategy.stages_per_rank({per_rank}) stages on each "
            f"rank of a pipeline; choose a multiple of it, or give the pipeline's ranks: strategy.pp"
        ]

    @classmethod
    def model_problems(cls, options, topology: Topology, model: nn.Module, run: Experiment) -> list[str]:
        if topology.ep > 1:
            return [
                f"strategy.pp: a pipeline ({topology.pp} ranks) with expert parallelism (strategy.ep={topology.ep}) "
                "is not built; use pp with dp_shard, dp_replicate, cp and tp, or ep without pp"
            ]
        problems = cls._pipeline_problems(model, options, topology, run)  # (each stage: its rank's part of a sequence)
        return problems + (cls._context_parallel_problems(model, topology, run) if topology.cp > 1 else [])

    @classmethod
    def _schedule_problems(cls, options, topology: Topology) -> list[str]:
        """The schedule against the stages per rank and the pipelines' data parallelism."""
        interleaved, per_rank = options.schedule == "interleaved_1f1b", options.stages_per_rank
        if interleaved and per_rank < 2:
            return [
                "strategy.stages_per_rank: interleaved_1f1b runs several stages on each rank; set "
                f"strategy.stages_per_rank=2 or more (or strategy.schedule to one of {', '.join(SCHEDULES)})"
            ]
        if not interleaved and per_rank > 1:
            return [
                f"strategy.stages_per_rank: {per_rank} stages per rank need strategy.schedule=interleaved_1f1b "
                f"({options.schedule} runs one stage per rank)"
            ]
        if interleaved and topology.data_parallel_size > 1:
            across = getattr(options, "data_parallel", "fsdp")
            return [
                f"strategy.schedule: interleaved_1f1b with {across} across pipelines (pp x "
                f"{across}) is not built yet; use 1f1b or gpipe there, or as many pipeline ranks as "
                f"ranks ({topology.data_parallel_size} pipelines)"
            ]
        return []

    @classmethod
    def _pipeline_problems(cls, model: nn.Module, options, topology: Topology, run: Experiment) -> list[str]:
        """Why the model, split into this layout's stages, cannot run ``run`` (each stage on a
        context-parallel rank's part of every sequence)."""
        problems = cls._splittable_problems(model)
        if problems:
            return problems
        stages, seq_len = topology.pp * options.stages_per_rank, seq_len_per_rank(run, topology.cp)
        try:
            units = stage_units(model, stages, list(options.split_points))
            problems += cls._stage_forward_problems(model, units, seq_len, run.datamodule.get("input_shape"))
        except ValueError as err:
            problems.append(str(err))
        if getattr(model, "config", {}).get("tie_embeddings") and stages > 1:
            key = getattr(model, "tie_key", "model.tie_embeddings")  # (a Hugging Face model's: in its config)
            problems.append(
                f"{key}: a tied embedding and output head sit in the first and last stage; "
                f"a pipeline cannot share one weight between two ranks; set {key}=false"
            )
        if topology.tp > 1:
            problems += cls._plan_problems(model, options, topology, seq_len)
        return (
            problems
            + cls._batch_problems(options, topology, run.datamodule.get("batch_size"))
            + cls._engine_problems(run)
        )

    @classmethod
    def _splittable_problems(cls, model: nn.Module) -> list[str]:
        """A mixture of experts, or a model that does not follow the splittable contract (SPLITTABLE)."""
        if any(isinstance(m, GroupedExperts) for m in model.modules()):
            return [
                "model.n_experts: a mixture of experts cannot be split into pipeline stages here: its load-balancing "
                "loss counts every rank's tokens in each layer, which stages do not run together; use "
                "strategy=parallel strategy.ep, or fsdp"
            ]
        if getattr(model, "pipeline_splittable", False) and isinstance(getattr(model, "layers", None), nn.ModuleDict):
            return []
        return [f"model: {type(model).__name__} cannot be split into pipeline stages (strategy=pp): {SPLITTABLE}"]

    @classmethod
    def _stage_forward_problems(cls, model: nn.Module, units: list[list[str]], seq, shape) -> list[str]:
        """Each stage of the (meta) model runs its forward on the previous one's output, as the
        pipeline will: a model that declares itself splittable but calls a removed module fails here,
        before any process starts (needs the datamodule's seq_len or input_shape to make an input)."""
        if isinstance(seq, int) and seq > 0:
            x = torch.zeros(1, seq, dtype=torch.long, device="meta")
        elif isinstance(shape, (list, tuple)) and all(isinstance(d, int) for d in shape):
            x = torch.zeros(1, *shape, device="meta")
        else:
            return []
        whole = copy.deepcopy(model).to("meta")
        for i, keep in enumerate(units):
            try:
                with torch.no_grad():
                    x = keep_stage(copy.deepcopy(whole), keep)(x)
            except Exception as err:  # noqa: BLE001 - the model's own error, named with its stage
                return [
                    f"model: {type(model).__name__}'s forward fails on pipeline stage {i} ({', '.join(keep)}) once the "
                    f"other stages' modules are removed: {type(err).__name__}: {err}; {SPLITTABLE}"
                ]
        return []

    @classmethod
    def _batch_problems(cls, options, topology: Topology, batch) -> list[str]:
        """Each pipeline's share of the batch splits into its micro-batches (rounds of one per rank, interleaved)."""
        micro = microbatches_per_batch(options, topology)
        if not isinstance(batch, int) or batch % topology.data_parallel_size:
            return []  # reported by the batch check
        per_rank = batch // topology.data_parallel_size
        if per_rank % micro:
            return [
                f"strategy.microbatches: {micro} micro-batches do not divide each pipeline's batch of {per_rank} "
                f"(datamodule.batch_size={batch} / {topology.data_parallel_size} pipeline(s)); choose a divisor of "
                f"{per_rank}"
            ]
        if options.schedule == "interleaved_1f1b" and micro % topology.pp:
            return [
                f"strategy.microbatches: interleaved_1f1b runs rounds of one micro-batch per rank; {micro} is no "
                f"multiple of the pipeline's {topology.pp} ranks"
            ]
        return []

    @classmethod
    def _engine_problems(cls, run: Experiment) -> list[str]:
        """What the rest of the run asks for that a pipeline's schedule does not do."""
        trainer, task = run.trainer, run.task
        problems = []
        if run.datamodule.get("document_boundaries"):
            problems.append(
                "datamodule.document_boundaries: a pipeline's stages pass hidden states on, not each token's "
                "place in its document; set document_boundaries=false, or train with ddp, fsdp, tp or fsdp_tp"
            )
        if trainer.precision == "16-mixed":
            problems.append(
                "trainer.precision: 16-mixed needs a gradient scaler around backward, which the pipeline's "
                "schedule runs itself; use 32-true or bf16-mixed with strategy=pp"
            )
        if task.cls is not None and not callable(task.declared("loss")):
            problems.append(
                f"task._target_: {task.target} has no loss(output, targets): a pipeline runs the model inside "
                "its schedule and computes the training loss of each micro-batch's output on the last stage; give "
                "the task that method (its step's loss of an output), or train with another strategy"
            )
        if task.get("train_metrics"):
            problems.append(
                "task.train_metrics: training metrics are not taken inside a pipeline's schedule yet (its "
                "loss is); set task.train_metrics=false (validation and test metrics are kept)"
            )
        return problems

    @classmethod
    def predict_model_state_bytes(
        cls, params: int, optimizer_bytes: int, topology: Topology, model=None, options=None
    ) -> float:
        """The largest stage's parameters (the whole model / stages without one; ``params`` alone
        for a rank's stage), sharded over the pipelines."""
        largest = params / topology.pp
        if model is not None and getattr(model, "pipeline_stage_units", None):  # a rank's stage: its own
            largest = params
        elif model is not None and options is not None:
            p = topology.pp
            units = stage_units(model, p * options.stages_per_rank, list(options.split_points))
            largest = max(_stage_parameters(model, [u for s in units[r::p] for u in s]) for r in range(p))
        return (8 + optimizer_bytes) * largest / (topology.data_parallel_size * topology.cp)

    def split_stages(self, model: nn.Module, mesh) -> nn.Module:
        """Keep this rank's stages (one, or r, r + p, ... interleaved): the cut before tensor
        parallelism and FSDP (torchtitan's order: pp, tp, fsdp)."""
        ranks, per_rank = self.topology.pp, self.options.stages_per_rank
        self._rank = mesh.get_local_rank("pp")
        self._units = stage_units(model, ranks * per_rank, list(self.options.split_points))
        self._mine = [self._rank + v * ranks for v in range(per_rank)]
        keep_stage(model, [u for s in self._mine for u in self._units[s]])
        return model

    def shard_data_parallel(self, model: nn.Module, mesh) -> nn.Module:
        if self.topology.data_parallel_size * self.topology.cp == 1 or _replicated(self.options, self.topology):
            return model  # one pipeline; or DDP, around the schedule's stage (wrap)
        return super().shard_data_parallel(model, mesh)

    def wrap(self, model: nn.Module, mesh) -> nn.Module:
        self._schedules: dict[int, object] = {}
        self._timing = {"busy": 0.0, "wall": 0.0, "steps": 0}
        units, mine = self._units, self._mine
        views = [stage_view(model, units[s]) for s in mine] if len(mine) > 1 else [model]
        if _replicated(self.options, self.topology):  # the schedule's stage syncs a DDP module's gradients
            from torch.nn.parallel import DistributedDataParallel  # on the last micro-batch only

            views = [DistributedDataParallel(model, process_group=mesh["dp_replicate"].get_group())]
        return PipelinedModel(model, views, self._rank, self.topology.pp, mesh["pp"].get_group(), self.device)

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model.module if isinstance(model, PipelinedModel) else model

    def training_step(self, model: PipelinedModel, batches: list, loss_of: Callable) -> torch.Tensor:
        """Forward and backward of ``batches`` (the micro-batches of one accumulation window, each
        (inputs, targets)) through the schedule, as ``len(batches) x microbatches`` micro-batches;
        ``loss_of(output, targets)`` is the task's loss of one. Returns each batch's mean loss,
        on every rank of the pipeline (with context parallelism: of this rank's part of the sequences)."""
        per = microbatches_per_batch(self.options, self.topology)
        schedule = self._schedule(model, len(batches) * per, loss_of)
        window = (torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches]))
        with self.step_context(model, window) as (inputs, targets):  # cp: this rank's part of each sequence
            losses = self._run_schedule(schedule, model, inputs, targets)
        chunk_losses = torch.stack([loss.detach() for loss in losses]) if model.is_last else None
        shared = model.share_from_last(chunk_losses.float() if chunk_losses is not None else None)
        # each chunk's loss was divided by the chunks per batch (the schedule sums their gradients)
        return shared.view(len(batches), per).sum(dim=1)

    def _run_schedule(self, schedule, model: PipelinedModel, inputs, targets) -> list:
        """One step of ``schedule``: the first stage feeds ``inputs``, the last computes the losses of
        ``targets`` (returned, on the last stage); the stage's busy and wall time counted."""
        losses: list = []
        started, busy = time.perf_counter(), self._timing["busy"]
        if model.is_first and model.is_last:
            schedule.step(inputs, target=targets, losses=losses)
        elif model.is_first:
            schedule.step(inputs)
        else:
            schedule.step(target=targets if model.is_last else None, losses=losses)
        self._timing["steps"] += 1
        if self._timing["steps"] > 1:  # the first step infers shapes and allocates buffers:
            self._timing["wall"] += time.perf_counter() - started
        else:  # neither its time nor its busy time is counted
            self._timing["busy"] = busy
        return losses

    def _schedule(self, model: PipelinedModel, chunks: int, loss_of: Callable):
        """The schedule for ``chunks`` micro-batches (one per window length; built on first use)."""
        self._loss_of = loss_of
        if chunks not in self._schedules:
            from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

            per = microbatches_per_batch(self.options, self.topology)
            stages = [
                PipelineStage(view, index, model.stage_count, self.device, group=model.group)
                for view, index in zip(model.views, model.stage_indices)
            ]
            for stage in stages:
                for method in ("forward_one_chunk", "backward_one_chunk"):
                    setattr(stage, method, self._timed(getattr(stage, method)))
            kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B, "interleaved_1f1b": ScheduleInterleaved1F1B}[
                self.options.schedule
            ]
            self._schedules[chunks] = kind(
                stages if len(stages) > 1 else stages[0],
                chunks,
                scale_grads=False,
                loss_fn=lambda out, target: self._loss_of(out, target) / per,
            )
        return self._schedules[chunks]

    def _timed(self, compute: Callable) -> Callable:
        """``compute`` (a stage's forward or backward of one micro-batch), its time counted as busy."""

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return compute(*args, **kwargs)
            finally:
                self._timing["busy"] += time.perf_counter() - started

        return timed

    def pipeline_stats(self) -> dict:
        """The schedule, and its bubble: predicted, and measured on this rank (the share of the
        training steps after the first that its stage spent outside forward and backward)."""
        t, micro = self._timing, microbatches_per_batch(self.options, self.topology)
        measured = 1 - t["busy"] / t["wall"] if t["wall"] > 0 else None
        ranks, per_rank = self.topology.pp, self.options.stages_per_rank
        return {
            "stages": ranks * per_rank,
            "ranks": ranks,
            "stages_per_rank": per_rank,
            "schedule": self.options.schedule,
            "microbatches": micro,
            "bubble_predicted": bubble_fraction(ranks, micro, per_rank),
            "bubble_measured": measured,
        }

    def clip_gradients(self, model: nn.Module, max_value: float, algorithm: str) -> None:
        """By the norm of every stage's gradients together (each rank holds one stage's)."""
        params = [p for p in model.parameters() if p.grad is not None]
        if algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, max_value)
            return
        local = torch.nn.utils.get_total_norm([p.grad for p in params], 2.0)
        if hasattr(local, "full_tensor"):  # a sharded or split stage: the norm over its shards
            local = local.full_tensor()
        squared = local.detach().float().pow(2).reshape(1)
        dist.all_reduce(squared, group=model.group)
        torch.nn.utils.clip_grads_with_norm_(params, max_value, squared.sqrt()[0])

    def checkpoint_state(self, model: nn.Module, optimizer) -> tuple[dict, object]:
        return stage_checkpoint_state(self.unwrap(model), optimizer, model.group), None

    def load_checkpoint_state(self, model: nn.Module, optimizer, state: dict, extra) -> None:
        load_stage_checkpoint_state(self.unwrap(model), optimizer, state)

    def full_state_dict(self, model: nn.Module) -> dict:
        """Every stage's weights, gathered on rank 0 (collective)."""
        own = {
            name: (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().cpu()  # an FSDP shard: whole
            for name, t in self.unwrap(model).state_dict().items()
        }
        parts: list | None = [None] * model.ranks if model.is_first else None
        dist.gather_object(own, parts, group_dst=0, group=model.group)  # between this job's ranks, not a file
        return {name: tensor for part in parts for name, tensor in part.items()} if parts else {}


def _stage_parameters(model: nn.Module, keep: list[str]) -> int:
    seen, total = set(), 0
    for unit in keep:
        module = model.get_submodule(unit)
        for p in module.parameters() if module is not None else ():
            if id(p) not in seen:
                seen.add(id(p))
                total += p.numel()
    return total


def stage_checkpoint_state(stage: nn.Module, optimizer, group) -> dict:
    """A stage's checkpoint state, in the model's own names: its parameters and their optimizer state
    (DCP writes each rank's own), and parameter groups that list every stage's parameters, the same on
    every rank, as a whole model's optimizer would. So a pipeline's checkpoint loads into one device,
    FSDP or TP, and theirs into a pipeline (each stage keeps its own names of the groups on load)."""
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
