"""How a job's ranks start: in this process (1 rank), the elastic agent or spawn (N local ranks,
launch/elastic.py and launch/spawn.py), or joining an existing torchrun / SLURM group (the
variables are already set)."""

from __future__ import annotations

from types import SimpleNamespace

from omegaconf import DictConfig, OmegaConf

from framework.config.environment import RankEnv, detect_environment
from framework.engine.signals import watch_parent
from framework.launch.main_module import forks_ranks
from framework.rank.run import run
from framework.strategies import STRATEGIES, resolve, selected_class


def launch(cfg: DictConfig) -> dict:
    """Run the resolved, validated ``cfg`` on every rank it needs; return rank 0's results."""
    env = detect_environment()
    if env is not None:  # this process is one rank of a launched job (torchrun, srun): join it
        watch_parent()
        return run(cfg, env)
    container = OmegaConf.to_container(cfg, resolve=True)
    cls, typed, topology = resolve(container)
    if topology.processes_per_node == 1:
        return run(cfg, RankEnv())
    start = cls.start_method(typed)
    if start == "spawn":
        from framework.launch.spawn import launch_spawn

        return launch_spawn(container, topology.processes_per_node)
    from framework.launch.elastic import launch_elastic

    return launch_elastic(container, topology.processes_per_node, fork=forks_ranks(container, start))


def start_ranks_early(cfg: DictConfig) -> None:
    """When ``cfg`` (composed, not yet validated) will start several local ranks through the
    elastic agent, start what forks them now, in parallel with validation. A guess from the
    raw config: when it is wrong (the config is invalid), an idle server process ends with
    this one."""
    if detect_environment() is not None:
        return
    try:
        devices = OmegaConf.select(cfg, "trainer.devices", default=None)
        options = {
            "name": OmegaConf.select(cfg, "strategy.name", default="auto"),
            "_target_": OmegaConf.select(cfg, "strategy._target_", default=None),
        }
        known = options["_target_"] or options["name"] in STRATEGIES or options["name"] == "auto"
        cls = selected_class(options, devices) if isinstance(devices, int) and devices > 1 and known else None
        start = cls and cls.start_method(
            SimpleNamespace(name=options["name"], start=OmegaConf.select(cfg, "strategy.start", default=None))
        )
    except Exception:  # a broken interpolation, a target that does not import: validation will say which
        return
    if start != "elastic" or not getattr(cls, "process_per_device", False):
        return
    if forks_ranks(OmegaConf.to_container(cfg, resolve=False), start):
        return  # the ranks will be forks of this process: no server to start
    from framework.launch.servers import start_fork_server

    start_fork_server(OmegaConf.to_container(cfg, resolve=False))
