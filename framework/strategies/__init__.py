"""Strategies by name, and the topology check that runs before any process starts."""
from __future__ import annotations

from framework.config.schemas import STRATEGY_SCHEMAS
from framework.strategies.base import RankEnv, Strategy, resolve_accelerator
from framework.strategies.single import SingleDeviceStrategy

STRATEGIES: dict[str, type[Strategy]] = {
    "single": SingleDeviceStrategy,
}


def strategy_class(options: dict, trainer: dict) -> type[Strategy]:
    """The class for ``strategy.name``; ``auto`` picks single for one process, else ddp."""
    name = options.get("name", "auto")
    if name == "auto":
        total = trainer.get("devices", 1) * trainer.get("num_nodes", 1)
        name = "single" if total == 1 or "ddp" not in STRATEGIES else "ddp"
    return STRATEGIES[name]


def check_strategy(cfg: dict, problems: list[str]) -> None:
    """Topology checks: strategy name and options, accelerator, devices, batch divisibility."""
    from framework.config.validate import check_schema

    options = cfg.get("strategy") or {}
    trainer = cfg.get("trainer") or {}
    name = options.get("name", "auto")
    valid = sorted(set(STRATEGY_SCHEMAS) | set(STRATEGIES))
    if name not in STRATEGY_SCHEMAS:
        problems.append(f"strategy.name: unknown strategy {name!r} (valid: {', '.join(valid)})")
        return
    check_schema(options, STRATEGY_SCHEMAS[name], "strategy", problems)
    if not isinstance(trainer.get("devices", 1), int) or not isinstance(trainer.get("num_nodes", 1), int):
        return  # already reported as a type error
    accelerator = trainer.get("accelerator", "auto")
    resolved = resolve_accelerator(accelerator) if isinstance(accelerator, str) else "cpu"
    import torch

    if resolved == "cuda" and not torch.cuda.is_available():
        problems.append("trainer.accelerator: 'cuda' requested but no CUDA device is available here "
                        "(valid here: auto, cpu)")
        return
    if resolved == "cuda" and trainer.get("devices", 1) > torch.cuda.device_count():
        problems.append(f"trainer.devices: {trainer.get('devices')} requested but only "
                        f"{torch.cuda.device_count()} CUDA device(s) are visible")
    if resolved == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        problems.append("trainer.accelerator: 'mps' requested but MPS is not available here (valid here: auto, cpu)")
        return
    cls = strategy_class(options, trainer)
    cls.check(trainer, options, resolved, problems)
    batch = (cfg.get("datamodule") or {}).get("batch_size")
    dp = cls.data_parallel_size(trainer, options)
    if isinstance(batch, int) and batch % dp:
        problems.append(f"datamodule.batch_size: the global batch {batch} does not divide across {dp} "
                        f"data-parallel ranks (trainer.devices={trainer.get('devices')} x "
                        f"trainer.num_nodes={trainer.get('num_nodes')}); use a multiple of {dp}")


def build_strategy(cfg: dict, env: RankEnv) -> Strategy:
    trainer = cfg["trainer"]
    cls = strategy_class(cfg["strategy"], trainer)
    return cls(dict(cfg["strategy"]), resolve_accelerator(trainer["accelerator"]), env)


__all__ = ["STRATEGIES", "RankEnv", "Strategy", "build_strategy", "check_strategy", "strategy_class"]
