"""One rank's whole job: set up (process group, run directory, components), fit and test,
collect the results (rank 0 writes results.json), clean up."""
from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from framework.build import Components, build_trainer
from framework.config.relocate import relocate
from framework.distributed import RankEnv
from framework.engine.checkpoint_files import is_checkpoint, resolve_ckpt_path
from framework.engine.loop import Trainer
from framework.engine.predictions import write_predictions
from framework.engine.memory import optimizer_state_bytes
from framework.engine.results import job_record, peak_memory_bytes, throughput, write_results
from framework.engine import signals
from framework.engine.signals import StopSignals, stop_signals, watch_parent
from framework.engine.transfer import apply_init
from framework.strategies import Strategy, build_strategy
from framework.test_weights import record, test_checkpoint
from framework.timing_repeats import repeat_timing

log = logging.getLogger(__name__)
FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


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


def configure_rank_logging(output_dir: str, rank: int) -> None:
    """Rank 0 appends to the job's train.log (and prints), rank r writes ranks/<r>/train.log.
    Replaces this (launched) process's root handlers."""
    path = Path(output_dir) / "train.log" if rank == 0 else Path(output_dir) / "ranks" / str(rank) / "train.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    formatter = logging.Formatter(FORMAT.replace("[%(name)s]", f"[rank {rank}][%(name)s]"))
    handlers: list[logging.Handler] = [logging.FileHandler(path)]
    if rank == 0:
        handlers.append(logging.StreamHandler(sys.stdout))
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(logging.INFO)


def run_launched(container: dict, env: RankEnv) -> dict:
    """Entry of a rank that a local launcher (elastic agent, spawn) started: its own log, its
    share of the CPU threads, then the rank's job."""
    configure_rank_logging(container["output_dir"], env.rank)
    watch_parent()
    if "OMP_NUM_THREADS" not in os.environ:
        # N ranks on one CPU must not each start a thread per core (torchrun sets OMP_NUM_THREADS=1).
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // env.local_world_size))
    return run(OmegaConf.create(container), env)


def run(cfg: DictConfig, env: RankEnv = RankEnv()) -> dict:
    """Train and/or test the experiment ``cfg`` (resolved, validated) on this rank; return its results."""
    start = time.perf_counter()
    strategy = build_strategy(OmegaConf.to_container(cfg, resolve=True), env)
    strategy.setup_environment()
    cfg = _join_job_directory(cfg, strategy)
    results = _job_fields(cfg, strategy)
    trainer, parts, error = None, None, None
    try:
        with StopSignals(stop_signals(cfg.trainer.get("stop_on_sigusr1"))) as signals:
            trainer, parts = build_trainer(cfg, env, strategy)
            trainer.signals = signals
            results["seed"] = trainer.seed
            results.update(_fit_and_test(cfg, trainer, parts))
            results.update(_collect(cfg, trainer))
            if cfg.get("benchmark_repeats", 1) > 1 and cfg.train and not trainer.interrupted:
                results["throughput"] = repeat_timing(OmegaConf.merge(cfg, {"seed": trainer.seed}), env, strategy,
                                                      results["throughput"], _apply_init)
            if trainer.interrupted:  # still under the handlers: a duplicate signal must not kill the save
                results.update(_interrupted(cfg, trainer))
        return results
    except BaseException as err:
        error = err
        results.update(status="failed", error=f"{type(err).__name__}: {err}", failed_rank=env.rank,
                       traceback=traceback.format_exc())
        log.error("rank %d failed: %s", env.rank, results["error"])
        if env.world_size > 1 and _lost_peer(err):
            # A broken connection usually means a peer died. Exit a moment later, so that the
            # launcher sees that death first and names the rank that caused it, not this one.
            time.sleep(2.0)
        raise
    finally:
        results["wall_time_s"] = time.perf_counter() - start
        _cleanup(cfg, strategy, parts.loggers if parts else [], results, error)


def _lost_peer(err: BaseException) -> bool:
    text = str(err)
    return any(s in text for s in ("Connection reset by peer", "Connection closed by peer", "Connection refused",
                                   "Socket closed", "remote process exited", "Broken pipe"))


