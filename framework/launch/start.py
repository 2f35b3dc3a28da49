"""How a job's ranks start: in this process (1 rank), the elastic agent or spawn (N local ranks,
launch/elastic.py and launch/spawn.py), or joining an existing torchrun / SLURM group (the
variables are already set)."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from framework.config.environment import RankEnv, detect_environment
from framework.config.experiment import Experiment
from framework.engine.signals import watch_parent
from framework.launch.main_module import forks_ranks, needs_main
from framework.rank.run import run as run_rank
from framework.strategies import layout_of, resolve


def launch(run: Experiment) -> dict:
    """Run the resolved, validated ``run`` on every rank it needs; return rank 0's results."""
    env = detect_environment()
    if env is not None:  # this process is one rank of a launched job (torchrun, srun): join it
        watch_parent()
        return run_rank(run, env)
    layout = resolve(run)
    processes = layout.topology.processes_per_node
    if processes == 1:
        return run_rank(run, RankEnv())
    if layout.start == "spawn":
        from framework.launch.spawn import launch_spawn

        return launch_spawn(run, processes)
    from framework.launch.elastic import launch_elastic

    return launch_elastic(run, processes, fork=forks_ranks(run, layout.start))


def start_ranks_early(cfg: DictConfig) -> None:
    """When ``cfg`` (composed, not yet validated) will start several local ranks through the
    elastic agent, start what forks them now, in parallel with validation. A guess from the
    raw config: when it is wrong (the config is invalid), an idle server process ends with
    this one."""
    if detect_environment() is not None:
        return
    try:  # the one resolution of a strategy (strategies/registry.py), on the raw config's strategy and devices
        trainer = {k: OmegaConf.select(cfg, f"trainer.{k}", default=1) for k in ("devices", "num_nodes")}
        strategy = OmegaConf.to_container(cfg.strategy, resolve=True) if "strategy" in cfg else {}
        layout = layout_of(strategy, trainer["devices"], trainer["num_nodes"])
    except Exception:  # a broken interpolation, a target that does not import: validation will say which
        return
    start = layout.start
    if layout.topology.processes_per_node < 2 or start != "elastic" or not layout.strategy.process_per_device:
        return
    raw = Experiment(OmegaConf.to_container(cfg, resolve=False))
    if forks_ranks(raw, start):
        return  # the ranks will be forks of this process: no server to start
    from framework.launch.servers import start_fork_server

    start_fork_server(needs_main(raw))
