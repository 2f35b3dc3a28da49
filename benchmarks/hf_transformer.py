"""A Hugging Face model (transformers' LlamaForCausalLM, model=hf/causal_lm) in the engine against a
hand-written loop over the same model and batches, side by side in one run:

    OMP_NUM_THREADS=1 python benchmarks/hf_transformer.py [--steps 30] [--repeats 3] [--device cuda]

The model is a Llama of the built-in GPT's size (2.5M parameters, byte vocabulary), saved with
save_pretrained and loaded by path, as a user's pretrained model is. The hand loop is what a user
writes with transformers alone: ``from_pretrained``, ``model(input_ids).logits``, AdamW, the same
windows of datamodule.text through a standard DataLoader. Each figure is batch x seq_len / median
step time, the median over repeats that alternate between the sides; engine / hand targets >= 0.97.
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
from framework.data import TextDataModule

BATCH, SEQ = 16, 128


def save_llama(directory: str) -> None:
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=SEQ,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(directory)


def engine_tokens_per_s(path: str, steps: int, device: str, out: str) -> float:
    run = [
        "experiment=gpt_text",
        "model=hf/causal_lm",
        f"model.path={path}",
        f"datamodule.batch_size={BATCH}",
        f"datamodule.seq_len={SEQ}",
        "trainer.gradient_clip_val=null",
        *TIMED_RUN,
        f"trainer.accelerator={device}",
        f"trainer.max_steps={steps}",
    ]
    results = fit(compose(run), output_dir=out)
    return BATCH * SEQ / (results["throughput"]["step_time_ms_median"] / 1e3)


class Logits(torch.nn.Module):
    """``model(input_ids).logits``: the one line a hand loop over transformers writes."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, tokens):
        return self.model(input_ids=tokens).logits


def hand_tokens_per_s(path: str, steps: int, device: str, data: TextDataModule) -> float:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, local_files_only=True, dtype=torch.float32, attn_implementation="sdpa"
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    loader = DataLoader(
        data.train_set,
        batch_size=BATCH,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
        pin_memory=device == "cuda",
    )
    return BATCH * SEQ / median_step_time(Logits(model), optimizer, loader, steps, device=torch.device(device))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    data = TextDataModule(batch_size=BATCH, seq_len=SEQ)
    data.setup("fit")
    figures = {"engine": [], "hand": []}
    with tempfile.TemporaryDirectory() as tmp:
        save_llama(f"{tmp}/llama")
        for r in range(args.repeats):
            figures["engine"].append(engine_tokens_per_s(f"{tmp}/llama", args.steps, args.device, f"{tmp}/run{r}"))
            figures["hand"].append(hand_tokens_per_s(f"{tmp}/llama", args.steps, args.device, data))
    med = {k: statistics.median(v) for k, v in figures.items()}
    print(
        f"model=hf/causal_lm (LlamaForCausalLM, 2.5M parameters) on {args.device}, batches of {BATCH} x {SEQ} "
        f"tokens, {args.steps} steps x {args.repeats} repeats; tokens/s, median (min-max)"
    )
    print(
        f"  engine {med['engine']:9.0f} ({min(figures['engine']):.0f}-{max(figures['engine']):.0f})   "
        f"hand {med['hand']:9.0f} ({min(figures['hand']):.0f}-{max(figures['hand']):.0f})   "
        f"engine / hand = {med['engine'] / med['hand']:.3f}  (target >= 0.97)"
    )


if __name__ == "__main__":
    main()
