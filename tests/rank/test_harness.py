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


GPT_HARNESS = [*(o for o in GPT_TINY if not o.startswith("datamodule.seq_len")), "predict=false"]
ROWS = [{"q": f"question {i}", "choices": [" yes", " no"], "answer": i % 2} for i in range(6)]


def user_task(directory, name: str = "mine", text: str = "Q: {{q}}\\nA:", rows=ROWS, **extra) -> str:
    """A task YAML of the user's reading a .jsonl through datasets' json builder (which caches it)."""
    (directory / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = [
        f"task: {name}", "dataset_path: json", "dataset_kwargs:", "  data_files:",
        f"    test: {directory / 'rows.jsonl'}", "test_split: test", "output_type: multiple_choice",
        f'doc_to_text: "{text}"', 'doc_to_choice: "{{choices}}"', "doc_to_target: answer",
        "metric_list:", "  - metric: acc", *(f"{k}: {v}" for k, v in extra.items()),
    ]  # fmt: skip
    (directory / f"{name}.yaml").write_text("\n".join(lines) + "\n")
    return str(directory)


def test_what_a_harness_needs_is_checked_before_start(tmp_path):
    """Positions for each task's answers and new tokens, its few-shot examples, its rows, its YAML."""
    problems = refused([*GPT_HARNESS, "datamodule.seq_len=8", TASKS])
    assert any(
        p.startswith("harness.tasks: task 'stdlib_modules' scores answers of up to ") and "the model holds 8 " in p
        for p in problems
    )
    assert "harness.tasks: task 'stdlib_topics' generates up to 16 new tokens (its max_gen_toks), but the model " in (
        " ".join(problems)
    )
    [few] = refused(
        [*GPT_HARNESS, "datamodule.seq_len=64", "harness.tasks=[stdlib_modules]", "harness.num_fewshot=1000"]
    )
    assert (
        few
        == f"harness.num_fewshot: 1000 examples, but task 'stdlib_modules' has {len(lines('stdlib_modules')) - 1} "
        + (f"to draw them from; set harness.num_fewshot={len(lines('stdlib_modules')) - 1} or less")
    )
    bad = [*ROWS[:3], {"q": "no choices", "answer": 0}, {**ROWS[4], "answer": 7}, ROWS[5]]
    include = user_task(tmp_path, rows=bad)
    rows = refused([*GPT_HARNESS, "datamodule.seq_len=64", "harness.tasks=[mine]", f"harness.include_path={include}"])
    assert rows[0].startswith("harness.tasks: task 'mine' row 3: ") and len(rows) == 2
    assert rows[1] == "harness.tasks: task 'mine' row 4: its answer 7 is not one of its 2 choices"
    (tmp_path / "broken.yaml").write_text("task: broken\ndoc_to_text: [unclosed\n")
    broken = refused(
        [*GPT_HARNESS, "datamodule.seq_len=64", "harness.tasks=[broken]", f"harness.include_path={include}"]
    )
    assert broken[1].startswith(f"harness.include_path: '{tmp_path / 'broken.yaml'}' line 3 does not parse as YAML")


def lines(task: str) -> list[str]:
    return (SHIPPED_TASKS / f"{task}.jsonl").read_text().splitlines()


def refused(overrides: list[str]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        preflight(compose(overrides))
    return err.value.problems


def test_a_harness_writes_nothing_outside_the_run_and_its_failure_keeps_the_training_results(tmp_path, monkeypatch):
    """A task of the user's loads its rows through datasets, whose cache lives in the run and goes after;
    a task that fails while scoring leaves the run completed with its test metrics, the error beside them."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    include = user_task(tmp_path / "tasks" if (tmp_path / "tasks").mkdir() is None else None)
    run = [*GPT_HARNESS, "datamodule.seq_len=64", "trainer.max_steps=2", f"harness.include_path={include}"]
    results = fit(compose([*run, "harness.tasks=[mine]"]), output_dir=str(tmp_path / "run"))
    assert results["status"] == "completed" and 0 <= results["harness"]["mine"]["acc"] <= 1
    assert not list(home.rglob("*")) and not (tmp_path / "run" / "harness").exists()

    (tmp_path / "tasks" / "utils.py").write_text("def boom(doc, results):\n    raise RuntimeError('boom')\n")
    user_task(tmp_path / "tasks", name="failing", process_results="!function utils.boom")
    failed = fit(compose([*run, "harness.tasks=[failing]"]), output_dir=str(tmp_path / "failed"))
    assert failed["status"] == "completed" and "test/loss" in failed["metrics"]
    assert failed["harness_error"] == "RuntimeError: boom"


def test_the_weights_training_starts_from_are_scored_too_and_training_draws_as_without(tmp_path):
    import csv

    from tests.helpers.configs import train_losses

    run = [*GPT_HARNESS, "datamodule.seq_len=64", "trainer.max_steps=3", "model.dropout=0.1", "test=false"]
    run += ["harness.tasks=[stdlib_modules]", "harness.limit=8"]
    scored = fit(compose([*run, "harness.on_start=true"]), output_dir=str(tmp_path / "on"))
    plain = fit(compose(run), output_dir=str(tmp_path / "plain"))
    assert scored["harness_start"]["stdlib_modules"]["samples"] == 8 and "harness_start" not in plain
    assert scored["harness"] == plain["harness"]  # the same training: lm-eval's seeding changed no draw
    assert train_losses(tmp_path / "on") == train_losses(tmp_path / "plain")
    with open(tmp_path / "on" / "metrics.csv") as f:
        first = next(r for r in csv.DictReader(f) if r["step"] == "0")
    assert float(first["harness_start/stdlib_modules/acc"]) == scored["harness_start"]["stdlib_modules"]["acc"]
