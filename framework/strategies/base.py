"""The Strategy interface, with the single-process defaults every strategy starts from.

A strategy decides how a job's processes are laid out (``make_topology``), wraps a plain
model (``parallelize``), builds the optimizer over what it wrapped, takes the optimizer
step, supplies the data sampler and the checkpoint state. It is the only place that knows
about parallelism: the engine runs one loop for all of them. The collectives are plain
functions (``framework.strategies.comm.collectives``), the process group too (``process_group``).

A strategy of your own: a subclass of ``Strategy`` (one level: no strategy inherits from
another; shared behaviour lives in functions and in the mixins of ddp.py and fsdp.py), with
a schema extending ``StrategyConfig`` if it has options, selected by
``strategy._target_: my_pkg.MyStrategy``. A built-in one is also a line in ``STRATEGIES``
(``framework/strategies/registry.py``) and a YAML in ``conf/strategy/``.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from framework.config.environment import RankEnv
from framework.config.experiment import Experiment
from framework.config.schemas import StrategyConfig
from framework.config.topology import Topology
from framework.data.sampler import ShardedSampler
from framework.strategies.comm.collectives import is_distributed
from framework.strategies.comm.process_group import join_process_group, leave_process_group

log = logging.getLogger(__name__)


def _as_is(model: nn.Module) -> None:
    """Nothing to make ready (evaluation, prediction)."""


def state_options(model: nn.Module):
    """torch.distributed.checkpoint's state dict options for ``model``: an adapted one's (adapters
    and their optimizer state; the frozen base comes from where it was loaded), else None."""
    if getattr(model, "adapter_settings", None) is None:
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(ignore_frozen_params=True, strict=False)


def device_for(accelerator: str, local_rank: int) -> torch.device:
    if accelerator == "cuda":
        return torch.device("cuda", local_rank)
    return torch.device(accelerator)


@dataclass(frozen=True)
class Preset:
    """A name a user types for a class with some of its options set (``sets``: what
    conf/strategy/<name>.yaml shows beside the class's defaults), reading the option names it had
    as a class of its own as the class's (``names``: {its name: the class's}; ``converts``: {its name:
    (the class's, a function of its value and the node)} for a name that meant something else)."""

    sets: dict = field(default_factory=dict)
    names: dict = field(default_factory=dict)
    converts: dict = field(default_factory=dict)

    def old_names(self) -> dict:
        """{an option name it had: the class's option it sets}."""
        return {**self.names, **{old: new for old, (new, _) in self.converts.items()}}


class Strategy:
    """Single process, single device (strategy=single): the defaults every strategy starts from.
    Subclasses override what differs."""

    name = "single"  # the registry name (strategy.name); every strategy sets its own
    schema: type = StrategyConfig
    # How a job's local ranks start: "elastic" (torch's elastic agent, as torchrun; forked from a
    # server process), "fork" (the same agent, forked from this process) or "spawn"; a strategy
    # whose options choose it answers in ``start_method``.
    launcher = "elastic"
    # {name: Preset}: the presets of this class (strategy=<name> runs it with those options)
    presets: dict[str, Preset] = {}
    # True when every rank must run every forward together (sharded parameters are
    # all-gathered in forward): evaluation then pads the shorter ranks with extra batches.
    lockstep_forward = False
    # Wrappers such as DDP and FSDP need a process group even for a single process.
    needs_process_group = False
    # One process per device (ddp, fsdp, ...) rather than one per node.
    process_per_device = False
    # The model is built on the meta device and materialised per rank after parallelize (its
    # init_weights): a strategy that shards it never holds it whole.
    builds_on_meta = False
    # The strategy runs a training step's forward and backward itself (a pipeline's schedule):
    # the engine then calls ``training_step(model, batches, loss_of)`` instead of the task's step.
    owns_training_step = False
    # What it can run, checked before start (a subclass inherits it; a class of the user's declares it):
    # adapters (LoRA, DoRA: its wrappers and checkpoints keep the frozen base apart), and QLoRA's
    # 4-bit base weights (``adapter_problems`` says which layouts of the class hold them).
    runs_adapters = True
    holds_nf4 = True
    # The names framework-plan compares this class under on every model (job/plan.py).
    planned: tuple[str, ...] = ()

    def __init__(
        self,
        options: StrategyConfig,
        accelerator: str,
        topology: Topology = Topology(),
        env: RankEnv = RankEnv(),
        accumulate_grad_batches: int = 1,
    ):
        self.options = options
        # the name the run selected: a class that runs a family's variant (strategy=parallel with
        # pp > 1 runs the pipeline's class) reports it as selected
        self.name = getattr(options, "name", None) or self.name
        self.accelerator = accelerator
        self.topology = topology
        self.env = env
        # Micro-batches per optimizer step (trainer.accumulate_grad_batches): a strategy whose
        # optimizer counts backward passes itself (Horovod's) needs it.
        self.accumulate_grad_batches = accumulate_grad_batches
        self.device = device_for(accelerator, env.local_rank)

    # ---- class level: known before any process starts ----
    @classmethod
    def start_method(cls, options: StrategyConfig) -> str:
        """How the local ranks of a run with ``options`` start (see ``launcher``)."""
        return cls.launcher

    @classmethod
    def variant(cls, options: StrategyConfig) -> type["Strategy"]:
        """The class that runs ``options``: this one, or one of its family that an option selects
        (strategy=horovod's backend: the native hooks or the real library)."""
        return cls

    @classmethod
    def make_topology(cls, devices: int, num_nodes: int, options: StrategyConfig) -> Topology:
        """The layout for ``trainer.devices`` per node on ``trainer.num_nodes`` nodes; raises
        ValueError (naming the keys and factors) when ``options`` cannot lay it out."""
        if cls.process_per_device:
            return Topology(num_nodes=num_nodes, processes_per_node=devices)
        return Topology(num_nodes=num_nodes, processes_per_node=1, devices_per_process=devices)

    # (every check of a strategy takes its options and their topology first, then what it checks them
    # against: check, config_problems, model_problems and adapter_problems alike)
    @classmethod
    def check(cls, options: StrategyConfig, topology: Topology, accelerator: str) -> list[str]:
        """Every reason this strategy cannot run ``topology`` on ``accelerator`` here (by default:
        a strategy of one process per device runs any number of them; the others one device)."""
        if not cls.process_per_device and (topology.world_size != 1 or topology.devices_per_process != 1):
            return [
                f"strategy={cls.name}: runs one process on one device, but trainer.devices="
                f"{topology.devices_per_process * topology.processes_per_node} and trainer.num_nodes="
                f"{topology.num_nodes}; use strategy=ddp (or auto) for several devices"
            ]
        return []

    @classmethod
    def predict_model_state_bytes(
        cls, params: int, optimizer_bytes: int, topology: Topology, model=None, options=None
    ) -> float:
        """Per-rank bytes of parameters + gradients + optimizer state (fp32: 4 + 4 + ``optimizer_bytes``
        per parameter), the ZeRO paper's accounting; replicated on every rank here. ``model`` (any
        device, meta too) and ``options``: for a strategy whose split depends on the model's layers."""
        return (8 + optimizer_bytes) * params

    @classmethod
    def predict_adapted_state_bytes(
        cls,
        params: int,
        trainable: int,
        optimizer_bytes: int,
        topology: Topology,
        model=None,
        options=None,
        packed: float = 0,
    ) -> float:
        """With adapters: every one of ``params``'s weights as this layout splits them (4 B, less the
        ``packed`` bytes that a 4-bit base holds fewer: QLoRA's NF4, ``nf4.bytes_saved``), and
        gradients and optimizer state for the ``trainable`` parameters this rank holds alone."""
        # (as many fp32 weights fewer as the packed base saves bytes / 4: split as the weights are)
        weights = cls.predict_model_state_bytes(params - packed / 4, 0, topology, model, options) / 2
        return weights + (4 + optimizer_bytes) * trainable

    @classmethod
    def adapter_problems(cls, options: StrategyConfig, topology: Topology, settings) -> list[str]:
        """Every reason this strategy laid out as ``topology`` cannot run adapters of ``settings``
        (AdapterConfig): ``runs_adapters``, ``holds_nf4`` (QLoRA), and DoRA's whole weights."""
        name = getattr(options, "name", None) or cls.name
        if not cls.runs_adapters:
            return [f"adapter: strategy={name} does not run adapters (its class's runs_adapters is false)"]
        problems = []
        if settings.quantize and not cls.holds_nf4:
            problems.append(
                f"adapter.quantize: nf4 (QLoRA) runs with strategy single or fsdp, not {name}: its 4-bit weights "
                "are not split by tensor parallelism nor wrapped by DDP here (its class's holds_nf4 is false)"
            )
        if settings.use_dora and topology.tp > 1:
            problems.append("adapter.use_dora: DoRA's row norms need whole weights; tensor parallelism splits them")
        return problems

    @classmethod
    def model_problems(
        cls, options: StrategyConfig, topology: Topology, model: nn.Module, run: Experiment
    ) -> list[str]:
        """Every reason this strategy cannot run ``model`` (built on the meta device) in this layout."""
        return []

    @classmethod
    def config_problems(cls, options: StrategyConfig, topology: Topology, run: Experiment) -> list[str]:
        """Every reason the rest of the experiment (``run``'s trainer, datamodule, ...) cannot
        run on this strategy in this layout."""
        return []

    @classmethod
    def job_options(cls, options: StrategyConfig, topology: Topology, run: Experiment) -> StrategyConfig:
        """The options the ranks get, completed from the rest of the experiment (by default as they are)."""
        return options

    # ---- runtime ----
    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world_size(self) -> int:
        return self.env.world_size

    @property
    def is_global_zero(self) -> bool:
        return self.env.rank == 0

    def setup_environment(self) -> None:
        """Join the job's process group (a strategy with a rendezvous of its own, Horovod's, overrides it)."""
        join_process_group(self.env, self.device, self.options.timeout_s, self.needs_process_group)

    def setup(
        self, model: nn.Module, optimizer_factory: Callable | None, ready: Callable[[nn.Module], None] | None = None
    ) -> tuple[nn.Module, object]:
        """Move and wrap ``model``; build the optimizer over the parameters it will train (None: no
        optimizer). ``ready`` (training: activation checkpointing, compile; in place) runs on the
        plain model before it is wrapped. A model on the meta device is wrapped there, then
        materialised: each rank allocates its shards and the model's ``init_weights(seed)`` fills them."""
        on_meta = any(p.is_meta for p in model.parameters())
        model = self.ready_and_parallelize(model if on_meta else model.to(self.device), ready or _as_is)
        if on_meta:
            model.to_empty(device=self.device)
            model.init_weights(torch.initial_seed())  # the seed it would have been built with
        return model, (self.build_optimizer(model, optimizer_factory) if optimizer_factory else None)

    def ready_and_parallelize(self, model: nn.Module, ready: Callable[[nn.Module], None]) -> nn.Module:
        """``ready(model)``, then ``parallelize``: a strategy that splits the model's layers first
        (tensor, context, expert parallel: ParallelStrategy) makes it ready between the two."""
        ready(model)
        return self.parallelize(model)

    def parallelize(self, model: nn.Module) -> nn.Module:
        """Wrap or shard ``model`` (already on this rank's device) for this strategy."""
        return model

    @property
    def sequence_multiple(self) -> int:
        """What every forward's sequence length must be a multiple of: the tensor-parallel degree where
        sequence parallelism splits the sequence across its ranks, else 1."""
        split = self.topology.tp > 1 and getattr(self.options, "sequence_parallel", False)
        return self.topology.tp if split else 1

    def mesh(self, *needed: str):
        """The job's device mesh (``Topology.build_mesh``), with the dimensions this strategy
        takes by name even at size 1; called once, in ``parallelize``."""
        mesh = self.topology.build_mesh(self.device.type, *needed)
        log.info("Device mesh %s: %s", dict(zip(mesh.mesh_dim_names, mesh.shape)), self.topology.describe())
        return mesh

    def build_optimizer(self, model: nn.Module, optimizer_factory: Callable) -> torch.optim.Optimizer:
        """The optimizer partial completed with the wrapped model's parameters (sharded ones for FSDP)."""
        return optimizer_factory(self.optimizer_params(model, optimizer_factory))

    def optimizer_params(self, model: nn.Module, optimizer_factory: Callable):
        """The wrapped model's parameters, in the groups ``optimizer.param_groups`` declares by name."""
        params_of = getattr(optimizer_factory, "params_of", None)  # a plain partial (the API) has no groups
        return params_of(self.unwrap(model)) if params_of else model.parameters()

    def backward(self, model: nn.Module, loss: torch.Tensor, precision) -> None:
        """Backward of one micro-batch's (already window-scaled) loss."""
        precision.backward(loss)

    def optimizer_step(
        self, model: nn.Module, optimizer, precision, clip_val: float | None, clip_algorithm: str
    ) -> None:
        """One optimizer step on the gradients of a finished accumulation window: unscale, clip,
        step. A strategy that synchronises gradients itself does it here, before clipping."""
        if clip_val:
            precision.unscale(optimizer)
            self.clip_gradients(model, clip_val, clip_algorithm)
        precision.step(optimizer)

    def zero_grad(self, optimizer) -> None:
        """After the optimizer step: the gradients go (None: no memory until the next backward)."""
        optimizer.zero_grad(set_to_none=True)

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model

    def end_training(self, model: nn.Module) -> None:
        """The last training step is done, before the final validation, test and saves (a strategy
        whose ranks drift apart, such as asynchronous averaging, makes them agree here)."""

    def sampler(
        self, length: int, shuffle: bool, seed: int, drop_last_multiple: int | None, order=None
    ) -> ShardedSampler:
        return ShardedSampler(
            length,
            self.topology.data_parallel_size,
            self.topology.data_parallel_rank(self.env.rank),
            shuffle,
            seed,
            drop_last_multiple,
            order,
        )

    @contextlib.contextmanager
    def step_context(self, model: nn.Module, batch):
        """Context for one micro-batch's forward and backward (an evaluation's forward): yields the
        batch this rank runs (context parallelism: its part of each sequence); by default ``batch``."""
        yield batch

    def no_sync(self, model: nn.Module):
        """Context for micro-batches that must not all-reduce gradients (accumulation)."""
        return contextlib.nullcontext()

    def whole_parameters(self, model: nn.Module):
        """Context: within it the model's parameters are whole on every rank, and what is written
        into them stays (a strategy that partitions them outside DTensor, DeepSpeed's stage 3,
        gathers them); by default they are already."""
        return contextlib.nullcontext()

    def full_state_dict(self, model: nn.Module) -> dict:
        """The whole model's weights as plain CPU tensors, on rank 0 (collective: call on every rank)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        if not is_distributed():
            return {k: v.detach().cpu() for k, v in self.unwrap(model).state_dict().items()}
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(model, options=options)

    def clip_gradients(self, model: nn.Module, max_value: float, algorithm: str) -> None:
        """By value, or by the norm of all gradients together: over the whole model, whatever its
        shards (a DTensor's norm is reduced over its mesh; a per-shard norm would clip each
        rank differently)."""
        params = [p for p in model.parameters() if p.grad is not None]
        if algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, max_value)
            return
        total = torch.nn.utils.get_total_norm([p.grad for p in params], 2.0)
        if hasattr(total, "full_tensor"):  # a DTensor (FSDP, TP): the norm over every shard
            total = total.full_tensor()
        torch.nn.utils.clip_grads_with_norm_(params, max_value, total)

    def checkpoint_state(self, model: nn.Module, optimizer) -> tuple[dict, object]:
        """(state for torch.distributed.checkpoint, extra picklable state for rank 0's file).

        Model and optimizer state use fully qualified parameter names, whatever the wrapper,
        so a checkpoint moves between strategies and world sizes. An adapted model's checkpoint
        holds its adapters, not the frozen base (``state_options``).
        """
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

        options = state_options(self.unwrap(model))
        if optimizer is None:
            return {"model": get_model_state_dict(model, options=options)}, None
        model_state, optim_state = get_state_dict(model, optimizer, options=options)
        return {"model": model_state, "optim": optim_state}, None

    def load_checkpoint_state(self, model: nn.Module, optimizer, state: dict, extra) -> None:
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

        options = state_options(self.unwrap(model))
        if optimizer is None:
            set_model_state_dict(model, state["model"], options=options)
        else:
            set_state_dict(
                model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"], options=options
            )

    def comm_stats(self) -> dict | None:
        """What this rank sent per optimizer step (``bytes_per_step``) and by which algorithm,
        for results.json's ``comm``; None where the strategy does not count (torch's wrappers)."""
        return None

    def training_step(self, model: nn.Module, batches: list, loss_of: Callable) -> torch.Tensor:
        """With ``owns_training_step``: forward and backward of ``batches`` (one accumulation window's
        micro-batches, each (inputs, targets)), ``loss_of(output, targets)`` the task's loss of an
        output; returns each micro-batch's loss, the same on every rank."""
        raise NotImplementedError(f"strategy={self.name} runs no training step of its own")

    def pipeline_stats(self) -> dict | None:
        """A pipeline's schedule and bubble (predicted, measured on this rank), for results.json's
        ``pipeline``; None for a strategy that runs no pipeline."""
        return None

    def model_state_bytes(self, model: nn.Module, optimizer) -> dict | None:
        """This rank's bytes of parameters, gradients and optimizer state, where the strategy keeps
        them outside the model's parameters and the optimizer's state (None: the engine counts those)."""
        return None

    def inner_optimizer(self, optimizer):
        """The optimizer of the user's class inside what ``build_optimizer`` returned (ZeRO's
        holds this rank's shard in one): what the LR monitor names and memory counts."""
        return optimizer

    def teardown(self) -> None:
        leave_process_group()
