"""Everything checked before any process starts, every problem reported at once.

``framework.config.validate`` checks what the config itself says (schemas, types, targets
and their signatures); this module adds what needs the layers above it: the strategy's
topology against this machine and the launcher, the plug-in contracts of callbacks,
loggers, datamodule and task, the checkpoint to resume, and the run directory.
"""

from __future__ import annotations

import copy
import logging

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from framework.config import validate
from framework.config.experiment import Experiment
from framework.data.prompts import PromptFileError, read_prompts
from framework.engine.checkpoint_files import CkptPath
from framework.engine.protocols import Contract
from framework.engine.transfer_learning import InitialWeights
from framework.job.cross_checks import (
    check_adapter,
    check_adapter_base,
    check_adapter_packages,
    check_checkpoint_data,
    check_compile_blocks,
    check_data_kinds,
    check_export_directory,
    check_export_format,
    check_global_batch,
    check_harness,
    check_init_names,
    check_masked_targets,
    check_model_names,
    check_predict,
    check_predict_on_start,
    check_rank_start,
    check_resumed_corpus,
    check_strategy_on_model,
    check_test,
    check_tokens,
    check_validation_interval,
    check_writable,
)
from framework.job.experiment import ResolvedExperiment
from framework.job.overwrite import check_output_dir
from framework.job.strategy_choice import candidate_problems
from framework.rank.tested_weights import WeightsToTest
from framework.tasks.metrics import EpochMetrics

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
            component_answers,
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
            check_global_batch,
            check_model_names,
            check_export_format,
            check_export_directory,
            check_predict_on_start,
            lambda run: EpochMetrics.config_problems(run.task.get("metrics")),
            lambda run: WeightsToTest(run).problems(),
            lambda run: CkptPath(run.ckpt_path, run.output_dir or ".").problems(),
            lambda run: InitialWeights(run.init.weights).problems(),
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


def component_answers(run: Experiment) -> list[str]:
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
