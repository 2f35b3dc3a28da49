"""How ranks start: in this process (1 rank), the elastic agent or spawn (N local ranks),
or joining an existing torchrun / SLURM group (the variables are already set)."""
from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from framework.distributed import RankEnv, detect_environment
from framework.engine.signals import watch_parent
from framework.rank import run
from framework.strategies import STRATEGIES, resolve, strategy_class


def launch(cfg: DictConfig) -> dict:
    """Run the resolved, validated ``cfg`` on every rank it needs; return rank 0's results."""
    env = detect_environment()
    if env is not None:  # this process is one rank of a launched job (torchrun, srun): join it
        watch_parent()
        return run(cfg, env)
    container = OmegaConf.to_container(cfg, resolve=True)
    cls, _, topology = resolve(container)
    if topology.processes_per_node == 1:
        return run(cfg, RankEnv())
    from framework.launch.local import launch_elastic, launch_spawn

    if cls.launcher == "spawn":
        return launch_spawn(container, topology.processes_per_node)
    return launch_elastic(container, topology.processes_per_node)


def start_ranks_early(cfg: DictConfig) -> None:
    """When ``cfg`` (composed, not yet validated) will start several local ranks through the
    elastic agent, start what forks them now, in parallel with validation. A guess from the
    raw config: when it is wrong (the config is invalid), an idle server process ends with
    this one."""
    if detect_environment() is not None:
        return
    try:
        devices = OmegaConf.select(cfg, "trainer.devices", default=None)
        name = OmegaConf.select(cfg, "strategy.name", default="auto")
    except Exception:  # a broken interpolation: validation will say which
        return
    if not isinstance(devices, int) or devices < 2 or (name not in STRATEGIES and name != "auto"):
        return
    cls = strategy_class(name, devices)
    if cls.launcher != "elastic" or not cls.process_per_device:
        return
    from framework.launch.fork_server import start_fork_server

    start_fork_server(OmegaConf.to_container(cfg, resolve=False))
