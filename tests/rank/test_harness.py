"""EleutherAI's lm-evaluation-harness on a run's model, offline: the shipped tasks (built from Python's
own text) scored after training equal ``lm_eval --model hf`` on the exported model, log-likelihoods
and generations (a chat's too); framework-evaluate scores a checkpoint the same on 2 sharded ranks; bad names and
models are refused before start."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from framework import compose, fit
from framework.config import ConfigError
from framework.job.preflight import preflight
from framework.rank.harness import SHIPPED_TASKS
from tests.helpers.configs import GPT_TINY
from tests.helpers.corpora import bpe_tokenizer

transformers = pytest.importorskip("transformers")
pytest.importorskip("lm_eval")

TASKS = "harness.tasks=[stdlib_modules,stdlib_topics,stdlib_modules_answer]"
GENERATED = ("stdlib_topics", "stdlib_modules_answer")
OFFLINE = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


def shipped_rows(task: str) -> int:
    """How many questions a shipped task asks (stdlib_modules_answer asks stdlib_modules')."""
    return len((SHIPPED_TASKS / f"{task.removesuffix('_answer')}.jsonl").read_text().splitlines())


def run_of(model_dir) -> list[str]:
    return [
        *(o for o in GPT_TINY if not o.startswith(("model=", "datamodule.seq_len"))),
        "model=hf/causal_lm",
        f"model.path={model_dir}",
        f"datamodule.tokenizer={model_dir}",
        "datamodule.vocab_size=384",
        "datamodule.seq_len=64",
        "trainer.max_steps=40",
        "test_ckpt=last",
        "export_weights=true",
        "export_format=hf",
    ]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny Llama with its tokenizer (a BPE whose <|endoftext|> begins and ends a text), trained 40 steps
    on Python's help text, scored on the shipped tasks with each answer logged."""
    source = tmp_path_factory.mktemp("llama")
    shutil.copy(bpe_tokenizer(tmp_path_factory.mktemp("bpe")), source / "tokenizer.json")
    named = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>"}
    (source / "tokenizer_config.json").write_text(json.dumps(named))
    config = transformers.LlamaConfig(
        vocab_size=384,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=0,
        eos_token_id=0,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(source)
    out = tmp_path_factory.mktemp("run")
    results = fit(compose([*run_of(source), TASKS, "harness.log_samples=true"]), output_dir=str(out))
    assert results["status"] == "completed"
    return source, out, json.loads((out / "results.json").read_text())


def test_the_scores_are_lm_evals_own_on_the_export(trained, tmp_path):
    _, run_dir, results = trained
    ours = results["harness"]
    assert all(ours[task]["samples"] == shipped_rows(task) for task in ("stdlib_modules", *GENERATED))
    assert 0 < ours["stdlib_modules"]["acc"] < 1
    done = subprocess.run(
        [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args",
         f"pretrained={run_dir / 'model_hf'},dtype=float32", "--tasks", ",".join(["stdlib_modules", *GENERATED]),
         "--include_path", str(SHIPPED_TASKS), "--batch_size", "8", "--device", "cpu", "--log_samples",
         "--output_path", str(tmp_path / "lm_eval")],
        capture_output=True, text=True, timeout=600, env=OFFLINE,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    [theirs_file] = (tmp_path / "lm_eval").rglob("results_*.json")
    theirs = json.loads(theirs_file.read_text())["results"]
    for metric in ("acc", "acc_norm"):
        assert ours["stdlib_modules"][metric] == pytest.approx(theirs["stdlib_modules"][f"{metric},none"], abs=1e-12)
    assert ours["stdlib_modules_answer"]["bare_name:strip"] == theirs["stdlib_modules_answer"]["bare_name,strip"]
    answers = {}
    for task in GENERATED:
        assert ours[task]["exact_match:strip"] == theirs[task]["exact_match,strip"]
        # the generations themselves, question by question (a tiny model's: not the answers, but the same text)
        [their_samples] = (tmp_path / "lm_eval").rglob(f"samples_{task}_*.jsonl")
        expected = {r["doc_id"]: r["resps"][0][0] for r in map(json.loads, their_samples.read_text().splitlines())}
        got = {r["doc_id"]: r["resps"][0][0] for r in map(json.loads, (run_dir / "harness" / f"{task}.jsonl").open())}
        assert got == expected and len(got) == shipped_rows(task)
        answers[task] = got
    # not one empty answer everywhere: a real comparison (after the chat's "assistant\n" this model, trained
    # on help text, writes a newline first, so its answers there are all empty, in both)
    assert len(set(answers["stdlib_topics"].values())) > 1


@pytest.mark.multiprocess
def test_framework_evaluate_scores_a_checkpoint_on_two_sharded_ranks(trained, tmp_path):
    _, run_dir, results = trained
    done = subprocess.run(
        [sys.executable, "-m", "framework.evaluate", f"ckpt_path={run_dir / 'checkpoints' / 'last'}",
         "harness.tasks=[stdlib_modules]", "test=false", "strategy=fsdp", "trainer.devices=2",
         f"hydra.run.dir={tmp_path / 'eval'}"],
        capture_output=True, text=True, timeout=600, env=OFFLINE,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    scored = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert scored["world_size"] == 2
    for metric in ("acc", "acc_norm"):
        assert scored["harness"]["stdlib_modules"][metric] == pytest.approx(
            results["harness"]["stdlib_modules"][metric], abs=1e-12
        )


def test_unknown_tasks_and_models_that_are_not_language_models_are_refused_before_start(trained, tmp_path):
    source, _, _ = trained
    with pytest.raises(ConfigError) as err:
        preflight(compose([*run_of(source), "harness.tasks=[stdlib_module]", f"harness.include_path={tmp_path}/no"]))
    assert err.value.problems == [f"harness.include_path: '{tmp_path}/no' is not a directory (of lm-eval task YAMLs)"]
    with pytest.raises(ConfigError) as err:
        preflight(compose([*run_of(source), "harness.tasks=[stdlib_module]"]))
    shipped = ", ".join(sorted(p.stem for p in SHIPPED_TASKS.glob("*.yaml")))
    assert shipped.startswith("stdlib_modules, ") and "stdlib_topics" in shipped
    assert err.value.problems == [
        f"harness.tasks: lm-eval knows no task 'stdlib_module'; did you mean stdlib_modules? (shipped: {shipped}; "
        "your own: harness.include_path=<a directory of task YAMLs>)"
    ]
    with pytest.raises(ConfigError) as err:
        preflight(compose(["experiment=digits_mlp", TASKS]))
    assert "harness.tasks: lm-evaluation-harness scores a language model (logits per token); model MLP gives " in (
        " ".join(err.value.problems)
    )
