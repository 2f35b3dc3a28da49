"""How long a checkpoint save stalls training, synchronous against in the background
(callbacks.model_checkpoint.async_save), on the built-in transformer, side by side in one run:

    OMP_NUM_THREADS=1 python benchmarks/checkpoint_stall.py [--steps 60] [--every 10] [--repeats 3]
        [--model model.dim=512 model.n_layers=6 ...]   (the model's size: a larger state to write)

A run saves every ``--every`` optimizer steps (the model, AdamW's state, the loop). Its stall is
the median wall time of the steps that ended with a save beyond the median step of a run that
saves nothing; its cost per save is all its time beyond that run's steps, over its saves (what
the background writing slows the next steps by counts there). Each figure is the median over
repeats that rotate the three runs' order (the machine's noise hits all alike). The ratio is the
stall in the background over the synchronous one (target <= 0.2).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread, set before torch loads

import argparse
import logging
import statistics
import tempfile
import time

from framework import compose, fit

RUN = [
    "experiment=gpt_text",
    "trainer.limit_val_batches=0",
    "test=false",
    "predict=false",
    "logger=none",
    "callbacks=model_checkpoint",
    "callbacks.model_checkpoint.monitor=null",
    "callbacks.model_checkpoint.save_top_k=1",
    "callbacks.model_checkpoint.every_n_epochs=null",
    "callbacks.model_checkpoint.filename='step{step}'",
    "+callbacks.step_times._target_=__main__.StepTimes",
    "trainer.enable_progress_bar=false",
    "trainer.accelerator=cpu",
    "trainer.max_epochs=1",
]


class StepTimes:
    """The wall time of each optimizer step, the callbacks' own work at its end included (this
    callback runs after model_checkpoint's save)."""

    ends: list[float] = []

    def on_train_step_end(self, trainer, loss) -> None:
        StepTimes.ends.append(time.perf_counter())


def step_times(steps: int, every: int, mode: str, model: list[str]) -> list[float]:
    """Seconds of each step from the second on, saving every ``every`` steps ``mode``: none,
    sync or async."""
    StepTimes.ends = []
    saves = (
        ["callbacks.model_checkpoint.every_n_train_steps=null"]
        if mode == "none"
        else [
            f"callbacks.model_checkpoint.every_n_train_steps={every}",
            f"callbacks.model_checkpoint.async_save={str(mode == 'async').lower()}",
        ]
    )
    with tempfile.TemporaryDirectory() as out:
        fit(compose([*RUN, *model, f"trainer.max_steps={steps}", *saves]), output_dir=out)
    return [b - a for a, b in zip(StepTimes.ends, StepTimes.ends[1:])]  # [i]: step i + 2


def figures(times: list[float], baseline: float, every: int) -> tuple[float, float]:
    """(the stall: median save step beyond the baseline step, the cost of a save: all the time
    beyond the baseline steps' over the saves, the background writing's slowdown included), ms."""
    saving = [t for i, t in enumerate(times) if (i + 2) % every == 0]
    return 1e3 * (statistics.median(saving) - baseline), 1e3 * (sum(times) - baseline * len(times)) / len(saving)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", nargs="*", default=[], help="overrides of the model (and data), key=value")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    modes = ("none", "sync", "async")
    stall: dict[str, list[float]] = {m: [] for m in modes[1:]}
    cost: dict[str, list[float]] = {m: [] for m in modes[1:]}
    for repeat in range(args.repeats):
        order = modes[repeat % 3 :] + modes[: repeat % 3]  # rotate which goes first
        times = {mode: step_times(args.steps, args.every, mode, args.model) for mode in order}
        baseline = statistics.median(times["none"][3:])  # after the first steps' warm-up
        for mode in modes[1:]:
            got = figures(times[mode], baseline, args.every)
            stall[mode].append(got[0])
            cost[mode].append(got[1])
    print(f"per save, {args.steps} steps saving every {args.every}, median of {args.repeats} (ms):")
    for mode in modes[1:]:
        print(
            f"  {mode:<6} stall {statistics.median(stall[mode]):8.1f}  {[round(v, 1) for v in stall[mode]]}   "
            f"cost {statistics.median(cost[mode]):8.1f}  {[round(v, 1) for v in cost[mode]]}"
        )
    ratio = statistics.median(stall["async"]) / statistics.median(stall["sync"])
    print(f"  stall ratio async / sync: {ratio:.3f} (target <= 0.2)")


if __name__ == "__main__":
    main()
