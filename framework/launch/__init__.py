"""How ranks start: in this process (1 rank), the elastic agent or spawn (N local ranks),
or joining an existing torchrun / SLURM group (the variables are already set)."""
from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from framework.distributed import RankEnv, detect_environment
from framework.engine.signals import watch_parent
from framework.rank import run
from framework.strategies import resolve


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
