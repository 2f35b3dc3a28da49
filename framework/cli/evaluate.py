"""``framework-evaluate ckpt_path=<run dir>/checkpoints/<name> [group=option ...] [key=value ...]``
``framework-evaluate model.path=<a model directory or .gguf> [group=option ...] [key=value ...]``
(``python -m framework.evaluate``; ``framework-predict`` is the same app in predict mode)

Tests a checkpoint's weights with the config its run saved (``<run dir>/config.yaml``), as a
Hydra app: groups and keys override it as in framework.train (``strategy=ddp
trainer.devices=2``, ``datamodule=...``), ``--cfg job`` prints the result, ``-m`` sweeps.
Writes to ``<run dir>/eval/<date>_<time>/`` (or ``hydra.run.dir=...``); the run's own files
are untouched. Without ckpt_path, a pretrained model as it is: experiment=hf_pretrained with the
model that model.path names ('harness.tasks=[stdlib_modules]' scores it; test=false skips the test
on Python's help text), written to outputs/eval/<date>/<time>/.
"""

from __future__ import annotations

import shutil
import sys
from typing import Optional

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from framework.cli.console import console_entry, end_program
from framework.config import ConfigError
from framework.job.saved_run_config import EVALUATE_CONFIG, MODES, evaluation_config, saved_run_config

PREDICT_USAGE = """``framework-predict ckpt_path=<run dir>/checkpoints/<name> [group=option ...] [key=value ...]``

Predicts with a checkpoint's weights and the config its run saved, as framework.evaluate
tests them: the task's ``predict_step`` (or the model) over the datamodule's
``predict_dataloader()`` (the built-in datamodules: the test split; ``datamodule=...`` and
its keys choose other data), on any strategy (``strategy=ddp trainer.devices=2``). Rank 0
writes the predictions in dataset order to ``<run dir>/predict/<date>_<time>/predictions.pt``
(``predict_format=csv``: predictions.csv); ``trainer.limit_predict_batches`` predicts a prefix.
Without ckpt_path, ``model.path=<a model directory or .gguf>`` predicts with that pretrained model as
it is (experiment=hf_pretrained), written to outputs/predict/<date>/<time>/.
"""
# where a model used as it is writes (a checkpoint's evaluation writes under its run)
_OUTPUT = {mode: f"outputs/{mode}/${{now:%Y-%m-%d}}/${{now:%H-%M-%S}}" for mode in ("eval", "predict")}
_HELP_FLAGS = ("--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc")


@hydra.main(version_base="1.3", config_path=None, config_name=None)
def _hydra_main(cfg: DictConfig) -> Optional[float]:
    from framework.cli.hydra_job import hydra_job  # here: it imports torch and the engine, which --help never needs

    return hydra_job(cfg, prepare=lambda c: evaluation_config(c, HydraConfig.get().runtime.output_dir))


def main(mode: str = "eval", usage: str = __doc__) -> None:
    args = sys.argv[1:]
    ckpt = next((a.split("=", 1)[1] for a in args if a.startswith("ckpt_path=")), None)
    if ckpt is None and any(a.lstrip("+").startswith("model.path=") for a in args):
        return _model_as_it_is(args, mode)
    if ckpt is None:
        print(usage.replace("``", ""), file=sys.stderr)  # (the docstring's markup is not the terminal's)
        if not any(a.split("=")[0] in _HELP_FLAGS for a in args):
            print(
                f"ckpt_path: missing; name the checkpoint to {'test' if mode == 'eval' else 'predict with'}, "
                "e.g. ckpt_path=outputs/<run>/checkpoints/best, or a pretrained model to use as it is: "
                "model.path=<a model directory or .gguf>",
                file=sys.stderr,
            )
            sys.exit(2)
        from framework.cli.train import main as train_main  # the groups and keys that can be overridden

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


def _model_as_it_is(args: list[str], mode: str) -> None:
    """No checkpoint, a model named: the pretrained model tested (or predicting) as it is, nothing trained
    (experiment=hf_pretrained unless the command line selects another; no optimizer, no scheduler)."""
    from framework.cli.train import _hydra_main as train_app

    composition = [] if any(a.lstrip("+").startswith("experiment=") for a in args) else ["experiment=hf_pretrained"]
    settings = [f"{key}={str(value).lower()}" for key, value in MODES[mode].items()]
    where = [] if any(a.startswith("hydra.run.dir=") for a in args) else [f"hydra.run.dir={_OUTPUT[mode]}"]
    sys.argv[1:] = [*composition, *settings, *where, *args]
    console_entry(train_app)
    end_program()


def predict() -> None:
    """``framework-predict``: the same app in predict mode."""
    main(mode="predict", usage=PREDICT_USAGE)
