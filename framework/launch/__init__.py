"""How ranks start. One process: in this process. (Multi-process launchers: see the strategies.)"""
from __future__ import annotations

from omegaconf import DictConfig

from framework.run import run
from framework.strategies import RankEnv


def launch(cfg: DictConfig) -> dict:
    """Run the resolved, validated ``cfg`` on every rank it needs; return rank 0's results."""
    return run(cfg, RankEnv())
