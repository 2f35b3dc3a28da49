"""Per-step overhead of the engine vs a hand-written torch loop, side by side in one run.

    python benchmarks/overhead.py [--steps 200] [--repeats 7] [--threads 1] [--accelerator cpu|cuda]

Both sides train the same model (same init) on the same in-memory data through a
DataLoader of the same batch size, on one CPU thread (``--accelerator cuda``: on the GPU,
fp32, pinned memory and non-blocking copies on both sides). A step is timed from the end of
the previous step (so data loading counts on both sides); each repeat reports the median
step time; the ratio is the median over the repeats of engine / hand loop (min-max beside it),
the repeats alternating between the sides so that machine noise hits both alike. The hand loop
reads torch's TensorDataset through a standard DataLoader (a __getitem__ per sample and
default_collate); the engine's datasets gather a whole batch in one index (``__getitems__``).

Engine variants:
- bare: no loggers, no callbacks (the loop itself);
- default: the default experiment's loggers (TensorBoard + CSV, logging every 50 steps)
  and callbacks (progress bar, printing to /dev/null).

The ``tiny-mlp-f1`` row declares ``task.metrics`` (macro F1) with ``task.train_metrics``: the
hand loop then updates the same torchmetrics object and computes the accuracy every step.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import logging
import os
import statistics
import sys
import tempfile

import torch
from hand_loop import median_step_time
from hydra.utils import instantiate
from omegaconf import OmegaConf
from torch.utils.data import DataLoader, TensorDataset

from framework import build_trainer, compose
from framework.config.experiment import Experiment
from framework.rank.build import build_components

MODELS = {
    # name: overrides of the default experiment
    "tiny-mlp": [
        "model=mlp",
        "model.hidden_sizes=[64]",
        "datamodule=synthetic",
        "datamodule.input_shape=[64]",
        "datamodule.num_samples=16384",
        "datamodule.batch_size=32",
    ],
    "cnn-32x32": [
        "model=cnn",
        "model.channels=[32,64]",
        "datamodule=synthetic",
        "datamodule.input_shape=[3,32,32]",
        "datamodule.num_samples=16384",
        "datamodule.batch_size=64",
    ],
}
MODELS["tiny-mlp-f1"] = MODELS["tiny-mlp"] + [
    "task.train_metrics=true",
    "task.metrics={f1: {_target_: torchmetrics.classification.MulticlassF1Score, num_classes: 10, average: macro}}",
]


def hand_loop(cfg, steps: int) -> float:
    """What a user writes by hand; returns the median step time (s)."""
    torch.manual_seed(cfg.seed)
    container = OmegaConf.to_container(cfg, resolve=True)
    parts = build_components(Experiment.of(cfg), is_global_zero=False)
    dm, model = parts.datamodule, parts.model
    dm.setup("fit")
    cuda = container["trainer"]["accelerator"] == "cuda"
    device = torch.device("cuda") if cuda else None
    model = model.to(device) if cuda else model
    optimizer = parts.optimizer_factory(model.parameters())
    # A standard DataLoader over torch's own TensorDataset (the same samples): one __getitem__
    # per sample and default_collate, as users write it (the engine gathers whole batches).
    standard = TensorDataset(*dm.train_set.tensors)
    loader = DataLoader(
        standard, batch_size=container["datamodule"]["batch_size"], shuffle=True, drop_last=True, pin_memory=cuda
    )
    metrics = [instantiate(node).to(device or "cpu") for node in (container["task"].get("metrics") or {}).values()]
    return median_step_time(model, optimizer, loader, steps, device, metrics)


def engine(cfg, steps: int, with_defaults: bool, out_dir: str) -> float:
    overrides = {
        "trainer": {
            "max_steps": steps,
            "max_epochs": 1,
            "limit_val_batches": 0,
            "enable_progress_bar": with_defaults,
            "log_every_n_steps": 50,
        },
        "output_dir": out_dir,
    }
    cfg = OmegaConf.merge(cfg, overrides)
    if not with_defaults:
        cfg.logger, cfg.callbacks = None, None
    trainer, parts = build_trainer(cfg)
    with contextlib.redirect_stderr(io.StringIO()):
        trainer.fit(parts.model, parts.datamodule, parts.optimizer_factory)
    for logger in parts.loggers:
        logger.finalize("completed")
    assert trainer.global_step == steps, (trainer.global_step, steps, trainer.num_training_batches)
    return statistics.median(trainer.step_times)


def _ratios(side: list[float], hand: list[float]) -> str:
    """Median of the per-repeat ratios side / hand, with their min and max."""
    ratios = sorted(a / b for a, b in zip(side, hand))
    return f"{statistics.median(ratios):.3f} ({ratios[0]:.2f}-{ratios[-1]:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--accelerator", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging.disable(logging.INFO)
    where = torch.cuda.get_device_name(0) if args.accelerator == "cuda" else f"{args.threads} CPU thread(s)"
    print(
        f"torch {torch.__version__}, {where}, {args.steps} steps x {args.repeats} repeats, "
        f"median step time per repeat, then median over repeats"
    )
    print(
        f"{'model':<10} {'hand loop ms':>12} {'engine ms':>10} {'bare ratio (min-max)':>22} {'+defaults ms':>13} "
        f"{'defaults ratio (min-max)':>26}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            cfg = compose(
                [
                    "experiment=digits_cnn",
                    "scheduler=none",
                    "trainer.enable_progress_bar=false",
                    f"trainer.accelerator={args.accelerator}",
                    *MODELS[name],
                ]
            )
            hand, bare, full = [], [], []
            engine(cfg, 20, False, tmp)  # warm-up: first-call costs (allocator, kernels)
            sides = [
                # called within this iteration only: the loop's cfg and name are the ones meant
                (hand, lambda r: hand_loop(cfg, args.steps)),  # noqa: B023
                (bare, lambda r: engine(cfg, args.steps, False, os.path.join(tmp, f"{name}-bare-{r}"))),  # noqa: B023
                (full, lambda r: engine(cfg, args.steps, True, os.path.join(tmp, f"{name}-full-{r}"))),  # noqa: B023
            ]
            for r in range(args.repeats):
                # Rotate which side goes first, and collect the previous run's garbage
                # outside the timed region, so neither side pays for the other.
                for results, measure in sides[r % 3 :] + sides[: r % 3]:
                    gc.collect()
                    results.append(measure(r))
            h, b, f = (statistics.median(v) * 1e3 for v in (hand, bare, full))
            print(f"{name:<10} {h:>12.3f} {b:>10.3f} {_ratios(bare, hand):>22} {f:>13.3f} {_ratios(full, hand):>26}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
