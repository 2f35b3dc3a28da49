"""QLoRA's peak resident memory against LoRA's on the same model, side by side in one run:

    python benchmarks/qlora_memory.py [--steps 10] [--repeats 2]

A Llama of 46M parameters (hidden 768, 8 layers; saved with save_pretrained, loaded by path) with
adapters of rank 16 on its attention, trained ``--steps`` steps on the shipped instruction set
(batches of 8 windows of 256 bytes), each run a fresh process (``framework-train``, one device), the
two alternating. Each figure is the process's peak resident memory (results.json), the median over
the repeats; the ratio QLoRA / LoRA is what 4-bit base weights save at this size (the process's own
~0.5 GB of libraries included).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from timed_run import TIMED_RUN


def save_llama(directory: Path) -> None:
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=8,
        num_attention_heads=12,
        num_key_value_heads=4,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(directory)


def peak_mib(model: Path, adapter: str, steps: int, out: Path) -> float:
    run = [
        "experiment=hf_lora_instructions",
        "model=hf/causal_lm",
        f"model.path={model}",
        f"adapter={adapter}",
        "adapter.r=16",
        "datamodule.seq_len=256",
        f"trainer.max_steps={steps}",
        *(o for o in TIMED_RUN if not o.startswith("trainer.max_epochs")),  # (steps, not an epoch)
        f"hydra.run.dir={out}",
    ]
    subprocess.run([sys.executable, "-m", "framework.train", *run], check=True, capture_output=True)
    return json.loads((out / "results.json").read_text())["memory"]["peak_bytes_per_rank"][0] / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp())
    save_llama(root / "llama")
    figures = {"lora": [], "qlora": []}
    for r in range(args.repeats):
        for adapter in figures:
            figures[adapter].append(peak_mib(root / "llama", adapter, args.steps, root / f"{adapter}{r}"))
    med = {k: statistics.median(v) for k, v in figures.items()}
    print(f"Llama of 46M parameters, adapters r=16, {args.steps} steps x {args.repeats} repeats, one device")
    for adapter, mib in med.items():
        print(
            f"  {adapter:6s} peak resident memory {mib:8.1f} MiB  ({', '.join(f'{v:.0f}' for v in figures[adapter])})"
        )
    print(f"  qlora / lora = {med['qlora'] / med['lora']:.3f}")


if __name__ == "__main__":
    main()
