"""Bad values, table-driven: each is refused before any process starts, with its key (and range) in
the message. The first 16 were accepted (or failed late, without the key) before; the rest are
their neighbours."""

from __future__ import annotations

from pathlib import Path

import pytest

from framework import compose, fit
from framework.config import ConfigError
from framework.job.preflight import preflight
from tests.helpers.configs import TINY

SYNTHETIC = ["datamodule=synthetic", "datamodule.input_shape=[8]", "model=mlp"]
TEXT = ["model=gpt/tiny", "datamodule=text", "task=language_modeling"]
LORA = [*TEXT, "~model.hidden_sizes", "adapter=lora"]
LLAMA = (
    "{model_type: llama, vocab_size: 256, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, "
    "num_attention_heads: 4}"
)
CASES = [
    # what was accepted, or refused late without its key
    (["trainer.fast_dev_run=-1"], "trainer.fast_dev_run: must be >= 0, got -1"),
    (["datamodule.val_fraction=-0.2"], "datamodule.val_fraction: must be in [0, 1), got -0.2"),
    (["datamodule.val_fraction=1.5"], "datamodule.val_fraction: must be in [0, 1), got 1.5"),
    (
        ["datamodule.test_fraction=0.95", "datamodule.val_fraction=0.1"],
        "datamodule.val_fraction + test_fraction: 0.1 + 0.95 leave no training sample of 1797",
    ),
    (["model.dropout=-0.5"], "model.dropout: must be in [0, 1), got -0.5"),
    (["optimizer.betas=[0.9]"], "optimizer.betas: expected 2 numbers in [0, 1), got [0.9]"),
    (["scheduler=step", "scheduler.step_size=0"], "scheduler.step_size: must be >= 1, got 0"),
    (["scheduler=cosine", "scheduler.T_max=0"], "scheduler.T_max: must be >= 1, got 0"),
    (["init.weights=/etc/passwd"], "init.weights: '/etc/passwd' is not a checkpoint"),
    (["callbacks.model_checkpoint.save_top_k=-5"], "callbacks.model_checkpoint.save_top_k: must be >= -1"),
    (["callbacks.early_stopping.patience=-1"], "callbacks.early_stopping.patience: must be >= 0, got -1"),
    (
        ["strategy=fsdp", "trainer.devices=2", "strategy.wrap_classes=[Nope]"],
        "strategy.wrap_classes: no submodule of MLP is a 'Nope'; its classes: Flatten, Linear, ReLU, Sequential",
    ),
    (
        ["callbacks.model_checkpoint.filename='epoch{epochh}'"],
        "callbacks.model_checkpoint.filename: {epochh} is not a field",
    ),
    (
        ["callbacks.model_checkpoint.filename=../../../victim"],
        "callbacks.model_checkpoint.filename: '../../../victim' is not a plain file name",
    ),
    (
        ["callbacks.model_checkpoint.filename='../../../escaped{epoch}'"],
        "callbacks.model_checkpoint.filename: '../../../escaped{epoch}' is not a plain file name",
    ),
    (
        ["strategy=ddp", "trainer.devices=64"],
        "trainer.devices: 64 processes per node on the CPU, but this process may run on",
    ),
    (["trainer.limit_train_batches=null"], "trainer.limit_train_batches: expected int or float, got null"),
    (
        ["strategy=ddp", "trainer.devices=2", "trainer.accelerator=cpu", "strategy.sync_batchnorm=true"],
        "strategy.sync_batchnorm: torch's SyncBatchNorm runs on CUDA only, not on cpu",
    ),
    # neighbours
    (["datamodule.val_fraction=0.0001"], "datamodule.val_fraction: 0.0001 of 1797 samples is no sample"),
    ([*SYNTHETIC, "datamodule.num_samples=0"], "datamodule.num_samples: must be >= 1, got 0"),
    ([*SYNTHETIC, "datamodule.noise=-1"], "datamodule.noise: must be >= 0, got -1"),
    (["model.hidden_sizes=[32,0]"], "model.hidden_sizes: every entry must be >= 1, got [32, 0]"),
    (["optimizer.betas=[0.9,1.5]"], "optimizer.betas: expected 2 numbers in [0, 1), got [0.9, 1.5]"),
    (["optimizer.weight_decay=-0.1"], "optimizer.weight_decay: must be >= 0, got -0.1"),
    (["optimizer.eps=0"], "optimizer.eps: must be > 0, got 0"),
    (["optimizer=sgd", "optimizer.momentum=-0.5"], "optimizer.momentum: must be >= 0, got -0.5"),
    (["scheduler=step", "scheduler.gamma=0"], "scheduler.gamma: must be > 0, got 0"),
    (["scheduler=onecycle", "scheduler.max_lr=0"], "scheduler.max_lr: must be > 0, got 0"),
    (["scheduler=onecycle", "scheduler.pct_start=1.0"], "scheduler.pct_start: must be in (0, 1), got 1.0"),
    (["scheduler=step", "scheduler.frequency=0"], "scheduler.frequency: must be >= 1, got 0"),
    (["callbacks.early_stopping.mode=best"], "callbacks.early_stopping.mode: expected one of 'min', 'max'"),
    (["callbacks.model_checkpoint.mode=top"], "callbacks.model_checkpoint.mode: expected one of 'min', 'max'"),
    (
        ["callbacks.model_checkpoint.every_n_train_steps=-2"],
        "callbacks.model_checkpoint.every_n_train_steps: must be >= 0 (or null), got -2",
    ),
    (
        ["callbacks.model_checkpoint.filename=last"],
        "callbacks.model_checkpoint.filename: 'last' is not a plain file name",
    ),
    (["callbacks=[default,ema]", "callbacks.ema.decay=1.5"], "callbacks.ema.decay: must be in [0, 1], got 1.5"),
    (
        ["callbacks=[default,swa]", "callbacks.swa.swa_epoch_start=-1"],
        "callbacks.swa.swa_epoch_start: -1 is not an epoch >= 0 or a fraction in [0, 1]",
    ),
    (
        ["callbacks=[default,device_stats]", "callbacks.device_stats.every_n_steps=0"],
        "callbacks.device_stats.every_n_steps: must be >= 1, got 0",
    ),
    (
        ["callbacks.lr_monitor.logging_interval=hour"],
        "callbacks.lr_monitor.logging_interval: expected one of 'step', 'epoch'",
    ),
    (
        ["callbacks=[default,throughput]", "callbacks.throughput.log_every_n_steps=0"],
        "callbacks.throughput.log_every_n_steps: must be >= 1, got 0",
    ),
    (
        ["callbacks.progress_bar.refresh_every_n_steps=0"],
        "callbacks.progress_bar.refresh_every_n_steps: must be >= 1, got 0",
    ),
    (["task.label_smoothing=1.5"], "task.label_smoothing: must be in [0, 1], got 1.5"),
    (["strategy=ddp", "trainer.devices=2", "strategy.bucket_cap_mb=0"], "strategy.bucket_cap_mb: must be > 0, got 0"),
    (["strategy=ddp", "trainer.devices=2", "strategy.powersgd_rank=0"], "strategy.powersgd_rank: must be >= 1, got 0"),
    (
        ["strategy=hsdp", "trainer.devices=2", "strategy.replicate=0"],
        "strategy.dp_replicate(0) x strategy.dp_shard(-1)",
    ),
    (["trainer.oversubscribe=maybe"], "trainer.oversubscribe: expected bool"),
    # keys of ours under a group, given at the top (with or without +): named where they belong
    (["+tokenizer=x"], "tokenizer: not a top-level key; did you mean datamodule.tokenizer?"),
    (["tokenizer=x"], "tokenizer: not a top-level key; did you mean datamodule.tokenizer?"),
    (["+max_epochs=3"], "max_epochs: not a top-level key; did you mean trainer.max_epochs?"),
    (["devices=2"], "devices: not a top-level key; did you mean trainer.devices?"),
    (["+lr=0.1"], "lr: not a top-level key; did you mean optimizer.lr?"),
    # values that failed after the ranks started, with a traceback (issue 38)
    (
        [*TEXT, "strategy=pp", "trainer.devices=2", "strategy.microbatches=abc"],
        "strategy.microbatches: expected int or null, got str 'abc'",
    ),
    (
        [*TEXT, "datamodule.seq_len=256", "model.max_seq_len=64"],
        "datamodule.seq_len: windows of 256 tokens, but the model holds positions for 64 (model.max_seq_len)",
    ),
    (
        [*TEXT, f"datamodule.tokenizer={Path(__file__).parent / 'broken_tokenizer.json'}"],
        "datamodule.tokenizer: '"
        + str(Path(__file__).parent / "broken_tokenizer.json")
        + "' is not a tokenizers JSON file",
    ),
    ([*TEXT, "model.vocab_size=100"], "model.vocab_size: 100, but the data's token ids run to 255"),
    ([*TEXT, "datamodule.vocab_size=10"], "datamodule.vocab_size: 10, but the tokens number 256 (UTF-8 bytes)"),
    (["task=language_modeling"], "LanguageModelingTask trains on windows of tokens, but datamodule DigitsDataModule"),
    # a language model on images, a classification of windows of tokens: failed inside the ranks (issue 50)
    (
        ["model=hf/causal_lm", f"model.config={LLAMA}"],
        "model._target_: HFCausalLM takes token ids, but datamodule DigitsDataModule gives features (float tensors)",
    ),
    (
        ["model=gpt/tiny", "datamodule=text"],
        "task._target_: ClassificationTask trains on one class per sample, but datamodule TextDataModule gives "
        "windows of tokens; choose task=language_modeling",
    ),
    (
        [*TEXT, f"datamodule.data_dir={Path(__file__).parent / 'twelve_bytes.txt'}"],
        "datamodule.seq_len: the corpus has 12 bytes, not enough for one window of 128 tokens",
    ),
    (
        ["datamodule.batch_size=12345678901234567890123"],
        "datamodule.batch_size: 12345678901234567890123 does not fit in 64 bits",
    ),
    (["datamodule.input_shape=[1,8]"], "datamodule.input_shape: the digits are 1x8x8 images ([1, 8, 8]), not [1, 8]"),
    (
        ["callbacks.model_checkpoint.dirpath=/proc/forbidden"],
        "callbacks.model_checkpoint.dirpath: cannot write to '/proc/forbidden'",
    ),
    (["seed=-1"], "seed: must be in [0, 4294967295], got -1"),
    (["seed=12345678901234567890"], "seed: must be in [0, 4294967295], got 12345678901234567890"),
    (["init.reset=[nope]"], "init.reset: the model has no submodule 'nope' (top-level submodules: body, head)"),
    (["init.freeze=[nope]"], "init.freeze: the model has no submodule 'nope' (top-level submodules: body, head)"),
    # adapters: their parameters counted against the memory (r=1e9 tried to allocate 128 GB), their ranges
    ([*LORA, "adapter.r=1000000000"], "adapter.r: 1000000000 makes about 4.48e+11 adapter parameters"),
    (
        [*LORA, "adapter.r=1000000000"],
        "adapter.r: 1000000000, but B A's rank is at most min(in, out) of the layer it adapts, and no adapted "
        "layer's is above 32 (8 layers: layers.0.attention.wq 32x32",
    ),
    ([*LORA, "adapter.r=0"], "adapter.r: must be >= 1, got 0"),
    ([*LORA, "adapter.alpha=0"], "adapter.alpha: must be > 0, got 0"),
    ([*LORA, "adapter.dropout=1"], "adapter.dropout: must be in [0, 1), got 1"),
    (
        ["export_weights=true", "export_merge=true"],
        "export_merge: true merges adapters into the base weights, but this run has none (adapter: null); select",
    ),
    ([*TEXT, "task.eos_token_id=99999"], "task.eos_token_id: 99999 is no token of the vocabulary (0 to 255)"),
    ([*TEXT, "task.eos_token_id=-1"], "task.eos_token_id: -1 is no token of the vocabulary (0 to 255)"),
    (
        ["datamodule.batch_size=2000"],
        "datamodule.batch_size: the global batch 2000 is larger than the training set (1258 samples after",
    ),
]


