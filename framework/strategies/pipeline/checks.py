"""What keeps a pipeline from running a job, found before any process starts, each naming its key."""

from __future__ import annotations

import copy

import torch
from torch import nn

from framework.config.topology import Topology
from framework.strategies.pipeline.schedule import microbatches_per_batch
from framework.strategies.pipeline.split import SPLITTABLE, keep_stage, splittable_problems, stage_units


def pipeline_problems(model: nn.Module, options, topology: Topology, container: dict) -> list[str]:
    problems = splittable_problems(model)
    if problems:
        return problems
    stages = topology.pp * options.stages_per_rank
    try:
        problems += _stage_forward_problems(model, stage_units(model, stages, list(options.split_points)), container)
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

        problems += plan_problems(model, options, topology, container)
    return problems + _batch_problems(options, topology, container) + _engine_problems(container)


def _batch_problems(options, topology: Topology, container: dict) -> list[str]:
    batch = (container.get("datamodule") or {}).get("batch_size")
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


def _engine_problems(container: dict) -> list[str]:
    trainer, task = container.get("trainer") or {}, container.get("task") or {}
    problems = []
    if (container.get("datamodule") or {}).get("document_boundaries"):
        problems.append(
            "datamodule.document_boundaries: a pipeline's stages pass hidden states on, not each token's "
            "place in its document; set document_boundaries=false, or train with ddp, fsdp, tp or fsdp_tp"
        )
    if trainer.get("precision") == "16-mixed":
        problems.append(
            "trainer.precision: 16-mixed needs a gradient scaler around backward, which the pipeline's "
            "schedule runs itself; use 32-true or bf16-mixed with strategy=pp"
        )
    cls = _task_class(task) if task.get("_target_") else None
    if cls is not None and not callable(getattr(cls, "loss", None)):
        problems.append(
            f"task._target_: {task['_target_']} has no loss(output, targets): a pipeline runs the model inside "
            "its schedule and computes the training loss of each micro-batch's output on the last stage; give "
            "the task that method (its step's loss of an output), or train with another strategy"
        )
    if task.get("train_metrics"):
        problems.append(
            "task.train_metrics: training metrics are not taken inside a pipeline's schedule yet (its "
            "loss is); set task.train_metrics=false (validation and test metrics are kept)"
        )
    return problems


def _task_class(task: dict):
    """The task's class (None when it does not import: the contract check names that)."""
    from framework.config.validate import import_target

    try:
        return import_target(str(task["_target_"]))
    except Exception:  # noqa: BLE001 - reported by the task's own check
        return None


def _stage_forward_problems(model: nn.Module, units: list[list[str]], container: dict) -> list[str]:
    """Each stage of the (meta) model runs its forward on the previous one's output, as the
    pipeline will: a model that declares itself splittable but calls a removed module fails here,
    before any process starts (needs the datamodule's seq_len or input_shape to make an input)."""
    data = container.get("datamodule") or {}
    seq, shape = data.get("seq_len"), data.get("input_shape")
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
