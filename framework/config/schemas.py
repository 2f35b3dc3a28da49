"""Typed schemas for the config groups that the framework itself interprets.

Groups that name a class with ``_target_`` (model, datamodule, task, optimizer,
scheduler, loggers, callbacks) are checked against that class's signature instead
(see ``validate.py``), so a user's own class gets the same checks as ours.

The schemas are plain dataclasses read by our own validator rather than OmegaConf
structured configs: OmegaConf stops at the first bad key, and we report every
problem at once. They are the one place of each key's default and range (``ranged``:
the range in the field's metadata); the YAML files of ``conf/`` show the same defaults,
which ``tests/config/test_schema_defaults.py`` ties to these.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Literal, Optional, Union

from framework.config.ranges import ranged


@dataclass
class TrainerConfig:
    """Lightning-compatible trainer options (same names, same meaning)."""

    # auto: cuda, else mps, else cpu; gpu (Lightning's name): cuda, or mps where that is the one here
    accelerator: Literal["auto", "cpu", "cuda", "mps", "gpu"] = "auto"
    # Number of devices (processes for multi-process strategies) per node.
    devices: int = ranged(1, low=1)
    # On CPU, more processes per node than cores are refused; true runs them anyway (slowly).
    oversubscribe: bool = False
    # torch's CPU threads per process; null: OMP_NUM_THREADS when set, else the cores this process
    # may use divided by the processes of this node (results.json records it).
    num_threads: Optional[int] = ranged(None, low=1)
    num_nodes: int = ranged(1, low=1)  # machines; the world size is devices x num_nodes
    # Memory per device that strategy=auto plans against: bytes, or "512MiB", "2GB"; null: the
    # device's own (CUDA's total memory; none on CPU, where every candidate fits).
    memory_limit: Optional[Union[int, str]] = None
    # *-mixed: autocast, weights in fp32; *-true: weights, inputs and compute in that dtype.
    precision: Literal["32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true"] = "32-true"
    max_epochs: Optional[int] = ranged(10, low=1, unlimited=True)  # -1 or null = no limit
    # Early stopping (a callback's should_stop) waits for these; null = no minimum.
    min_epochs: Optional[int] = ranged(None, low=0, note=" (or null for none)")
    min_steps: Optional[int] = ranged(None, low=0, note=" (or null for none)")  # as min_epochs, in optimizer steps
    # Stop (completed) once this much training time has passed, over resumes too: "DD:HH:MM:SS"
    # or {days, hours, minutes, seconds}; adds the timer callback.
    max_time: Optional[Union[str, dict]] = None
    # Optimizer steps; -1 or null = no limit.
    max_steps: Optional[int] = ranged(-1, low=1, unlimited=True)
    # float in (0, 1]: fraction of a training epoch; int: every N training batches.
    val_check_interval: Union[int, float] = ranged(1.0, fraction=True)
    check_val_every_n_epoch: int = ranged(1, low=1)  # validate after every N training epochs
    # float: fraction of the batches; int: number of batches.
    limit_train_batches: Union[int, float] = ranged(1.0, fraction=True)
    limit_val_batches: Union[int, float] = ranged(1.0, fraction=True)  # as limit_train_batches
    limit_test_batches: Union[int, float] = ranged(1.0, fraction=True)  # as limit_train_batches
    limit_predict_batches: Union[int, float] = ranged(1.0, fraction=True)  # as limit_train_batches
    # true or N: run N (1 for true) batches of train/val/test, no loggers, no checkpoints.
    fast_dev_run: Union[bool, int] = ranged(False, low=0)
    accumulate_grad_batches: int = ranged(1, low=1)  # batches per optimizer step
    gradient_clip_val: Optional[float] = ranged(None, low=0)  # null or 0 = no clipping
    gradient_clip_algorithm: Literal["norm", "value"] = "norm"  # clip the total norm, or each value
    log_every_n_steps: int = ranged(50, low=1)  # train/* metrics every N optimizer steps
    deterministic: bool = False  # torch.use_deterministic_algorithms
    # torch.backends.cudnn.benchmark; null = leave it as it is.
    benchmark: Optional[bool] = None
    # torch.autograd's anomaly detection (slow: for finding the op that made a NaN).
    detect_anomaly: bool = False
    enable_progress_bar: bool = True  # false: no progress_bar callback
    # false: no ModelCheckpoint callback runs (a stop signal still saves checkpoints/last).
    enable_checkpointing: bool = True
    # The model_summary callback (parameters per module) at fit start.
    enable_model_summary: bool = True
    # Call the datamodule's train/val_dataloader() again every N epochs; 0 = once.
    reload_dataloaders_every_n_epochs: int = ranged(0, low=0, note=" (0 = never)")
    # Class names of submodules whose activations are recomputed in backward instead of kept.
    activation_checkpointing: list = field(default_factory=list)
    # Train on the same N batches (int) or fraction (float) every epoch, unshuffled; 0 = off.
    overfit_batches: Union[int, float] = ranged(0.0, low=0)
    # Validation batches run before training to catch a broken val loop early; -1 = all.
    num_sanity_val_steps: int = ranged(2, low=-1)
    # A whole validation before the first step, logged at step 0 (before and after training in one
    # metrics.csv, seen by the callbacks: the untrained weights may be best), in the sanity check's place.
    val_on_start: bool = False
    # null | simple (time per loop section -> profile.txt) | pytorch (torch.profiler trace -> profiler/).
    profiler: Optional[Literal["simple", "pytorch"]] = None
    # true: torch.compile the whole model (in place, parameter names unchanged) before the strategy
    # wraps it; blocks: each of its blocks instead (the model's block_classes, a Hugging Face model's
    # _no_split_modules), which strategies that split the model (fsdp units, tp, pp stages) keep.
    compile: Union[bool, Literal["blocks"]] = False
    # Stop a run whose training loss became NaN or infinite (status "diverged"), checked at every
    # log step, epoch end and checkpoint save; non-finite weights are never saved.
    detect_nonfinite: bool = True
    # SIGTERM and SIGINT stop at the next step with checkpoints/last saved; SIGUSR1 too when true
    # (null: when running under SLURM, whose --signal=USR1@<s> warns before the time limit).
    stop_on_sigusr1: Optional[bool] = None
    # Under SLURM, a SIGUSR1 stop requeues the job (scontrol requeue); it resumes with ckpt_path=last.
    requeue: bool = False
    # Restarts of a multi-process job after a rank fails (torch's elastic agent, as torchrun's
    # --max-restarts); a restarted job resumes from its own checkpoints/last.
    max_restarts: int = ranged(0, low=0)


@dataclass
class StrategyConfig:
    """Options shared by every strategy; a strategy with options of its own extends it
    (its module's ``schema``). The defaults live here and there only: the YAML files of
    ``conf/strategy`` name the strategy and change what differs."""

    name: str = "auto"  # a built-in strategy (the strategy group's options); see _target_ for your own
    # Process-group timeout (s): a hung collective fails instead of waiting forever.
    timeout_s: float = ranged(1800.0, low=0, strict=True, what="the process-group timeout")


@dataclass
class AutoStrategyConfig(StrategyConfig):
    """``strategy=auto``: one process is single; several choose among the candidates that fit
    ``trainer.memory_limit`` by the memory plan, then by ``probe_steps`` real steps of each."""

    # Names (ddp, zero, fsdp, fsdp_grad_op, hsdp, tp, fsdp_tp, deepspeed, ...) or strategy nodes
    # ({name: fsdp, sharding: grad_op}), in order of preference; null: ddp, zero, fsdp_grad_op,
    # fsdp, and fsdp_tp, tp for a model with a tensor-parallel plan. Without a probe, the first that fits.
    candidates: Optional[list] = None
    # Real training steps of each candidate that fits (after one warm-up step), in one launch of
    # the ranks; the fastest is chosen, and the run starts again from its seed. 0: no probe.
    probe_steps: int = ranged(0, low=0)
    # The share of the memory limit kept free for what the plan does not count (buffers, allocator).
    memory_margin: float = ranged(0.1, low=0, high=1, high_strict=True)
    # Written by the framework for the ranks (config.yaml records it): the plan of every candidate.
    plan: Optional[dict] = None


@dataclass
class SchedulerConfig:
    """Keys of the ``scheduler`` node read by the framework (Lightning's interval/frequency) and
    removed before the scheduler class is instantiated with the rest."""

    interval: Literal["step", "epoch"] = "epoch"  # step every optimizer step, or every epoch
    frequency: int = ranged(1, low=1)  # every N intervals


@dataclass
class InitConfig:
    """Transfer learning: where the model's initial weights come from (see engine/transfer_learning.py)."""

    weights: Optional[str] = None  # a checkpoint directory or a state_dict file (model.pt)
    strict: bool = False  # false: load what matches by name and shape, report the rest
    reset: list = field(default_factory=list)  # submodules that keep a fresh init (a new head)
    freeze: list = field(default_factory=list)  # submodules whose parameters do not train


@dataclass
class HarnessConfig:
    """``harness``: EleutherAI's lm-evaluation-harness after training or evaluation (rank/harness.py)."""

    tasks: list = field(default_factory=list)  # lm-eval task names; [] = no scoring
    include_path: Optional[str] = None  # a directory of task YAMLs of your own (data on disk)
    num_fewshot: Optional[int] = ranged(None, low=0)  # null: each task's own
    limit: Optional[float] = ranged(None, low=0, strict=True)  # per task: a count (>= 1) or a fraction; null: all
    batch_size: int = ranged(8, low=1)  # requests per forward on each data-parallel rank
    log_samples: bool = False  # each question's answers in <run>/harness/<task>.jsonl (lm-eval's --log_samples)
    # the weights training starts from (a fine-tune's base) scored too, before the first step: logged at
    # step 0 as harness_start/<task>/<metric>, results.json's harness_start, beside the trained weights' scores
    on_start: bool = False


@dataclass(frozen=True)
class AdapterConfig:
    """``adapter=lora`` / ``qlora``: low-rank adapters on the frozen model (framework/models/lora.py)."""

    r: int = ranged(8, low=1)  # the adapters' rank
    alpha: float = ranged(16.0, low=0, strict=True)  # the update is scaled by alpha / r
    dropout: float = ranged(0.0, low=0, high=1, high_strict=True)  # on the adapter's input
    # module names (peft's matching: equal, or ending in .<name>), or a regex matched whole; null: the
    # model's own (the built-in GPT's wq, wk, wv, wo; a Hugging Face model's q/k/v/o_proj)
    target_modules: Optional[Union[list, str]] = None
    use_dora: bool = False  # DoRA: each adapted row's magnitude learnt apart from its direction
    quantize: Optional[Literal["nf4"]] = None  # nf4: QLoRA, the frozen base's linear weights in 4 bits

    @property
    def scale(self) -> float:
        return self.alpha / self.r

    def parameters(self, layers: dict[str, tuple[int, int]]) -> int:
        """The adapters' parameters on ``layers`` (each adapted linear's name: (in, out) features):
        r x (in + out) each (A and B), and DoRA's magnitude (out) too."""
        return sum(self.r * (n_in + n_out) + (n_out if self.use_dora else 0) for n_in, n_out in layers.values())

    def rank_problems(self, layers: dict[str, tuple[int, int]]) -> list[str]:
        """``r`` against the adapted ``layers``' sizes: B A's rank is at most min(in, out), so an r above
        that of every layer adds parameters and no capacity (and shrinks the update by alpha / r):
        refused, as a value that would change the run silently (``rank_warning``: above some only)."""
        largest = max((min(shape) for shape in layers.values()), default=None)
        if largest is None or self.r <= largest:
            return []
        shown = ", ".join(f"{name} {n_in}x{n_out}" for name, (n_in, n_out) in list(layers.items())[:3])
        return [
            f"adapter.r: {self.r}, but B A's rank is at most min(in, out) of the layer it adapts, and no adapted "
            f"layer's is above {largest} ({len(layers)} layers: {shown}{' ...' if len(layers) > 3 else ''}): a "
            f"larger r adds parameters and no capacity, and scales the update by alpha / r; choose adapter.r <= "
            f"{largest}"
        ]

    def rank_warning(self, layers: dict[str, tuple[int, int]]) -> Optional[str]:
        """Where ``r`` is above min(in, out) of some adapted layers, not all (their updates cannot reach
        rank r: a waste, not a wrong run), what to say."""
        over = [name for name, shape in layers.items() if self.r > min(shape)]
        if not over or len(over) == len(layers):
            return None
        return (
            f"adapter.r: {self.r} is above min(in, out) of {len(over)} of the {len(layers)} adapted layers ("
            f"{', '.join(over[:3])}{' ...' if len(over) > 3 else ''}): their updates' rank stays below it"
        )


@dataclass
class RootConfig:
    """Top-level keys of ``conf/train.yaml`` besides the groups."""

    name: Optional[str] = None  # null: the experiment's name, else <model>_<datamodule>
    # null: a random seed is drawn, logged and written to results.json.
    seed: Optional[int] = ranged(42, low=0, high=2**32 - 1)  # numpy's seeds
    train: bool = True  # fit the model
    test: bool = True  # test it after fit (test_ckpt's weights)
    # The weights the test after training runs on, and the predictions and the harness after it (with
    # test=false too); null = best when a checkpoint callback monitors a metric, else final (rank/tested_weights.py).
    test_ckpt: Optional[Literal["best", "last", "final"]] = None
    export_weights: bool = False  # write the final weights whole (export_format), from any strategy
    # model.pt (torch.save, read back as data), model.safetensors (a format that holds only tensors), or
    # hf: model_hf/, a directory transformers' from_pretrained loads (model=hf/*).
    export_format: Literal["pt", "safetensors", "hf"] = "pt"
    # With adapters: the adapters folded into the base's weights (the whole model), instead of the
    # adapters beside it (pt, safetensors) or alone in peft's format (hf).
    export_merge: bool = False
    # After fit/test: the predict loop over predict_dataloader(), written to predictions.<format>.
    predict: bool = False
    predict_format: Literal["pt", "csv", "jsonl"] = "pt"  # predictions.pt, .csv or .jsonl
    # With predict and train: the prompts continued by the weights training starts from too (a
    # fine-tune's base), before the first step; predictions.jsonl holds them beside the trained ones.
    predict_on_start: bool = False
    # Resume: a checkpoint directory, or last / best (this run's checkpoints/).
    ckpt_path: Optional[str] = None
    # Checkpoints (ckpt_path, init.weights) are read as data: a file that would run code when
    # loaded is refused. true: load it anyway (an old or foreign checkpoint from someone you trust).
    trust_checkpoint: bool = False
    init: dict = field(default_factory=dict)  # transfer learning: the init keys below
    adapter: Optional[dict] = None  # adapter=lora|qlora: AdapterConfig's keys; null: the whole model trains
    # lm-evaluation-harness scoring: HarnessConfig's keys
    harness: dict = field(default_factory=lambda: dataclasses.asdict(HarnessConfig()))
    # Where a run writes; filled in by the entry point (Hydra's run dir).
    output_dir: Optional[str] = None
    # A new run may replace the results and checkpoints of a run already in output_dir.
    overwrite: bool = False
    # Filled in by the entry point: this start's number in output_dir when a run is recorded there
    # already (a resume: its record in attempts/<n>/ until it trains); null: the first.
    attempt: Optional[int] = None
    model: dict = field(default_factory=dict)  # the model group: _target_ and its arguments
    datamodule: dict = field(default_factory=dict)  # the datamodule group: _target_ and its arguments
    task: dict = field(default_factory=dict)  # the task group: _target_ and its arguments
    optimizer: dict = field(default_factory=dict)  # a partial: the parameters come at run time
    scheduler: Optional[dict] = None  # null: a constant learning rate
    strategy: dict = field(default_factory=dict)  # the strategy keys below
    trainer: dict = field(default_factory=dict)  # the trainer keys below
    logger: Optional[dict] = None  # name -> logger
    callbacks: Optional[dict] = None  # name -> callback
    # The metric a sweep optimises (the value a Hydra sweeper gets) and the report ranks by.
    optimized_metric: Optional[str] = "val/loss"
    optimized_mode: Literal["min", "max"] = "min"  # whether lower or higher optimized_metric is better
    # Train the job this many times in all, for its throughput's spread (the extra runs change
    # no result: fresh model, same seed, no callbacks, loggers or checkpoints).
    benchmark_repeats: int = ranged(1, low=1, message="{key}: {value}; the job trains once or more (1 = no extra runs)")
    # Reserved for the user (lightning-hydra-template's idioms): free-form, never read by the framework.
    tags: list = field(default_factory=list)
    paths: dict = field(default_factory=dict)  # the user's own, never read by the framework
    extras: dict = field(default_factory=dict)  # the user's own, never read by the framework


ROOT_KEYS = frozenset(f.name for f in fields(RootConfig))

# A top-level key that is none of RootConfig's is the user's own (declared in their config or
# added with +key=...), unless it is this close to one of ours: then it is taken for a typo.
TYPO_CUTOFF = 0.75
