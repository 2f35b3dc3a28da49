"""Generation's speed, side by side in one run: the framework's generate with its key/value cache,
the same without a cache (the whole sequence at every step), and transformers' own ``generate`` on
the same saved model:

    python benchmarks/generation.py [--new 64] [--repeats 5] [--device cuda]

The model is a Qwen2 of 32,768 positions (hidden 256, 4 layers: the shape of a small model, with a
real model's position count), saved with save_pretrained and loaded by path as model=hf/causal_lm
loads it; 4 prompts of 5, 11, 23 and 37 tokens, greedy, no end of sequence (every row runs all its
steps). Each figure is new tokens generated per second (4 x --new / the median time over repeats that
alternate between the sides); the ratios are against transformers' generate. The last line times a
whole framework-generate of the 4 prompts on that model (process start included).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

LENGTHS = (5, 11, 23, 37)


def save_qwen2(directory: Path) -> None:
    import transformers

    config = transformers.Qwen2Config(
        vocab_size=1024,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=32768,
        tie_word_embeddings=False,
        eos_token_id=None,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    transformers.Qwen2ForCausalLM(config).save_pretrained(directory)


class WithoutCache(torch.nn.Module):
    """The model behind a forward that takes no cache: generate then runs the whole sequence each step."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(tokens)


def prompts(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    longest = max(LENGTHS)
    ids = torch.zeros(len(LENGTHS), longest, dtype=torch.long)
    mask = torch.zeros(len(LENGTHS), longest, dtype=torch.bool)
    for row, length in enumerate(LENGTHS):
        ids[row, longest - length :] = torch.randint(1, 1024, (length,), generator=generator)
        mask[row, longest - length :] = True
    return ids.to(device), mask.to(device)


def main() -> None:
    import transformers

    from framework.models import HFCausalLM
    from framework.tasks.generation import Sampling, generate

    parser = argparse.ArgumentParser()
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp()) / "qwen2"
    save_qwen2(directory)
    ours = HFCausalLM(path=str(directory)).to(args.device).eval()
    theirs = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).to(args.device).eval()
    ids, mask = prompts(args.device)
    sampling = Sampling(args.new)
    sides = {
        "framework, cache": lambda: generate(ours, ids, mask, sampling),
        "framework, no cache": lambda: generate(WithoutCache(ours), ids, mask, sampling),
        "transformers generate": lambda: theirs.generate(
            input_ids=ids, attention_mask=mask.long(), max_new_tokens=args.new, do_sample=False, pad_token_id=0
        ),
    }
    times = {name: [] for name in sides}
    with torch.no_grad():
        for run in sides.values():  # warm-up
            run()
        for _ in range(args.repeats):
            for name, run in sides.items():
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
    tokens = len(LENGTHS) * args.new
    reference = tokens / statistics.median(times["transformers generate"])
    print(f"{len(LENGTHS)} prompts x {args.new} new tokens, Qwen2 of 32,768 positions, {args.device}")
    for name, spent in times.items():
        rate = tokens / statistics.median(spent)
        print(f"  {name:24s} {rate:9.1f} tokens/s   {rate / reference:5.2f} x transformers' generate")
    print(f"  whole framework-generate (a new process): {whole_command(directory, args.new):.1f} s")


def whole_command(directory: Path, new: int) -> float:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"t{i}": i for i in range(1024)}  # a word-level tokenizer of the model's 1,024 ids
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    args = [a for n in LENGTHS for a in ("--prompt", " ".join(f"t{i}" for i in range(1, n + 1)))]
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "framework.generate", str(directory), *args, f"task.max_new_tokens={new}",
         "--output", str(directory.parent / "generated")],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