def _join_job_directory(cfg: DictConfig, strategy: Strategy) -> DictConfig:
    """Under torchrun every rank composed its own config; rank 0's directory is the job's, and
    every path derived from the others' scratch directories follows it."""
    if not (strategy.distributed and strategy.world_size > 1):
        return cfg
    job_dir = strategy.broadcast_object(str(cfg.output_dir))
    cfg = OmegaConf.create(relocate(OmegaConf.to_container(cfg, resolve=True), str(cfg.output_dir), job_dir))
    configure_rank_logging(job_dir, strategy.rank)
    return cfg


def _job_fields(cfg: DictConfig, strategy: Strategy) -> dict:
    """What results.json says of the job whatever its outcome."""
    container = OmegaConf.to_container(cfg, resolve=True)
    return {**job_record(container, strategy.name, strategy.world_size), "accelerator": strategy.accelerator}


def _fit_and_test(cfg: DictConfig, trainer: Trainer, parts: Components) -> dict:
    """Transfer-learning init, fit (or resume), test; the seconds each took."""
    out: dict = {}
    init = _apply_init(cfg, parts.model)
    if init is not None:
        out["init"] = init
    ckpt = _resume_point(cfg)
    t0 = time.perf_counter()
    if cfg.train:
        trainer.fit(parts.model, parts.datamodule, parts.optimizer_factory, parts.scheduler, ckpt_path=ckpt)
    t1 = time.perf_counter()
    if cfg.get("export_weights") and trainer.model is not None:
        # The final weights (before a test on best/last loads others). Collective: every rank
        # takes part in gathering sharded weights; rank 0 writes.
        weights = trainer.strategy.full_state_dict(trainer.model)
        if trainer.is_global_zero:
            torch.save(weights, Path(cfg.output_dir) / "model.pt")
    t2 = time.perf_counter()
    if cfg.test and not trainer.interrupted:
        if cfg.train:
            which, path = test_checkpoint(OmegaConf.to_container(cfg, resolve=True))
            trainer.test(parts.datamodule, ckpt_path=path)
            out["test_ckpt"] = record(which, path)
        else:  # evaluation only: the checkpoint's weights (or the model as built)
            trainer.test(parts.datamodule, model=parts.model, ckpt_path=ckpt)
    if cfg.get("predict") and not trainer.interrupted:
        out["predictions"] = _predict(cfg, trainer, parts, ckpt)
    # Where the rank's time went; the sweep report subtracts them from the sweep's wall time.
    out.update(fit_time_s=t1 - t0, test_time_s=time.perf_counter() - t2)
    return out


def _predict(cfg: DictConfig, trainer: Trainer, parts: Components, ckpt: Path | None) -> dict | None:
    """The predict loop on the weights just tested or trained (with neither: the checkpoint's,
    or the model as built); rank 0 writes them to predictions.<predict_format>."""
    fresh = trainer.model is None
    predictions = trainer.predict(parts.datamodule, model=parts.model if fresh else None,
                                  ckpt_path=ckpt if fresh else None)
    if predictions is None:  # the other ranks, or nothing to predict
        return None
    path = write_predictions(predictions, Path(cfg.output_dir), cfg.predict_format)
    samples = len(predictions if isinstance(predictions, torch.Tensor) else next(iter(predictions.values())))
    log.info("Wrote the predictions of %d samples to %s", samples, path)
    return {"path": str(path), "samples": samples}


def _apply_init(cfg: DictConfig, model) -> dict | None:
    """Transfer learning's initial weights, reset and frozen submodules (None: nothing to do)."""
    init = cfg.get("init") or {}
    if not (init.get("weights") or init.get("freeze")):
        return None
    return apply_init(model, init.get("weights"), init.get("strict", False), list(init.get("reset") or []),
                      list(init.get("freeze") or []))


def _resume_point(cfg: DictConfig) -> Path | None:
    """The checkpoint to resume from: ``ckpt_path``; after an elastic restart, this run's own
    ``last`` (the failed attempt's progress) when it has one."""
    ckpt = resolve_ckpt_path(str(cfg.ckpt_path), str(cfg.output_dir)) if cfg.get("ckpt_path") else None
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    own = resolve_ckpt_path("last", str(cfg.output_dir))
    if restart and is_checkpoint(own):
        log.warning("Restart %d: resuming from %s", restart, own)
        return own
    if ckpt is not None and not ckpt.exists():  # ckpt_path=last before any was written (a requeued job)
        log.warning("ckpt_path=last: no checkpoint in %s yet; starting from the beginning", ckpt.parent)
        return None
    return ckpt


