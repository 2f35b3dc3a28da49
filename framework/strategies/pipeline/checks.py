"""What keeps a pipeline from running a job, found before any process starts, each naming its key."""

from __future__ import annotations

import copy

import torch
from torch import nn

from framework.config.experiment import Experiment
from framework.config.topology import Topology
from framework.strategies.parallel import seq_len_per_rank
from framework.strategies.pipeline.schedule import microbatches_per_batch
from framework.strategies.pipeline.split import SPLITTABLE, keep_stage, splittable_problems, stage_units


def pipeline_problems(model: nn.Module, options, topology: Topology, run: Experiment) -> list[str]:
    """Why the model, split into this layout's stages, cannot run ``run`` (each stage on a
    context-parallel rank's part of every sequence)."""
    problems = splittable_problems(model)
    if problems:
        return problems
    stages, seq_len = topology.pp * options.stages_per_rank, seq_len_per_rank(run, topology.cp)
    try:
        units = stage_units(model, stages, list(options.split_points))
        problems += _stage_forward_problems(model, units, seq_len, run.datamodule.get("input_shape"))
    except ValueError as err:
        problems.append(str(err))
    if getattr(model, "config", {}).get("tie_embeddings") and stages > 1:
        key = getattr(model, "tie_key", "model.tie_embeddings")  # (a Hugging Face model's: in its config)
        problems.append(
            f"{key}: a tied embedding and output head sit in the first and last stage; "
            f"a pipeline cannot share one weight between two ranks; set {key}=false"
        )
    if topology.tp > 1:
        from framework.strategies.tensor_parallel import plan_problems

        problems += plan_problems(model, options, topology, seq_len)
    return problems + _batch_problems(options, topology, run.datamodule.get("batch_size")) + _engine_problems(run)


def _batch_problems(options, topology: Topology, batch) -> list[str]:
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


def _engine_problems(run: Experiment) -> list[str]:
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


def _stage_forward_problems(model: nn.Module, units: list[list[str]], seq, shape) -> list[str]:
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