@pytest.mark.parametrize("overrides,message", CASES, ids=[" ".join(o) for o, _ in CASES])
def test_a_bad_value_is_refused_before_anything_starts_with_its_key(overrides, message):
    with pytest.raises(ConfigError) as err:
        preflight(compose([*TINY, *overrides]))
    assert any(message in problem for problem in err.value.problems), err.value.problems


def test_at_least_the_sixteen_reported_and_twenty_more():
    assert len(CASES) >= 36


def test_an_adapter_rank_above_some_layers_sizes_is_said_not_refused(caplog):
    """gpt/tiny's wk and wv are 32x16: r=24 reaches rank 16 there, 24 in wq and wo."""
    preflight(compose([*TINY, *LORA, "adapter.r=24"]))
    [warning] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("adapter.r:")]
    assert warning.startswith("adapter.r: 24 is above min(in, out) of 4 of the 8 adapted layers (layers.0.attention.wk")


def test_a_top_level_key_of_the_users_own_is_kept_and_one_an_interpolation_uses_too():
    preflight(compose([*TINY, "+my_setting=3"]))
    preflight(compose([*TINY, "+lr=0.01", "optimizer.lr=${lr}"]))  # lightning-hydra-template's idiom


def test_an_experiments_scheduler_settings_do_not_break_scheduler_none():
    run = preflight(compose(["experiment=gpt_text", "model=gpt/tiny", "scheduler=none"]))
    assert run.config["scheduler"] is None


