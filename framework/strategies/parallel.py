"""``strategy=parallel``: any product of degrees on the job's one mesh, ``pp x dp_replicate x dp_shard
x ep x cp x tp`` = the world size (torchtitan's ``ParallelDims``).

One parallelize order, torchtitan's: a pipeline's cut first (``pp`` > 1 runs PipelineStrategy, this
path with the cut and the schedule's runner around it; fsdp, tp, hsdp and fsdp_tp are presets of this class),
then tensor/sequence parallel within each ``tp`` group (the model's
plan), context parallel (nothing to wrap: each step runs on the rank's part of the sequences,
``strategies/context_parallel.py``), then FSDP2 over the data-parallel ranks with the context-
parallel ones folded in (``dp_shard x cp`` flattened, HSDP across ``dp_replicate``): parameters are
replicated across a context-parallel group, so its gradients are averaged there as across data-
parallel ranks. Expert parallel (``ep`` > 1, a mixture of experts): the experts split across each
ep group (``strategies/expert_parallel.py``), FSDP then shards the rest across it and replicates
it across the other data-parallel ranks. Between the splits and FSDP the model is made ready
(activation checkpointing, compile: ``engine/prepare_model.py``), on the layers as they will run.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Callable, Optional

from torch import nn

from framework.config.experiment import Experiment
from framework.config.ranges import ranged
from framework.config.topology import Topology
from framework.strategies.base import Preset, Strategy
from framework.strategies.context_parallel import context_parallel
from framework.strategies.expert_parallel import (
    apply_expert_parallel,
    expert_parameters,
    grouped_experts,
    reduce_expert_gradients,
)
from framework.strategies.fsdp import FSDPSharding, apply_fsdp
from framework.strategies.pipeline.schedule import ScheduleConfig
from framework.strategies.tensor_parallel import STYLES, apply_tp, tensor_parallel_state_bytes


@dataclass
class ParallelConfig(ScheduleConfig):
    name: str = "parallel"
    pp: int = ranged(1, low=1)  # pipeline parallel: stages of one pipeline (the schedule's options above)
    # HSDP: replicas of the sharded model; -1: the nodes when dp_shard is -1 too (sharded within a
    # node, replicated across nodes), else what the others leave
    dp_replicate: int = ranged(1, low=-1)
    dp_shard: int = ranged(-1, low=-1)  # ranks that shard one replica; -1: what the other degrees leave
    ep: int = ranged(1, low=1)  # expert parallel: data-parallel ranks that split each MoE layer's experts
    cp: int = ranged(1, low=1)  # context parallel: ranks that split each sequence
    # tensor parallel: ranks that split each layer (the innermost dimension); -1: what the others
    # leave (with dp_shard given: strategy=tp, every rank)
    tp: int = ranged(1, low=-1)
    # Shard the norms and the residual stream along the sequence between the parallel layers.
    sequence_parallel: bool = True
    # null: the model's own parallelize_plan(); else {module-name pattern: colwise|rowwise|sequence}.
    plan: Optional[dict] = None


def degrees_of(options: ParallelConfig, world: int, num_nodes: int = 1) -> dict[str, int]:
    """The degrees of ``options`` on ``world`` ranks, tp, dp_replicate and dp_shard inferred where they
    are -1; ValueError naming every factor when they do not multiply to the world size."""
    replicate, shard, tp = options.dp_replicate, options.dp_shard, options.tp
    if tp == -1:  # every rank the others leave (strategy=tp: all of them)
        tp = _left(world, options.pp * options.ep * options.cp * max(replicate, 1) * shard) if shard > 0 else -1
    others = options.pp * options.ep * options.cp * tp
    if replicate == -1:
        replicate = num_nodes if shard == -1 else _left(world, others * shard)
    if shard == -1:
        shard = _left(world, others * replicate)
    if replicate < 1 or shard < 1 or others < 1 or others * replicate * shard != world:
        names = ("pp", "dp_replicate", "dp_shard", "ep", "cp", "tp")
        factors = " x ".join(f"strategy.{k}({getattr(options, k)})" for k in names)
        raise ValueError(
            f"{factors} cannot make world size {world} (trainer.devices={world // num_nodes} x "
            f"trainer.num_nodes={num_nodes}); choose degrees whose product is {world} (dp_shard=-1 takes "
            "what the others leave, dp_replicate=-1 the nodes)"
        )
    return {
        "pp": options.pp,
        "dp_replicate": replicate,
        "dp_shard": shard,
        "ep": options.ep,
        "cp": options.cp,
        "tp": tp,
    }


def _left(world: int, product: int) -> int:
    """What ``product`` ranks leave of ``world`` (-1: they do not divide it)."""
    return world // product if product > 0 and world % product == 0 else -1


def seq_len_per_rank(run: Experiment, cp: int) -> Optional[int]:
    """``datamodule.seq_len`` as one rank of a context-parallel group of ``cp`` sees it: its part."""
    seq_len = run.datamodule.get("seq_len")
    return seq_len // cp if isinstance(seq_len, int) else None


class ParallelStrategy(FSDPSharding, Strategy):
    """Tensor parallel, then context parallel, then expert parallel, then activation checkpointing and
    compile, then FSDP2/HSDP over ``dp_shard x cp``; subclasses add a pipeline's cut before
    (``split_stages``) and its runner after (``wrap``)."""

    name = "parallel"
    planned = ("fsdp",)
    schema = ParallelConfig
    # FSDP2, tensor parallelism over every rank, HSDP (Lightning's replicate x shard) and 2-D FSDP x
    # TP (Lightning's ModelParallelStrategy: TP within groups of tp ranks, FSDP2 across them, HSDP x
    # TP with dp_replicate > 1), under the option names they had as classes of their own
    presets = {
        "fsdp": Preset(),  # every rank shards one replica: parallel's defaults
        "tp": Preset(sets={"dp_shard": 1, "tp": -1}),  # every rank in one tensor-parallel group
        "hsdp": Preset(sets={"dp_replicate": -1}, names={"replicate": "dp_replicate", "shard": "dp_shard"}),
        "fsdp_tp": Preset(sets={"tp": 2}, names={"tensor_parallel": "tp", "replicate": "dp_replicate"}),
    }
    builds_on_meta = True
    needed_dims: tuple[str, ...] = ()  # mesh dimensions named even at degree 1 (a pipeline's pp)

    @classmethod
    def degrees(cls, devices: int, num_nodes: int, options: ParallelConfig) -> dict[str, int]:
        """The degrees of ``options`` (a subclass's own option names read here); a degree left out is 1
        and dp_shard what the others leave."""
        return degrees_of(options, devices * num_nodes, num_nodes)

    @classmethod
    def make_topology(cls, devices: int, num_nodes: int, options: ParallelConfig) -> Topology:
        d = cls.degrees(devices, num_nodes, options)
        return Topology(
            num_nodes=num_nodes,
            processes_per_node=devices,
            **{k: d[k] for k in ("pp", "dp_replicate", "ep", "cp", "tp") if k in d},
        )

    @classmethod
    def adapter_problems(cls, options, topology: Topology, settings) -> list[str]:
        """QLoRA's 4-bit base weights are sharded by FSDP alone: no degree but dp_shard may split them."""
        problems = super().adapter_problems(options, topology, settings)
        split = [f"{k}({v})" for k, v in topology.degrees.items() if k not in ("pp", "dp_shard") and v > 1]
        if settings.quantize and split and cls.holds_nf4:
            problems.append(
                f"adapter.quantize: nf4 (QLoRA) runs with strategy single or fsdp, not {options.name} with "
                f"{' x '.join(split)}: its 4-bit weights are sharded by FSDP alone, never split or replicated"
            )
        return problems

    @classmethod
    def model_problems(cls, options, topology: Topology, model: nn.Module, run: Experiment) -> list[str]:
        problems = []
        # (strategy=tp asks for tensor parallelism even on one rank: its plan is checked there too)
        if topology.tp > 1 or options.tp == -1:  # sequence parallelism splits each rank's part of the sequence again
            problems += cls._plan_problems(model, options, topology, seq_len_per_rank(run, topology.cp))
        if topology.cp > 1:
            problems += cls._context_parallel_problems(model, topology, run)
        if topology.ep > 1:
            problems += cls._expert_parallel_problems(model, topology)
        return problems

    @classmethod
    def _plan_problems(cls, model: nn.Module, options, topology: Topology, seq_len: Optional[int]) -> list[str]:
        """Before any process starts: the model has a plan (its own or the config's), every pattern of
        the config's matches a module, and the model's own sizes fit the tensor-parallel degree (with
        sequence parallelism: its windows of ``seq_len`` tokens, a context-parallel rank's part)."""
        tp, name = topology.tp, options.name
        if options.plan is None and not callable(getattr(model, "parallelize_plan", None)):
            return [
                f"strategy={name}: {type(model).__name__} has no tensor-parallel plan: give it a method "
                "parallelize_plan(sequence_parallel) returning {module name: ColwiseParallel(), ...}, or set "
                "strategy.plan={<module-name pattern>: colwise|rowwise|sequence}"
            ]
        problems = []
        names = [n for n, _ in model.named_modules() if n]
        for pattern, style in (options.plan or {}).items():
            if style not in STYLES:
                problems.append(f"strategy.plan.{pattern}: {style!r} is not one of {', '.join(STYLES)}")
            if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
                problems.append(
                    f"strategy.plan.{pattern}: matches no module of {type(model).__name__} (its modules: "
                    f"{', '.join(names[:12])}{', ...' if len(names) > 12 else ''})"
                )
        check = getattr(model, "tensor_parallel_problems", None)
        if callable(check):
            problems += check(tp, seq_len if options.sequence_parallel else None)
        return problems

    @classmethod
    def _context_parallel_problems(cls, model: nn.Module, topology: Topology, run: Experiment) -> list[str]:
        """Before start: the sequence splits evenly, the model declares its position tables, and nothing
        the run asks for needs the whole sequence in one rank."""
        cp = topology.cp
        datamodule, trainer = run.datamodule, run.trainer
        seq_len = datamodule.get("seq_len")
        problems = []
        if not isinstance(seq_len, int):
            problems.append(
                f"strategy.cp: context parallelism ({cp}) splits each sequence; this datamodule has no seq_len"
            )
        elif seq_len % cp:
            problems.append(
                f"datamodule.seq_len: {seq_len} is not divisible by the context-parallel degree strategy.cp={cp}"
            )
        if not hasattr(model, "context_parallel_buffers"):
            problems.append(
                f"strategy.cp: {type(model).__name__} declares no context_parallel_buffers: name the buffers "
                "indexed by position (a tuple of names, () for none) so each rank's part of the sequence gets "
                "its positions"
            )
        if datamodule.get("document_boundaries"):
            problems.append(
                "datamodule.document_boundaries: attention within documents needs a mask over the whole "
                "sequence, which context parallelism does not gather; set document_boundaries=false, or strategy.cp=1"
            )
        if trainer.compile:
            problems.append(
                f"trainer.compile: {trainer.compile!r} with context parallelism is not supported (its attention is "
                "swapped in at run time); set trainer.compile=false, or strategy.cp=1"
            )
        return problems

    @classmethod
    def _expert_parallel_problems(cls, model: nn.Module, topology: Topology) -> list[str]:
        """Before start: the model has experts, as many on each rank of an ep group."""
        counts = {len(m.w1) for m in grouped_experts(model)}
        if not counts:
            return [
                f"strategy.ep: expert parallelism ({topology.ep}) splits a mixture of experts' experts; "
                f"{type(model).__name__} has none (model=gpt/moe has, or a model with n_experts > 0)"
            ]
        return [
            f"model.n_experts: {n} experts do not divide across the expert-parallel degree strategy.ep={topology.ep}"
            for n in sorted(counts)
            if n % topology.ep
        ]

    @classmethod
    def predict_model_state_bytes(
        cls, params: int, optimizer_bytes: int, topology: Topology, model=None, options=None
    ) -> float:
        per_tp = (8 + optimizer_bytes) * params
        if topology.tp > 1:
            per_tp = tensor_parallel_state_bytes(params, optimizer_bytes, topology, model, options)
        if topology.ep > 1:  # everything sharded across an ep group, replicated across the rest
            return per_tp / topology.ep
        return per_tp / (topology.dp_shard * topology.cp)

    def ready_and_parallelize(self, model: nn.Module, ready: Callable[[nn.Module], None]) -> nn.Module:
        """The one order: the pipeline's cut, tensor parallel, context parallel, expert parallel,
        ``ready`` (activation checkpointing, compile), FSDP2 (and the pipeline's runner)."""
        t = self.topology
        mesh = self.mesh("dp_shard", *self.needed_dims, *(("dp_replicate", "cp") if t.ep > 1 else ()))
        model = self.split_stages(model, mesh)
        if t.tp > 1:
            apply_tp(model, mesh["tp"], self.options)
        self._cp_group = mesh["cp"].get_group() if t.cp > 1 else None  # nothing to wrap: step_context
        if t.ep > 1:
            self._split_experts(model, mesh)
        ready(model)
        return self.wrap(self.shard_data_parallel(model, mesh), mesh)

    def split_stages(self, model: nn.Module, mesh) -> nn.Module:
        """A pipeline's cut, before every other parallelism (none here: PipelineStrategy's)."""
        return model

    def _split_experts(self, model: nn.Module, mesh) -> None:
        """Each MoE layer's experts split across its ep group, on the mesh (dp_outer, ep) that FSDP
        shards the rest on (HSDP: sharded across ep, replicated across the rest; x tp after tensor
        parallelism), so every parameter is a DTensor of one mesh."""
        outer = mesh[("dp_replicate", "dp_shard", "cp")]._flatten("dp_outer")
        apply_expert_parallel(model, mesh[("dp_outer", "ep", *(("tp",) if self.topology.tp > 1 else ()))])
        self._outer_group = outer.get_group() if outer.size() > 1 else None

    def shard_data_parallel(self, model: nn.Module, mesh) -> nn.Module:
        """FSDP2 over the data-parallel ranks (the context-parallel ones folded in; with experts
        split, over the rest of the model on their mesh). With no rank to shard over (strategy=tp,
        one device) the model stays as tensor parallelism left it: FSDP would only gather copies of
        whole units; unless an option of FSDP's own asks for it (param_dtype, reduce_dtype, cpu_offload)."""
        options = self.options
        if self.topology.world_size == self.topology.tp and not (
            options.param_dtype or options.reduce_dtype or options.cpu_offload
        ):
            return model
        if self.topology.ep == 1:
            return apply_fsdp(model, self._data_parallel_mesh(mesh), self.options)
        return apply_fsdp(model, mesh[("dp_outer", "ep")], self.options, ignored=set(expert_parameters(model)))

    def wrap(self, model: nn.Module, mesh) -> nn.Module:
        """What the engine gets (a pipeline's schedule runner; here the sharded model itself)."""
        return model

    def optimizer_step(self, model: nn.Module, optimizer, precision, clip_val, clip_algorithm) -> None:
        if self.topology.ep > 1:  # before clipping: the experts' gradients as FSDP reduces the others
            reduce_expert_gradients(model, self._outer_group, self.topology.data_parallel_size * self.topology.cp)
        super().optimizer_step(model, optimizer, precision, clip_val, clip_algorithm)

    def _data_parallel_mesh(self, mesh):
        """FSDP's mesh: dp_shard, or dp_shard x cp flattened (the gradients of a context-parallel
        group's replicas are averaged too); with dp_replicate > 1 HSDP's two dimensions."""
        if self.topology.cp == 1:
            return mesh[self.topology.dp_dims]
        flat = mesh[("dp_shard", "cp")]._flatten("dp_shard_cp")
        return mesh[("dp_replicate", "dp_shard_cp")] if self.topology.dp_replicate > 1 else flat

    def step_context(self, model: nn.Module, batch):
        if self.topology.cp == 1:
            return super().step_context(model, batch)
        return context_parallel(self.unwrap(model), batch, self._cp_group)
