"""Strategies by name: the registry, the check that runs before any process starts, and the factory."""
from __future__ import annotations

from framework.config.schemas import StrategyConfig
from framework.config.topology import (Topology, accelerator_problems, batch_problems, launch_problems)
from framework.config.validate import check_schema, known_valid_keys
from framework.distributed import RankEnv, detect_environment, resolve_accelerator
from framework.strategies.bagua import BaguaStrategy
from framework.strategies.base import Strategy
from framework.strategies.ddp import DDPStrategy
from framework.strategies.ddp2 import DDP2Strategy
from framework.strategies.ddp_spawn import DDPSpawnStrategy
from framework.strategies.dp import DataParallelStrategy
from framework.strategies.fsdp import FSDPStrategy
from framework.strategies.horovod import HorovodStrategy
from framework.strategies.hsdp import HSDPStrategy
from framework.strategies.single import SingleDeviceStrategy
from framework.strategies.zero import ZeroStrategy

STRATEGIES: dict[str, type[Strategy]] = {cls.name: cls for cls in (
    SingleDeviceStrategy, DataParallelStrategy, DDPStrategy, DDPSpawnStrategy, DDP2Strategy, ZeroStrategy,
    FSDPStrategy, HSDPStrategy, HorovodStrategy, BaguaStrategy)}


def strategy_class(name: str, devices: int = 1, num_nodes: int = 1) -> type[Strategy]:
    """The class for ``strategy.name``; ``auto`` picks single for one process, else ddp."""
    if name == "auto":
        name = "single" if devices * num_nodes == 1 else "ddp"
    return STRATEGIES[name]


def resolve(container: dict) -> tuple[type[Strategy], StrategyConfig, Topology]:
    """The strategy class, its typed options and the job's topology, from a resolved, valid config."""
    trainer = container["trainer"]
    options = dict(container.get("strategy") or {})
    cls = strategy_class(options.get("name", "auto"), trainer["devices"], trainer["num_nodes"])
    typed = cls.schema(**{**options, "name": cls.name})
    return cls, typed, cls.make_topology(trainer["devices"], trainer["num_nodes"], typed)


def check_strategy(container: dict) -> list[str]:
    """Strategy name and options, accelerator, topology against the launcher, batch divisibility."""
    problems: list[str] = []
    options = container.get("strategy") or {}
    trainer = container.get("trainer") or {}
    name = options.get("name", "auto")
    if name not in STRATEGIES and name != "auto":
        valid = ", ".join(sorted([*STRATEGIES, "auto"]))
        return [f"strategy.name: unknown strategy {name!r} (valid: {valid})"]
    devices, nodes = trainer.get("devices", 1), trainer.get("num_nodes", 1)
    cls = strategy_class(name, devices, nodes) if isinstance(devices, int) and isinstance(nodes, int) else None
    schema = cls.schema if cls and name != "auto" else StrategyConfig
    check_schema(options, schema, "strategy", problems)
    if cls is None or devices < 1 or nodes < 1:
        return problems  # bad devices / num_nodes are reported by the trainer schema
    # The remaining checks go on with the options that are valid (the others are reported above).
    options = known_valid_keys(options, schema)
    accelerator = trainer.get("accelerator", "auto")
    resolved = resolve_accelerator(accelerator) if isinstance(accelerator, str) else "cpu"
    missing = accelerator_problems(resolved, devices)
    if missing:
        return problems + missing
    try:
        _, typed, topology = resolve({**container, "strategy": options,
                                      "trainer": {**trainer, "devices": devices, "num_nodes": nodes}})
    except ValueError as err:  # the options cannot lay out these devices (hsdp's factors)
        return [str(err)]
    problems += cls.check(topology, typed, resolved)
    launched = detect_environment()
    problems += launch_problems(topology, cls.name, launched, cls.launcher == "spawn")
    if launched is not None and launched.launcher == "horovodrun" and getattr(typed, "backend", "") != "horovod":
        problems.append(f"strategy={cls.name}: horovodrun started this process, and only strategy=horovod "
                        "strategy.backend=horovod runs under it; start the others with torchrun, srun or python")
    problems += batch_problems(topology, (container.get("datamodule") or {}).get("batch_size"))
    return problems


def build_strategy(container: dict, env: RankEnv) -> Strategy:
    """The strategy of a resolved, validated config, for the rank ``env``."""
    cls, options, topology = resolve(container)
    trainer = container["trainer"]
    return cls(options, resolve_accelerator(trainer["accelerator"]), topology, env,
               trainer.get("accumulate_grad_batches", 1))


__all__ = ["STRATEGIES", "Strategy", "build_strategy", "check_strategy", "resolve", "strategy_class"]
