"""One rank's whole job: seed, build, fit, test, and results.json (rank 0)."""
from __future__ import annotations

import logging
import time
import traceback
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from framework.build import build_components
from framework.config.relocate import relocate
from framework.config.schemas import TrainerConfig
from framework.engine.checkpoint import resolve_ckpt_path
from framework.engine.loop import Trainer
from framework.engine.transfer import apply_init
from framework.engine.results import peak_memory_bytes, throughput, write_json
from framework.engine.seed import seed_everything, set_deterministic
from framework.launch.rank_logging import configure_rank_logging
from framework.strategies import RankEnv, build_strategy

log = logging.getLogger(__name__)


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


def _predicted_state(cfg: DictConfig, strategy, trainer) -> float | None:
    """The planner's per-rank model-state prediction for this job (report: predicted vs measured)."""
    from framework.plan import optimizer_state_bytes, predict_model_state_bytes

    if trainer.model is None:
        return None
    params = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    shard = None
    if strategy.name == "hsdp":
        from framework.strategies.hsdp import mesh_shape

        shard = mesh_shape({"devices": strategy.env.local_world_size,
                            "num_nodes": strategy.world_size // strategy.env.local_world_size}, strategy.options)[1]
    return predict_model_state_bytes(params, strategy.name, strategy.data_parallel_world(),
                                     optimizer_state_bytes(cfg), shard)


def run(cfg: DictConfig, env: RankEnv = RankEnv()) -> dict:
    """Train and/or test the experiment ``cfg`` (resolved, validated) on this rank; return its results."""
    start = time.perf_counter()
    container = OmegaConf.to_container(cfg, resolve=True)
    strategy = build_strategy(container, env)
    strategy.setup_environment()
    if strategy.distributed and env.world_size > 1:
        # Under torchrun every rank composed its own config; rank 0's directory is the job's,
        # and every path derived from the others' scratch directories follows it.
        job_dir = strategy.broadcast_object(str(cfg.output_dir))
        container = relocate(container, str(cfg.output_dir), job_dir)
        cfg = OmegaConf.create(container)
        configure_rank_logging(job_dir, env.rank)
    trainer_cfg = TrainerConfig(**container["trainer"])
    results = {
        "status": "running",
        "experiment": cfg.name,
        "strategy": strategy.name,
        "accelerator": strategy.accelerator,
        "devices": trainer_cfg.devices,
        "num_nodes": trainer_cfg.num_nodes,
        "world_size": env.world_size,
        "precision": trainer_cfg.precision,
    }
    trainer = None
    loggers: list = []
    results["output_dir"] = str(cfg.output_dir)
    try:
        seed = seed_everything(cfg.seed)
        set_deterministic(trainer_cfg.deterministic)
        results["seed"] = seed
        parts = build_components(cfg, strategy.is_global_zero)
        init = cfg.get("init") or {}
        if init.get("weights") or init.get("freeze"):
            results["init"] = apply_init(parts.model, init.get("weights"), init.get("strict", False),
                                         list(init.get("reset") or []), list(init.get("freeze") or []))
        loggers = parts.loggers
        trainer = Trainer(trainer_cfg, strategy, parts.task, loggers, parts.callbacks, seed=seed,
                          output_dir=str(cfg.output_dir))
        loggers = trainer.loggers  # fast_dev_run drops them
        ckpt = resolve_ckpt_path(str(cfg.ckpt_path), str(cfg.output_dir)) if cfg.get("ckpt_path") else None
        t0 = time.perf_counter()
        if cfg.train:
            trainer.fit(parts.model, parts.datamodule, parts.optimizer_factory, parts.scheduler, ckpt_path=ckpt)
        t1 = time.perf_counter()
        if cfg.test:
            if cfg.train:
                trainer.test(parts.datamodule)
            else:  # evaluation only: the checkpoint's weights (or the model as built)
                trainer.test(parts.datamodule, model=parts.model, ckpt_path=ckpt)
        # Where the rank's time went; the sweep report subtracts them from the sweep's wall time.
        results.update(fit_time_s=t1 - t0, test_time_s=time.perf_counter() - t1)
        if cfg.get("export_weights") and trainer.model is not None:
            # Collective: every rank takes part in gathering sharded weights; rank 0 writes.
            weights = strategy.full_state_dict(trainer.model)
            if strategy.is_global_zero:
                torch.save(weights, Path(cfg.output_dir) / "model.pt")
        peaks = strategy.all_gather_object(peak_memory_bytes(strategy.device))
        states = strategy.all_gather_object(trainer.model_state_bytes)
        results.update(
            status="completed",
            global_batch_size=trainer.global_batch_size,
            epochs=trainer.epochs_run,
            steps=trainer.global_step,
            metrics=dict(trainer.logged_metrics),
            throughput=throughput(trainer.step_times, trainer.train_samples),
            memory={"peak_bytes_per_rank": peaks,
                    "model_state_bytes_per_rank": [s["total"] if s else None for s in states],
                    "predicted_model_state_bytes": _predicted_state(cfg, strategy, trainer),
                    # a sharded parameter's numel() is its full size
                    "parameters": sum(p.numel() for p in trainer.model.parameters()) if trainer.model else None},
        )
        final = {k: v for k, v in trainer.logged_metrics.items() if "/" in k}
        for logger in loggers:
            logger.log_hparams(flatten({k: v for k, v in container.items() if k != "output_dir"}), final)
        return results
    except BaseException as err:
        results.update(status="failed", error=f"{type(err).__name__}: {err}", failed_rank=env.rank,
                       traceback=traceback.format_exc())
        log.error("rank %d failed: %s", env.rank, results["error"])
        raise
    finally:
        results["wall_time_s"] = time.perf_counter() - start
        for logger in loggers:
            logger.finalize(results["status"])
        if strategy.is_global_zero:
            write_json(Path(cfg.output_dir) / "results.json", results)
        strategy.teardown()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