def _collect(cfg: DictConfig, trainer: Trainer) -> dict:
    """The completed run's figures (collective: every rank gathers its memory figures to all)."""
    strategy, model = trainer.strategy, trainer.model
    peaks = strategy.all_gather_object(peak_memory_bytes(strategy.device))
    states = strategy.all_gather_object(trainer.model_state_bytes)
    predicted = None
    if model is not None:
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        predicted = type(strategy).predict_model_state_bytes(trainable, optimizer_state_bytes(cfg.optimizer),
                                                             strategy.topology)
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
        "throughput": throughput(trainer.step_times, trainer.train_samples),
        "memory": {"peak_bytes_per_rank": peaks,
                   "model_state_bytes_per_rank": [s["total"] if s else None for s in states],
                   "predicted_model_state_bytes": predicted,
                   # a sharded parameter's numel() is its full size
                   "parameters": sum(p.numel() for p in model.parameters()) if model is not None else None},
    }


def _interrupted(cfg: DictConfig, trainer: Trainer) -> dict:
    """A run stopped by a signal: ``last`` holds its final step (saved here unless a checkpoint
    callback did), and under SLURM with ``trainer.requeue`` the job requeues itself."""
    from framework.engine.checkpoint import save_checkpoint
    from framework.engine.checkpoint_files import saved_step

    strategy = trainer.strategy
    last = Path(cfg.output_dir) / "checkpoints" / "last"
    if strategy.broadcast_object(saved_step(last) if strategy.is_global_zero else None) != trainer.global_step:
        save_checkpoint(last, trainer)  # collective: every rank writes its shards
    name = signal.Signals(trainer.interrupted).name
    if strategy.is_global_zero:
        log.warning("Interrupted by %s at step %d; %s holds it: resume with ckpt_path=last", name,
                    trainer.global_step, last)
    out = {"status": "interrupted", "signal": name, "signal_number": trainer.interrupted, "checkpoint": str(last)}
    cause = signals.launcher_gone()
    if cause:
        out["cause"] = cause
    if trainer.interrupted == signal.SIGUSR1 and cfg.trainer.get("requeue") and strategy.is_global_zero:
        out["requeued"] = requeue()
    return out


def requeue() -> bool:
    """``scontrol requeue $SLURM_JOB_ID`` (FRAMEWORK_REQUEUE_COMMAND replaces it, e.g. in tests)."""
    job = os.environ.get("SLURM_ARRAY_JOB_ID", os.environ.get("SLURM_JOB_ID"))
    if job is None:
        log.warning("trainer.requeue: not inside a SLURM job (no SLURM_JOB_ID); not requeued")
        return False
    if "SLURM_ARRAY_TASK_ID" in os.environ:
        job = f"{job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    command = os.environ.get("FRAMEWORK_REQUEUE_COMMAND", "scontrol requeue {job_id}").format(job_id=job)
    done = subprocess.run(shlex.split(command), capture_output=True, text=True)
    log.log(logging.INFO if done.returncode == 0 else logging.ERROR, "Requeue (%s): exit %d %s", command,
            done.returncode, (done.stdout + done.stderr).strip())
    return done.returncode == 0


def _cleanup(cfg: DictConfig, strategy: Strategy, loggers: list, results: dict, error: BaseException | None) -> None:
    """Close loggers, write results.json (rank 0), leave the process group. Each step runs
    whatever the others did; an error here is logged, and raised only when the run itself did
    not fail already, so teardown never hides the error that ended the run."""
    first = None
    for logger in loggers:
        try:
            logger.finalize(results["status"])
        except Exception as err:  # noqa: BLE001 - reported here, raised below
            log.error("rank %d: %s.finalize failed: %s: %s", strategy.rank, type(logger).__name__,
                      type(err).__name__, err)
            first = first or err
    if first is not None and error is None:
        results.update(status="failed", error=f"{type(first).__name__} in a logger's finalize: {first}",
                       failed_rank=strategy.rank)
    for what, step in [("writing results.json", lambda: _write_results(cfg, strategy, results)),
                       ("leaving the process group", strategy.teardown)]:
        try:
            step()
        except Exception as err:  # noqa: BLE001
            log.error("rank %d: %s failed: %s: %s", strategy.rank, what, type(err).__name__, err)
            first = first or err
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if first is not None and error is None:
        raise first


def _write_results(cfg: DictConfig, strategy: Strategy, results: dict) -> None:
    if strategy.is_global_zero:
        write_results(Path(cfg.output_dir), results)
