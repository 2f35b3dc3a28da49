"""Everything checked before any process starts, every problem reported at once.

``framework.config.validate`` checks what the config itself says (schemas, types, targets
and their signatures); this module adds what needs the layers above it: the strategy's
topology against this machine and the launcher, the plug-in contracts of callbacks,
loggers, datamodule and task, the checkpoint to resume, and the run directory.
"""

from __future__ import annotations

import copy
import logging
import zipfile
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from framework.config import validate
from framework.config.experiment import Experiment
from framework.config.param_groups import ParamGroups
from framework.config.validate import check_target, import_target
from framework.data.prompts import PromptFileError, read_prompts
from framework.engine.checkpoint_files import CkptPath, is_checkpoint, resolve_ckpt_path
from framework.engine.protocols import Contract
from framework.engine.safe_load import scan_checkpoint
from framework.job.cross_checks import (
    check_adapter,
    check_adapter_base,
    check_adapter_packages,
    check_compile_blocks,
    check_data_kinds,
    check_export_directory,
    check_export_format,
    check_harness,
    check_init_names,
    check_masked_targets,
    check_predict_on_start,
    check_resumed_corpus,
    check_tokens,
    check_validation_interval,
    check_writable,
)
from framework.job.experiment import ResolvedExperiment
from framework.job.overwrite import check_output_dir
from framework.job.strategy_choice import candidate_problems
from framework.rank.tested_weights import WeightsToTest

log = logging.getLogger(__name__)


def preflight(cfg: DictConfig) -> ResolvedExperiment:
    """Raise ``ConfigError`` listing every problem of the experiment ``cfg``; return its typed run
    when it can run."""
    cfg, unread = read_inputs(cfg)
    return validate(
        cfg,
        subject=ResolvedExperiment,  # the typed run, its layout and meta-device model worked out once for every check
        checks=[
            lambda run: unread,
            lambda run: run.size_problems,  # the model too large to build here is not built, even on meta
            lambda run: run.strategy_problems,
            candidate_problems,
            check_strategy_on_model,
            check_rank_start,
            check_components,
            check_test,
            check_predict,
            check_tokens,
            check_data_kinds,
            check_masked_targets,
            check_harness,
            check_init_names,
            check_writable,
            check_compile_blocks,
            check_resumed_corpus,
            check_validation_interval,
            check_model_names,
            check_export_format,
            check_export_directory,
            check_predict_on_start,
            check_task_metrics,
            lambda run: WeightsToTest(run).problems(),
            lambda run: CkptPath(run.ckpt_path, run.output_dir or ".").problems(),
            check_init_weights,
            check_checkpoint_data,
            check_adapter,
            check_adapter_base,
            check_adapter_packages,
            check_output_dir,
        ],
    )


def read_inputs(cfg: DictConfig) -> tuple[DictConfig, list[str]]:
    """The inputs a run reads whole, read once, here, into the run (a copy of ``cfg``): the prompts of
    ``datamodule.predict_file`` become its ``predict_prompts`` (the file null), so the checks, the
    ranks and config.yaml hold this copy: a pipe such as /dev/stdin reads once only. Returns the run
    and the problems of a file that does not read as prompts."""
    try:
        path = OmegaConf.select(cfg, "datamodule.predict_file", default=None)
        takes_prompts = "predict_prompts" in (cfg.get("datamodule") or {})
    except OmegaConfBaseException:
        return cfg, []  # (a key that does not resolve is named by the schema check)
    if not path or not isinstance(path, str) or not takes_prompts:
        return cfg, []  # (a datamodule of the user's without predict_prompts reads its own file)
    cfg = copy.deepcopy(cfg)
    try:
        prompts, problems = read_prompts(path), []
        log.info("datamodule.predict_file: %d prompts read from %s", len(prompts), path)
    except PromptFileError as err:
        prompts, problems = None, [f"datamodule.predict_file: {p}" for p in err.problems]
    with open_dict(cfg):
        cfg.datamodule.predict_file = None
        if prompts is not None:
            cfg.datamodule.predict_prompts = prompts
    return cfg, problems


def check_components(run: Experiment) -> list[str]:
    """Each configured class against the contract the engine calls it by (engine/protocols.py), and
    each component's own answer for the run it is in: its ``check_run(run)``, where it has one (its
    own arguments alone: its ``check_config``, asked by the schema check)."""
    specs = [("model", run.model), ("datamodule", run.datamodule), ("task", run.task)]
    specs += [("callbacks", spec) for spec in run.callbacks.values()]
    specs += [("logger", spec) for spec in run.loggers.values()]
    problems = []
    for group, spec in specs:
        if spec.cls is None:
            continue  # (a missing or failing import is reported by the config checks)
        problems += Contract.of(group).problems(spec.cls, spec.key)
        answer = spec.declared("check_run")
        problems += answer(run) if callable(answer) else []
    return problems


