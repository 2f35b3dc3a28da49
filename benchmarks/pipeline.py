"""Pipeline parallelism (strategy=pp) on the built-in transformer, side by side in one run:

    OMP_NUM_THREADS=1 python benchmarks/pipeline.py [--steps 30] [--repeats 3] [--schedule 1f1b]

tokens/s of strategy=pp on 2 gloo ranks (two stages, as many micro-batches as stages) against a
hand-written torch.distributed.pipelining loop of the same model cut at the same block, the same
schedule, optimizer and batches; and the engine's measured bubble (the share of each step a stage
spends outside its forward and backward) against the plan's (p - 1) / (m + p - 1).

Each figure is global batch x seq_len / median step time, the median over repeats that alternate
between the two sides; the ratio is engine / hand (target >= 0.95).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread per rank, set before torch loads

import argparse
import logging
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader
from transformer import BATCH, RUN, SEQ, _model_and_data

from framework import compose, fit
from framework.config.environment import free_port

STAGES = 2


def engine(schedule: str, steps: int, out: str) -> tuple[float, dict]:
    results = fit(
        compose(
            RUN + [f"trainer.max_steps={steps}", "strategy=pp", "trainer.devices=2", f"strategy.schedule={schedule}"]
        ),
        output_dir=out,
    )
    return BATCH * SEQ / (results["throughput"]["step_time_ms_median"] / 1e3), results["pipeline"]


def _stage(model, rank: int):
    """The model with the other stage's modules removed, by hand (blocks 0-1 | 2-3)."""
    blocks = list(model.layers)
    half = len(blocks) // STAGES
    for key in blocks[half:] if rank == 0 else blocks[:half]:
        del model.layers[key]
    if rank == 0:
        model.norm = model.output = None
    else:
        model.tok_embeddings = model.dropout = None
    return model


def _hand(rank: int, world: int, port: int, steps: int, schedule: str, out: str) -> None:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model, dm = _model_and_data(BATCH)
    stage = PipelineStage(_stage(model, rank), rank, STAGES, torch.device("cpu"))
    kind = ScheduleGPipe if schedule == "gpipe" else Schedule1F1B
    pipe = kind(
        stage,
        STAGES,
        loss_fn=lambda out, y: F.cross_entropy(out.flatten(0, 1), y.flatten()) / STAGES,
        scale_grads=False,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    loader = DataLoader(dm.train_set, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(0))
    times, t_prev = [], time.perf_counter()
    for i, (x, y) in enumerate(loader):
        if i >= steps:
            break
        if rank == 0:
            pipe.step(x)
        else:
            pipe.step(target=y, losses=[])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        now = time.perf_counter()
        times.append(now - t_prev)
        t_prev = now
    if rank == 0:
        with open(out, "w") as f:
            f.write(str(statistics.median(times[1:])))
    dist.destroy_process_group()


def hand(schedule: str, steps: int, tmp: str) -> float:
    path = os.path.join(tmp, "hand.txt")
    torch.multiprocessing.spawn(_hand, args=(STAGES, free_port(), steps, schedule, path), nprocs=STAGES, join=True)
    return BATCH * SEQ / float(open(path).read())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--schedule", default="1f1b", choices=["gpipe", "1f1b"])
    args = parser.parse_args()
    logging.disable(logging.INFO)
    figures, bubbles, predicted = {"pp": [], "hand": []}, [], None
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            tokens, pipeline = engine(args.schedule, args.steps, f"{tmp}/e{r}")
            figures["pp"].append(tokens)
            bubbles.append(pipeline["bubble_measured"])
            predicted = pipeline["bubble_predicted"]
            figures["hand"].append(hand(args.schedule, args.steps, tmp))
    med = {k: statistics.median(v) for k, v in figures.items()}
    print(
        f"model=gpt (2.5M parameters), {STAGES} stages, {args.schedule}, {STAGES} micro-batches of a batch of "
        f"{BATCH} x {SEQ} tokens, {args.steps} steps x {args.repeats} repeats, 1 thread per rank; tokens/s, "
        "median (min-max)"
    )
    print(
        f"  pp engine {med['pp']:9.0f} ({min(figures['pp']):.0f}-{max(figures['pp']):.0f})   hand "
        f"{med['hand']:9.0f} ({min(figures['hand']):.0f}-{max(figures['hand']):.0f})   engine / hand = "
        f"{med['pp'] / med['hand']:.3f}  (target >= 0.95)"
    )
    print(
        f"  bubble: measured {statistics.median(bubbles):.3f} ({min(bubbles):.3f}-{max(bubbles):.3f}), "
        f"plan {predicted:.3f}"
    )


if __name__ == "__main__":
    main()