def test_optimizer_none_runs_a_model_as_it_is_and_a_run_that_trains_refuses_it(tmp_path):
    # the experiment's optimizer.lr stays on optimizer=none: settings of no optimizer, dropped as scheduler=none's
    run = preflight(compose([*TINY, "optimizer=none", "train=false"]))
    assert run.config["optimizer"] == {}
    results = fit(compose([*TINY, "optimizer=none", "train=false", "logger=none"]), output_dir=str(tmp_path))
    assert results["status"] == "completed" and results["steps"] == 0 and "test/acc" in results["metrics"]
    with pytest.raises(ConfigError) as err:
        preflight(compose([*TINY, "optimizer=none"]))
    assert err.value.problems == [
        "optimizer: missing; choose an option of the 'optimizer' group: adam, adamw, sgd (optimizer=none: only "
        "with train=false, a run that does not train)"
    ]


def test_a_strategy_target_on_the_default_auto_drops_autos_own_keys():
    target = "+strategy._target_=framework.strategies.Strategy"
    run = preflight(compose([*TINY, target]))
    assert not {"candidates", "probe_steps", "memory_margin", "plan"} & set(run.strategy)
    with pytest.raises(ConfigError) as err:  # one set by the user is meant for auto: named, not dropped
        preflight(compose([*TINY, target, "strategy.probe_steps=3"]))
    [problem] = err.value.problems
    assert problem.startswith("strategy.probe_steps: a key of strategy=auto") and "strategy=single" in problem


@pytest.mark.multiprocess
def test_a_language_model_on_images_exits_2_before_any_rank_starts(tmp_path):
    import subprocess
    import sys

    run = ["model=hf/causal_lm", f"model.config={LLAMA}", "strategy=ddp", "trainer.devices=2"]
    done = subprocess.run(
        [sys.executable, "-m", "framework.train", *run, f"hydra.run.dir={tmp_path / 'run'}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "model._target_: HFCausalLM takes token ids, but datamodule DigitsDataModule gives features" in done.stderr
    assert (
        "task._target_: ClassificationTask scores logits per sample, but model HFCausalLM gives logits per token"
        in (done.stderr)
    )
    assert not (tmp_path / "run" / "ranks").exists() and "rank 0" not in done.stderr