def check_test(run: Experiment) -> list[str]:
    """``test=true`` (the default, and framework-evaluate's) needs a datamodule with ``test_dataloader()``."""
    data = run.datamodule
    if not run.test or not data.is_class or callable(data.declared("test_dataloader")):
        return []  # (a factory's product is unknown before it runs)
    target = data.target
    other = " or set test=false" if run.train else ""
    return [
        f"test: true, but datamodule._target_ {target} has no test_dataloader(); add one (it returns the "
        f"DataLoader of the test samples, or None), choose a datamodule that has one{other}"
    ]


def check_predict(run: Experiment) -> list[str]:
    """``predict=true`` needs a datamodule with ``predict_dataloader()``."""
    data = run.datamodule
    if not run.predict or not data.is_class:
        return []
    if callable(data.declared("predict_dataloader")):
        return _records_problems(run)
    target = data.target
    other = " or set predict=false" if run.train or run.test else ""
    return [
        f"predict: true, but datamodule._target_ {target} has no predict_dataloader(); add one (it returns "
        f"the DataLoader of the samples to predict), choose a datamodule that has one{other}"
    ]


def _records_problems(run: Experiment) -> list[str]:
    """``predict_format=jsonl`` of a datamodule with ``prediction_records`` (a text's prompts and
    their continuations) needs the token ids a task's ``predict_step`` generates, not the model's
    outputs (logits: every continuation would be empty)."""
    records = callable(run.datamodule.declared("prediction_records"))
    if (
        run.predict_format != "jsonl"
        or not records
        or run.task.cls is None
        or callable(run.task.declared("predict_step"))
    ):
        return []  # (a task that does not import is reported by the config checks)
    return [
        f"predict_format: jsonl writes each prompt's continuation, generated by the task's predict_step; "
        f"task._target_ {run.task.target} has none (its predictions would be the model's logits): give it a "
        "predict_step that returns token ids, choose task=language_modeling, or predict_format=pt or csv"
    ]


def check_model_names(run: ResolvedExperiment) -> list[str]:
    """What names the model's parameters and submodule classes: ``optimizer.param_groups`` (each
    entry must take some parameter), ``trainer.activation_checkpointing`` and
    ``strategy.wrap_classes`` (each class must be one of a submodule). The model is built on the
    meta device (no memory, no weights read)."""
    specs = run.optimizer.get("param_groups")
    specs = None if not specs or ParamGroups.problems(specs, None) else specs
    checkpointed = run.trainer.activation_checkpointing
    checkpointed = checkpointed if isinstance(checkpointed, list) and checkpointed else None
    wrapped = run.strategy.get("wrap_classes")
    wrapped = wrapped if isinstance(wrapped, list) and wrapped else None
    if not (specs or checkpointed or wrapped):
        return []
    from framework.engine.activation_checkpointing import CheckpointedClasses

    model = run.meta_model  # only a run that names parameters or classes pays for it before its ranks start
    if model is None:
        return []
    problems = ParamGroups(specs).match_problems([n for n, _ in model.named_parameters()]) if specs else []
    problems += CheckpointedClasses(tuple(map(str, checkpointed))).problems(model) if checkpointed else []
    if checkpointed and run.trainer.compile:
        problems += CheckpointedClasses(tuple(map(str, checkpointed))).compiled_problems(model)
    return problems + (
        CheckpointedClasses(tuple(map(str, wrapped)), "strategy.wrap_classes").problems(model) if wrapped else []
    )


def check_task_metrics(run: Experiment) -> list[str]:
    """Each ``task.metrics`` entry imports, builds (on the CPU, no data) and is a metric."""
    metrics = run.task.get("metrics")
    if not metrics:
        return []
    if not isinstance(metrics, dict):
        return [f"task.metrics: expected a mapping of name -> {{_target_: ...}}, got {metrics!r}"]
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    from framework.tasks.metrics import EpochMetrics

    problems: list[str] = []
    for name, node in metrics.items():
        key, before = f"task.metrics.{name}", len(problems)
        if not isinstance(node, dict):
            problems.append(f"{key}: expected a mapping with '_target_' (a torchmetrics class), got {node!r}")
            continue
        check_target(node, key, problems, "metric")
        if len(problems) > before:
            problems += _misspelled_arguments(node, key)
            continue
        try:
            metric = instantiate(node, _convert_="all")
        except InstantiationException as err:  # (hydra's wrap of the metric's own message: what is wrong)
            cause = err.__cause__ or err
            problems.append(f"{key}: {node['_target_']} does not build: {type(cause).__name__}: {cause}")
            continue
        problems += EpochMetrics.problems({name: metric})
    return problems


