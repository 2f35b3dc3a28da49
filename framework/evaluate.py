"""``framework-evaluate ckpt_path=<run dir>/checkpoints/<name> [group=option ...] [key=value ...]``

Tests a checkpoint's weights with the config its run saved (``<run dir>/config.yaml``), as a
Hydra app: groups and keys override it as in framework.train (``strategy=ddp
trainer.devices=2``, ``datamodule=...``), ``--cfg job`` prints the result, ``-m`` sweeps.
Writes to ``<run dir>/eval/<date>_<time>/`` (or ``hydra.run.dir=...``); the run's own files
are untouched.
"""
from __future__ import annotations

import datetime as _dt
import shutil
import sys
from typing import Iterable, Optional

import hydra
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from framework.config import ConfigError
from framework.config.overrides import lenient
from framework.config.relocate import relocate
from framework.console import console_entry, end_program
from framework.saved_run import EVALUATE_CONFIG, run_dir_of, saved_run_config

_HELP_FLAGS = ("--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc")


def evaluate(ckpt_path: str, overrides: Iterable[str] = (), output_dir: Optional[str] = None,
             mode: str = "eval") -> dict:
    """The Python API: test the checkpoint ``ckpt_path`` (``mode="predict"``: predict with it);
    returns the evaluation's results.json."""
    from framework.api import fit

    config_dir, args = saved_run_config(ckpt_path, list(overrides), mode)
    try:
        with initialize_config_dir(version_base="1.3", config_dir=config_dir, job_name="evaluate"):
            cfg = hydra_compose(EVALUATE_CONFIG, overrides=lenient(args))
    finally:
        shutil.rmtree(config_dir, ignore_errors=True)
    stamp = _dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
    output_dir = output_dir or str(run_dir_of(ckpt_path) / mode / stamp)
    return fit(_into(cfg, output_dir), output_dir=output_dir)


def _into(cfg: DictConfig, output_dir: str) -> DictConfig:
    """The saved config's paths under the run dir (loggers, checkpoints) moved to ``output_dir``."""
    container = relocate(OmegaConf.to_container(cfg, resolve=False), str(run_dir_of(cfg.ckpt_path)), output_dir)
    cfg = OmegaConf.create({**container, "ckpt_path": cfg.ckpt_path, "output_dir": output_dir})
    return cfg


@hydra.main(version_base="1.3", config_path=None, config_name=None)
def _hydra_main(cfg: DictConfig) -> Optional[float]:
    from framework.hydra_job import hydra_job  # here: it imports torch and the engine, which --help never needs

    return hydra_job(cfg, prepare=lambda c: _into(c, HydraConfig.get().runtime.output_dir))


def main(mode: str = "eval", usage: str = __doc__) -> None:
    args = sys.argv[1:]
    ckpt = next((a.split("=", 1)[1] for a in args if a.startswith("ckpt_path=")), None)
    if ckpt is None:
        print(usage, file=sys.stderr)
        if not any(a.split("=")[0] in _HELP_FLAGS for a in args):
            print(f"ckpt_path: missing; name the checkpoint to {'test' if mode == 'eval' else 'predict with'}, "
                  "e.g. ckpt_path=outputs/<run>/checkpoints/best", file=sys.stderr)
            sys.exit(2)
        from framework.train import main as train_main  # the groups and keys that can be overridden

        return train_main()
    try:
        config_dir, rest = saved_run_config(ckpt, [a for a in args if not a.startswith("ckpt_path=")], mode)
    except ConfigError as err:
        print(err, file=sys.stderr)
        sys.exit(2)
    sys.argv[1:] = ["--config-dir", config_dir, "--config-name", EVALUATE_CONFIG, *rest]
    try:
        console_entry(_hydra_main)
    finally:
        shutil.rmtree(config_dir, ignore_errors=True)
    end_program()


if __name__ == "__main__":
    main()
