"""What a rank's job reports in results.json (rank 0 writes it): the job's fields whatever its
outcome, and a completed run's figures."""

from __future__ import annotations

import os
from typing import Optional

from framework.config.environment import cpu_cores
from framework.config.experiment import Experiment
from framework.engine.memory import optimizer_state_bytes, whole_numel
from framework.engine.results import job_record, peak_memory_bytes, throughput
from framework.engine.trainer import Trainer
from framework.models.nf4 import bytes_saved
from framework.strategies import Strategy
from framework.strategies.comm.collectives import all_gather_object


def flatten(node: dict, prefix: str = "") -> dict:
    """{'a': {'b': 1}} -> {'a.b': 1} (for TensorBoard's hparams)."""
    flat = {}
    for key, value in node.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _tokens(figures: dict, seq_len) -> dict:
    """A language model's throughput in tokens too: samples (windows) x ``datamodule.seq_len``."""
    if isinstance(seq_len, int) and figures.get("samples_per_s"):
        figures["tokens_per_s"] = figures["samples_per_s"] * seq_len
    return figures


def job_fields(run: Experiment, strategy: Strategy) -> dict:
    """What results.json says of the job whatever its outcome; ``placement``: the CPU cores rank 0
    may run on and the CUDA devices it may see (a packed sweep gives each job its own); ``model_source``:
    the saved model the weights start from, where the model declares one (a Hugging Face model's path)."""
    placement = {"cpus": cpu_cores(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    source = run.model.declared("model_source")  # (a saved model's path and hash: what ran)
    source = source(**run.model.options) if callable(source) else None
    return {
        **job_record(run, strategy.name, strategy.world_size),
        "accelerator": strategy.accelerator,
        "degrees": strategy.topology.degrees,
        "placement": placement,
        **({"model_source": source} if source else {}),
    }


def collect(run: Experiment, trainer: Trainer) -> dict:
    """The completed run's figures (collective: every rank gathers its memory figures to all);
    the loggers get the hyper-parameters with the final metrics."""
    strategy, model = trainer.strategy, trainer.model
    peaks = all_gather_object(peak_memory_bytes(strategy.device))
    states = all_gather_object(trainer.model_state_bytes)
    trainable = local_trainable(model) if model is not None else None
    held = all_gather_object(trainable)
    predicted = None
    if model is not None:
        predicted = _predicted_state(strategy, model, trainable, optimizer_state_bytes(run.optimizer.node))
    if predicted is not None:  # (the same on every rank, but a pipeline's stages and adapters: the largest)
        predicted = max(all_gather_object(predicted))
    shares = source_shares(trainer)
    if shares and trainer.is_global_zero:  # corpora mixed: each one's share of the samples trained on
        trainer.log_metrics({f"train/share/{name}": share for name, share in shares.items()})
    final = {k: v for k, v in trainer.logged_metrics.items() if "/" in k}
    hparams = flatten({k: v for k, v in run.config.items() if k != "output_dir"})
    for logger in trainer.loggers:
        logger.log_hparams(hparams, final)
    comm, pipeline = strategy.comm_stats(), _pipeline(strategy)
    return {
        **({"comm": comm} if comm else {}),
        **({"pipeline": pipeline} if pipeline else {}),
        "status": "diverged" if trainer.diverged else "completed",
        "diverged": trainer.diverged,
        "global_batch_size": trainer.global_batch_size,
        "epochs": trainer.state.epochs_run,
        "steps": trainer.global_step,
        "metrics": dict(trainer.logged_metrics),
        **({"data": {"shares": shares}} if shares else {}),
        "throughput": _tokens(throughput(trainer.step_times, trainer.train_samples), run.datamodule.get("seq_len")),
        "memory": {
            "peak_bytes_per_rank": peaks,
            "model_state_bytes_per_rank": [s["total"] if s else None for s in states],
            "predicted_model_state_bytes": predicted,
            "parameters": _parameters(strategy, model) if model is not None else None,
            "trainable_parameters_per_rank": held,
            "optimizer_state_bytes_per_rank": [s["optimizer"] if s else None for s in states],
        },
    }


def _predicted_state(strategy, model, held: int, k: int) -> Optional[float]:
    """This rank's model state as the plan predicts it, ``k`` optimizer bytes a parameter (adapters: the
    weights of the whole model, QLoRA's base in NF4, gradients and optimizer state for the ``held`` ones
    this rank trains)."""
    plain = strategy.unwrap(model)
    layout = (strategy.topology, plain, strategy.options)
    settings = getattr(plain, "adapter_settings", None)
    if settings is None:
        trained = sum(whole_numel(p) for p in model.parameters() if p.requires_grad)
        return type(strategy).predict_model_state_bytes(trained, k, *layout)
    params = sum(whole_numel(p) for p in model.parameters())
    packed = bytes_saved(plain) if settings.quantize else 0
    return type(strategy).predict_adapted_state_bytes(params, held, k, *layout, packed=packed)


def local_trainable(model) -> int:
    """The trainable parameters this rank holds (a sharded one's local part)."""
    return sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in model.parameters() if p.requires_grad)


def source_shares(trainer: Trainer) -> dict | None:
    """A datamodule of corpora mixed: each corpus's share of the samples the run trained on, from the
    positions of every epoch's order it reached (``source_shares``)."""
    shares_of = getattr(trainer.datamodule, "source_shares", None)
    st, per_batch = trainer.state, trainer.loaders.micro_batch_global_size
    if not callable(shares_of) or not per_batch:
        return None
    epochs = [(e, trainer.num_training_batches * per_batch) for e in range(st.current_epoch)]
    return shares_of(trainer.seed, [*epochs, (st.current_epoch, st.batch_in_epoch * per_batch)])


def _parameters(strategy: Strategy, model) -> int:
    """The whole model's parameters (collective): a sharded parameter's numel() is its full size;
    a pipeline's stages are summed (one rank of each: the first pipeline's)."""
    counts = all_gather_object(sum(whole_numel(p) for p in model.parameters()))
    t = strategy.topology
    return sum(counts[s * t.data_parallel_size * t.tp] for s in range(t.pp))


def _pipeline(strategy: Strategy) -> dict | None:
    """The pipeline's figures, its measured bubble the mean over the ranks (collective)."""
    stats = strategy.pipeline_stats()
    if stats is None:
        return None
    measured = [m for m in all_gather_object(stats["bubble_measured"]) if m is not None]
    return {**stats, "bubble_measured": sum(measured) / len(measured) if measured else None}
