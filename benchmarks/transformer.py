"""The built-in transformer (model=gpt) on this machine, side by side in one run:

    OMP_NUM_THREADS=1 python benchmarks/transformer.py [--steps 30] [--repeats 3]

1. tokens/s of the engine on one device against a hand-written torch loop of the same model,
   optimizer and data (batches of datamodule.text windows through a standard DataLoader);
2. tokens/s of strategy=tp on 2 gloo ranks against a hand-written DTensor tensor-parallel loop:
   the same model split by the same plan (GPT.parallelize_plan, sequence parallel) with
   torch's parallelize_module, the same optimizer and batches.

Each figure is global batch x seq_len / median step time, the median over repeats that alternate
between the two sides (machine noise hits both alike); the ratio is engine / hand (target >= 0.95).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread per rank, set before torch loads

import argparse
import logging
import statistics
import tempfile

import torch
import torch.distributed as dist
from hand_loop import median_step_time
from timed_run import TIMED_RUN
from torch.utils.data import DataLoader

from framework import compose, fit
from framework.config.environment import free_port

BATCH, SEQ = 16, 128
RUN = [
    "experiment=gpt_text",
    "datamodule.batch_size=16",
    "datamodule.seq_len=128",
    "trainer.gradient_clip_val=null",
    *TIMED_RUN,
    "trainer.accelerator=cpu",
]


def engine_tokens_per_s(overrides: list[str], steps: int, out: str) -> float:
    results = fit(compose(RUN + [f"trainer.max_steps={steps}", *overrides]), output_dir=out)
    return BATCH * SEQ / (results["throughput"]["step_time_ms_median"] / 1e3)


def _model_and_data(batch: int):
    from framework.data import TextDataModule
    from framework.models import GPT

    dm = TextDataModule(batch_size=batch, seq_len=SEQ)
    dm.setup("fit")
    torch.manual_seed(0)
    model = GPT(256, dim=256, n_layers=4, n_heads=8, n_kv_heads=4, ffn_hidden=512, max_seq_len=SEQ)
    return model, dm


def _hand(rank: int, world: int, port: int, steps: int, out: str) -> None:
    """One rank of the hand-written loop: the model whole (world 1) or split by its plan (world 2)."""
    torch.set_num_threads(1)
    model, dm = _model_and_data(BATCH)
    if world > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import parallelize_module

        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
        parallelize_module(model, mesh, model.parallelize_plan(sequence_parallel=True))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    # every rank of a tensor-parallel group reads the same batches
    loader = DataLoader(dm.train_set, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(0))
    median = median_step_time(model, optimizer, loader, steps)
    if rank == 0:
        with open(out, "w") as f:
            f.write(str(median))
    if world > 1:
        dist.destroy_process_group()


def hand_tokens_per_s(world: int, steps: int, tmp: str) -> float:
    path = os.path.join(tmp, f"hand{world}.txt")
    torch.multiprocessing.spawn(_hand, args=(world, free_port(), steps, path), nprocs=world, join=True)
    return BATCH * SEQ / float(open(path).read())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.disable(logging.INFO)
    figures = {"single": [], "hand single": [], "tp": [], "hand tp": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            figures["single"].append(engine_tokens_per_s(["strategy=single"], args.steps, f"{tmp}/s{r}"))
            figures["hand single"].append(hand_tokens_per_s(1, args.steps, tmp))
            figures["tp"].append(engine_tokens_per_s(["strategy=tp", "trainer.devices=2"], args.steps, f"{tmp}/t{r}"))
            figures["hand tp"].append(hand_tokens_per_s(2, args.steps, tmp))
    med = {k: statistics.median(v) for k, v in figures.items()}
    print(
        f"model=gpt (2.5M parameters), batches of {BATCH} x {SEQ} tokens, {args.steps} steps x {args.repeats} "
        "repeats, 1 thread per rank; tokens/s, median (min-max)"
    )
    for engine, hand in (("single", "hand single"), ("tp", "hand tp")):
        print(
            f"  {engine:<6} engine {med[engine]:9.0f} ({min(figures[engine]):.0f}-{max(figures[engine]):.0f})   "
            f"hand {med[hand]:9.0f} ({min(figures[hand]):.0f}-{max(figures[hand]):.0f})   "
            f"engine / hand = {med[engine] / med[hand]:.3f}  (target >= 0.95)"
        )


if __name__ == "__main__":
    main()
