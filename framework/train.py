"""``python -m framework.train [overrides]``: compose with Hydra, validate, train, test."""
from __future__ import annotations

import logging
import sys
import tempfile

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from framework.config import ConfigError
from framework.config.overrides import lenient
from framework.job import run_job, set_job_fields
from framework.launch.env import detect_environment

log = logging.getLogger("framework.train")


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def _hydra_main(cfg: DictConfig) -> float | None:
    runtime = HydraConfig.get().runtime
    set_job_fields(cfg, runtime.output_dir, runtime.choices.get("experiment"))
    try:
        results = run_job(cfg)
    except ConfigError as err:
        log.error("%s", err)
        print(err, file=sys.stderr)
        sys.exit(2)
    # The value a Hydra sweeper optimises: the final validation loss when there is one.
    return results.get("metrics", {}).get("val/loss")


def main() -> None:
    """Console entry point: Hydra's command line, with typo'd keys reported by our validator."""
    sys.argv[1:] = lenient(sys.argv[1:])
    env = detect_environment()
    if env is not None and env.rank != 0:
        # Under torchrun/SLURM every rank runs this entry point. Only rank 0's Hydra run dir
        # is the job's (ranks agree on it in framework.run); the others get a scratch dir
        # instead of a directory per rank, and log under <job dir>/ranks/<r>/.
        scratch = tempfile.mkdtemp(prefix=f"framework-rank{env.rank}-")
        sys.argv += [f"hydra.run.dir={scratch}"]
    _hydra_main()


if __name__ == "__main__":
    main()
