"""``framework-train [group=option ...] [key=value ...]`` (or ``python -m framework.train``):
compose the experiment with Hydra, validate it, train, test. ``-m`` sweeps, ``--cfg job``
prints the composed config, ``--help`` lists the groups."""
from __future__ import annotations

from typing import Optional

import hydra
from omegaconf import DictConfig

from framework.config.location import HYDRA_CONFIG_PATH
from framework.cli.console import console_entry, end_program


@hydra.main(version_base="1.3", config_path=HYDRA_CONFIG_PATH, config_name="train")
def _hydra_main(cfg: DictConfig) -> Optional[float]:
    from framework.cli.hydra_job import hydra_job  # here: it imports torch and the engine, which --help never needs

    return hydra_job(cfg)


def main() -> None:
    console_entry(_hydra_main)
    end_program()


if __name__ == "__main__":
    main()
