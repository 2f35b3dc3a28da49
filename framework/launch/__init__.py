"""How ranks start: in this process (1 rank), the elastic agent or spawn (N local ranks),
or joining an existing torchrun / SLURM group (the variables are already set)."""
from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from framework.launch.env import detect_environment
from framework.strategies import RankEnv, strategy_class


def launch(cfg: DictConfig) -> dict:
    """Run the resolved, validated ``cfg`` on every rank it needs; return rank 0's results."""
    from framework.launch.local import launch_elastic, launch_spawn
    from framework.run import run

    env = detect_environment()
    if env is not None:
        return run(cfg, env)  # this process is one rank of a launched job: join it
    container = OmegaConf.to_container(cfg, resolve=True)
    cls = strategy_class(container["strategy"], container["trainer"])
    nprocs = cls.processes_per_node(container["trainer"], container["strategy"])
    if nprocs == 1:
        return run(cfg, RankEnv())
    if cls.launcher == "spawn":
        return launch_spawn(container, nprocs)
    return launch_elastic(container, nprocs)
