"""What a rank's job reports in results.json (rank 0 writes it): the job's fields whatever its
outcome, and a completed run's figures."""
from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from framework.engine.memory import optimizer_state_bytes
from framework.engine.results import job_record, peak_memory_bytes, throughput
from framework.engine.trainer import Trainer
from framework.strategies import Strategy
from framework.strategies.collectives import all_gather_object


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


def _tokens(figures: dict, cfg: DictConfig) -> dict:
    """A language model's throughput in tokens too: samples (windows) x ``datamodule.seq_len``."""
    seq_len = OmegaConf.select(cfg, "datamodule.seq_len", default=None)
    if isinstance(seq_len, int) and figures.get("samples_per_s"):
        figures["tokens_per_s"] = figures["samples_per_s"] * seq_len
    return figures


def job_fields(cfg: DictConfig, strategy: Strategy) -> dict:
    """What results.json says of the job whatever its outcome."""
    container = OmegaConf.to_container(cfg, resolve=True)
    return {**job_record(container, strategy.name, strategy.world_size), "accelerator": strategy.accelerator}


def collect(cfg: DictConfig, trainer: Trainer) -> dict:
    """The completed run's figures (collective: every rank gathers its memory figures to all);
    the loggers get the hyper-parameters with the final metrics."""
    strategy, model = trainer.strategy, trainer.model
    peaks = all_gather_object(peak_memory_bytes(strategy.device))
    states = all_gather_object(trainer.model_state_bytes)
    predicted = None
    if model is not None:
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        predicted = type(strategy).predict_model_state_bytes(trainable, optimizer_state_bytes(cfg.optimizer),
                                                             strategy.topology, strategy.unwrap(model), strategy.options)
    final = {k: v for k, v in trainer.logged_metrics.items() if "/" in k}
    hparams = flatten({k: v for k, v in OmegaConf.to_container(cfg, resolve=True).items() if k != "output_dir"})
    for logger in trainer.loggers:
        logger.log_hparams(hparams, final)
    comm = strategy.comm_stats()
    return {
        **({"comm": comm} if comm else {}),
        "status": "diverged" if trainer.diverged else "completed", "diverged": trainer.diverged,
        "global_batch_size": trainer.global_batch_size, "epochs": trainer.state.epochs_run,
        "steps": trainer.global_step, "metrics": dict(trainer.logged_metrics),
        "throughput": _tokens(throughput(trainer.step_times, trainer.train_samples), cfg),
        "memory": {"peak_bytes_per_rank": peaks,
                   "model_state_bytes_per_rank": [s["total"] if s else None for s in states],
                   "predicted_model_state_bytes": predicted,
                   # a sharded parameter's numel() is its full size
                   "parameters": sum(p.numel() for p in model.parameters()) if model is not None else None},
    }
