"""``framework-train [group=option ...] [key=value ...]`` (or ``python -m framework.train``):
compose the experiment with Hydra, validate it, train, test. ``-m`` sweeps, ``--cfg job``
prints the composed config, ``--help`` lists the groups. ``hydra.run.dir=<a run> ckpt_path=last``
resumes that run with its own saved config (config.yaml), the command line's overrides on top."""

from __future__ import annotations

import shutil
import sys
from typing import Optional

import hydra
from omegaconf import DictConfig

from framework.cli.console import console_entry, end_program
from framework.config.location import HYDRA_CONFIG_PATH
from framework.job.saved_run_config import EVALUATE_CONFIG, resume_run_config, resumed_run_dir


@hydra.main(version_base="1.3", config_path=HYDRA_CONFIG_PATH, config_name="train")
def _hydra_main(cfg: DictConfig) -> Optional[float]:
    from framework.cli.hydra_job import hydra_job  # here: it imports torch and the engine, which --help never needs

    return hydra_job(cfg)


def main() -> None:
    args = sys.argv[1:]
    run_dir = resumed_run_dir(args)
    if run_dir is None:
        console_entry(_hydra_main)
        end_program()
        return
    # A resume in place composes the run's own config, not the default experiment: a checkpoint
    # of gpt_text resumes as gpt_text without the command line naming it again.
    ckpt = next(a.split("=", 1)[1] for a in args if a.lstrip("+").startswith("ckpt_path="))
    config_dir, rest = resume_run_config(run_dir, ckpt, [a for a in args if not a.lstrip("+").startswith("ckpt_path=")])
    print(
        f"Resuming the run in {run_dir} with its saved config.yaml (the command line's overrides on top)",
        file=sys.stderr,
    )
    sys.argv[1:] = ["--config-dir", config_dir, "--config-name", EVALUATE_CONFIG, *rest]
    try:
        console_entry(_hydra_main)
    finally:
        shutil.rmtree(config_dir, ignore_errors=True)
    end_program()


if __name__ == "__main__":
    main()