def _misspelled_arguments(node: dict, key: str) -> list[str]:
    """Keys of ``node`` close to, but not, an argument of its ``_target_`` (torchmetrics classes
    take **kwargs, so a typo there reads as a missing argument)."""
    import difflib
    import inspect

    try:
        names = [n for n in inspect.signature(import_target(node["_target_"])).parameters if n != "kwargs"]
    except (ImportError, ValueError, TypeError):  # no signature to compare with
        return []
    out = []
    for given in node:
        close = difflib.get_close_matches(given, names, n=1)
        if given not in names and not given.startswith("_") and close:
            out.append(f"{key}.{given}: not an argument of {node['_target_']}; did you mean {close[0]}?")
    return out


def check_init_weights(run: Experiment) -> list[str]:
    """``init.weights`` is a checkpoint directory or a file torch.save wrote (a model.pt)."""
    path = Path(str(run.init.weights)) if run.init.weights else None
    if path is None or not path.exists():
        return []  # (a missing path is reported by the config checks)
    if path.is_dir():
        return (
            []
            if is_checkpoint(path)
            else [
                f"init.weights: '{path}' is a directory but not a checkpoint (one holds .metadata, trainer.pt and "
                "manifest.json); pass a checkpoint directory or a model.pt"
            ]
        )
    if path.suffix == ".safetensors":
        return _safetensors_problems(path)
    if not zipfile.is_zipfile(path):
        return [
            f"init.weights: '{path}' is not a checkpoint: a checkpoint directory, a state_dict file written "
            "by torch.save (model.pt) or a .safetensors file is"
        ]
    return []


def _safetensors_problems(path: Path) -> list[str]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt"):
            return []
    except (SafetensorError, OSError) as err:  # the library's message says what is wrong with the file
        return [f"init.weights: '{path}' is not a readable .safetensors file: {err}"]


def check_checkpoint_data(run: Experiment) -> list[str]:
    """The checkpoint to resume or evaluate and the initial weights load as data (engine/safe_load.py),
    unless ``trust_checkpoint`` says to load them anyway."""
    if run.trust_checkpoint:
        return []
    found = []
    ckpt, output_dir = run.ckpt_path, str(run.output_dir or ".")
    if ckpt and not CkptPath(ckpt, output_dir).problems():  # (one not whole is named by that check)
        path = resolve_ckpt_path(str(ckpt), output_dir)
        found += [f"ckpt_path: {p}" for p in (scan_checkpoint(path) if path.exists() else [])]
    weights = run.init.weights
    if (
        weights
        and Path(str(weights)).exists()
        and not check_init_weights(run)
        and Path(str(weights)).suffix != ".safetensors"
    ):  # (tensors only: nothing to scan)
        found += [f"init.weights: {p}" for p in scan_checkpoint(Path(str(weights)))]
    return found


def check_strategy_on_model(run: ResolvedExperiment) -> list[str]:
    """What the strategy says of the model itself (a tensor-parallel plan and the sizes it splits),
    on the model built on the meta device; only for a strategy that checks models."""
    from framework.strategies import Strategy

    if run.layout is None or run.strategy_problems:
        return []  # an invalid strategy, layout or option (strategy.microbatches=abc): named by check_strategy
    cls = run.layout.strategy
    if cls.model_problems.__func__ is Strategy.model_problems.__func__ or run.meta_model is None:
        return []
    return cls.model_problems(run.layout.options, run.layout.topology, run.meta_model, run)


def check_rank_start(run: ResolvedExperiment) -> list[str]:
    """Local ranks that can start from here: classes defined in a notebook reach forked ranks only,
    and a fork cannot use CUDA once this process initialised it, nor autograd once its threads started."""
    import torch

    from framework.config.environment import detect_environment
    from framework.launch.main_module import autograd_survives_fork, forks_ranks, interactive_main, needs_main

    if run.layout is None:  # an invalid strategy or layout is named by check_strategy
        return []
    if run.layout.topology.processes_per_node < 2 or detect_environment() is not None:
        return []
    name, start = f"strategy={run.layout.name}", run.layout.start
    if start == "spawn" and needs_main(run) and interactive_main():
        return [
            f"{name}: starts fresh interpreters, which cannot see the classes defined in this notebook or "
            "session (_target_: __main__...); use strategy=ddp_notebook (or ddp, fsdp, ...: they fork their "
            "ranks from this process here), or move those classes into a module file"
        ]
    if forks_ranks(run, start) and torch.cuda.is_available() and torch.cuda.is_initialized():
        return [
            f"{name}: its ranks are forks of this process, which has initialised CUDA already (a CUDA "
            "tensor or call before fit), and a forked process cannot use CUDA; restart the kernel and call "
            "fit before anything touches CUDA, or move the classes of _target_: __main__... into a module "
            "file and use strategy=ddp"
        ]
    if forks_ranks(run, start) and not autograd_survives_fork():
        return [
            f"{name}: its ranks are forks of this process, whose autograd has started threads already (a "
            "compiled model's backward ran here: trainer.compile), and a forked process cannot run backward "
            "then; restart the kernel and run this fit before any compiled one, or move the classes of "
            "_target_: __main__... into a module file and use strategy=ddp"
        ]
    return []
