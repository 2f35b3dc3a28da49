"""Strategies by name, and the topology check that runs before any process starts."""
from __future__ import annotations

from framework.config.schemas import StrategyConfig
from framework.strategies.base import RankEnv, Strategy, resolve_accelerator
from framework.strategies.ddp import DDPStrategy
from framework.strategies.ddp2 import DDP2Strategy
from framework.strategies.ddp_spawn import DDPSpawnStrategy
from framework.strategies.dp import DataParallelStrategy
from framework.strategies.fsdp import FSDPStrategy
from framework.strategies.hsdp import HSDPStrategy
from framework.strategies.single import SingleDeviceStrategy
from framework.strategies.zero import ZeroStrategy

STRATEGIES: dict[str, type[Strategy]] = {cls.name: cls for cls in (
    SingleDeviceStrategy, DataParallelStrategy, DDPStrategy, DDPSpawnStrategy, DDP2Strategy, ZeroStrategy,
    FSDPStrategy, HSDPStrategy)}
STRATEGY_SCHEMAS: dict[str, type] = {"auto": StrategyConfig, **{n: c.schema for n, c in STRATEGIES.items()}}


def strategy_class(options: dict, trainer: dict) -> type[Strategy]:
    """The class for ``strategy.name``; ``auto`` picks single for one process, else ddp."""
    name = options.get("name", "auto")
    if name == "auto":
        total = trainer.get("devices", 1) * trainer.get("num_nodes", 1)
        name = "single" if total == 1 else "ddp"
    return STRATEGIES[name]


def check_strategy(cfg: dict, problems: list[str]) -> None:
    """Topology checks: strategy name and options, accelerator, devices, launcher, batch divisibility."""
    import torch

    from framework.config.validate import check_schema
    from framework.launch.env import detect_environment

    options = cfg.get("strategy") or {}
    trainer = cfg.get("trainer") or {}
    name = options.get("name", "auto")
    if name not in STRATEGY_SCHEMAS:
        problems.append(f"strategy.name: unknown strategy {name!r} (valid: {', '.join(sorted(STRATEGY_SCHEMAS))})")
        return
    check_schema(options, STRATEGY_SCHEMAS[name], "strategy", problems)
    devices, nodes = trainer.get("devices", 1), trainer.get("num_nodes", 1)
    if not isinstance(devices, int) or not isinstance(nodes, int) or devices < 1 or nodes < 1:
        return  # already reported by the trainer schema
    accelerator = trainer.get("accelerator", "auto")
    resolved = resolve_accelerator(accelerator) if isinstance(accelerator, str) else "cpu"
    if resolved == "cuda" and not torch.cuda.is_available():
        problems.append("trainer.accelerator: 'cuda' requested but no CUDA device is available here "
                        "(valid here: auto, cpu)")
        return
    if resolved == "cuda" and devices > torch.cuda.device_count():
        problems.append(f"trainer.devices: {devices} requested but only "
                        f"{torch.cuda.device_count()} CUDA device(s) are visible")
    if resolved == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        problems.append("trainer.accelerator: 'mps' requested but MPS is not available here (valid here: auto, cpu)")
        return
    cls = strategy_class(options, trainer)
    cls.check(trainer, options, resolved, problems)

    expected = cls.processes_per_node(trainer, options) * nodes
    env = detect_environment()
    if env is not None and env.world_size != expected:
        problems.append(f"trainer.devices / trainer.num_nodes: strategy={cls.name} with trainer.devices={devices} x "
                        f"trainer.num_nodes={nodes} needs {expected} processes, but the launcher started "
                        f"WORLD_SIZE={env.world_size}")
    if env is None and nodes > 1:
        problems.append(f"trainer.num_nodes: {nodes} nodes must each be started by a launcher: "
                        f"torchrun --nnodes {nodes} --nproc-per-node {cls.processes_per_node(trainer, options)} "
                        "... -m framework.train ..., or srun under SLURM")
    if env is not None and cls.launcher == "spawn":
        problems.append(f"strategy={cls.name}: starts its own ranks with torch.multiprocessing.spawn; under "
                        "torchrun or SLURM use strategy=ddp")

    batch = (cfg.get("datamodule") or {}).get("batch_size")
    dp = cls.data_parallel_size(trainer, options)
    if isinstance(batch, int) and batch % dp:
        problems.append(f"datamodule.batch_size: the global batch {batch} does not divide across {dp} "
                        f"data-parallel ranks (trainer.devices={devices} x trainer.num_nodes={nodes}); "
                        f"use a multiple of {dp}")


def build_strategy(cfg: dict, env: RankEnv) -> Strategy:
    trainer = cfg["trainer"]
    cls = strategy_class(cfg["strategy"], trainer)
    return cls(dict(cfg["strategy"]), resolve_accelerator(trainer["accelerator"]), env, trainer["devices"])


__all__ = ["STRATEGIES", "STRATEGY_SCHEMAS", "RankEnv", "Strategy", "build_strategy", "check_strategy",
           "strategy_class"]
