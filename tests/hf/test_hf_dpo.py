"""task=dpo on LoRA adapters of a tiny Llama (saved by save_pretrained here): the first loss is log 2 (the
policy is its reference until B moves), 2 FSDP ranks give one device's losses and validation metrics, a
run killed on 2 FSDP ranks resumes on one device with the uninterrupted losses, and the adapters export
in peft's format and merged; refused before start: no adapter, other data, a layout that splits sequences."""

from __future__ import annotations

import csv
import math

import pytest
import torch

from framework import compose, fit
from framework.config import ConfigError
from framework.job.preflight import preflight
from tests.helpers.configs import train_losses
from tests.helpers.layouts import runs_once

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("llama")
    transformers.LlamaForCausalLM(config).save_pretrained(directory)
    return directory


def dpo(base, *more: str) -> list[str]:
    """experiment=hf_dpo_preferences on the saved Llama: 7 steps in batches of 8 pairs, validation (the
    shipped set's validation split: an odd count of pairs, so the 2 ranks' shares differ) at step 4 and
    at the end, checkpoints every 3."""
    return [
        "experiment=hf_dpo_preferences",
        "model=hf/causal_lm",
        f"model.path={base}",
        "adapter.r=4",
        "optimizer.lr=0.01",
        "++optimizer.eps=1e-6",
        "trainer.max_steps=7",
        "trainer.val_check_interval=4",
        "trainer.log_every_n_steps=1",
        "trainer.enable_progress_bar=false",
        "trainer.accelerator=cpu",
        "logger=csv",
        "seed=5",
        "strategy.timeout_s=60",
        "test=false",
        "callbacks=model_checkpoint",
        "callbacks.model_checkpoint.monitor=null",
        "callbacks.model_checkpoint.every_n_train_steps=3",
        *more,
    ]


LAYOUTS = {
    "single": ["strategy=single", "export_weights=true", "export_format=hf"],
    "fsdp": ["strategy=fsdp", "trainer.devices=2"],
}


@pytest.fixture(scope="module")
def runs(base, tmp_path_factory):
    return runs_once(tmp_path_factory, dpo(base), LAYOUTS)


def _validation(run_dir) -> list[dict]:
    with open(run_dir / "metrics.csv") as f:
        return [
            {k: float(v) for k, v in r.items() if k.startswith("val/") and v}
            for r in csv.DictReader(f)
            if r["val/loss"]
        ]


def test_the_first_loss_is_log_2_and_the_adapters_learn(runs):
    run_dir, results = runs("single")
    losses = train_losses(run_dir)
    assert results["status"] == "completed" and len(losses) == 7
    assert abs(losses[0] - math.log(2)) <= 1e-6  # LoRA's B is zero: the policy is its reference
    assert any(abs(loss - math.log(2)) > 1e-4 for loss in losses[1:])
    val = _validation(run_dir)[-1]  # (after the epoch, and of the last step's weights)
    assert set(val) == {
        "val/loss",
        "val/reward_accuracy",
        "val/reward_margin",
        "val/reward_chosen",
        "val/reward_rejected",
    }


def test_two_fsdp_ranks_give_one_devices_losses_and_validation(runs):
    single_dir, _ = runs("single")
    fsdp_dir, results = runs("fsdp")
    assert results["status"] == "completed" and results["world_size"] == 2
    expected, got = train_losses(single_dir), train_losses(fsdp_dir)
    assert got == pytest.approx(expected, abs=1e-5)
    print(f"fsdp vs single: max |train/loss diff| {max(abs(a - b) for a, b in zip(got, expected)):.2e}")
    single_val, fsdp_val = _validation(single_dir), _validation(fsdp_dir)
    assert len(fsdp_val) == len(single_val) == 2
    for theirs, ours in zip(single_val, fsdp_val):  # (each rank's batches weighed by their pairs)
        assert ours == pytest.approx(theirs, abs=1e-5)


def test_killed_on_two_fsdp_ranks_it_resumes_on_one_device_with_the_uninterrupted_losses_and_exports(
    base, runs, tmp_path
):
    single_dir, _ = runs("single")
    kill = [
        "+callbacks.kill._target_=tests.helpers.probes.SignalAt",
        "+callbacks.kill.step=5",
        "+callbacks.kill.signal=SIGKILL",
        "+callbacks.kill.rank=1",
    ]
    with pytest.raises(RuntimeError, match="rank 1 failed: killed by SIGKILL"):
        fit(compose(dpo(base, "strategy=fsdp", "trainer.devices=2", *kill)), output_dir=str(tmp_path / "killed"))
    last = tmp_path / "killed" / "checkpoints" / "last"
    merged = ["export_weights=true", "export_format=hf", "export_merge=true"]
    resumed = fit(compose(dpo(base, f"ckpt_path={last}", *merged)), output_dir=str(tmp_path / "resumed"))
    assert resumed["status"] == "completed" and resumed["steps"] == 7
    expected, got = train_losses(single_dir)[3:], train_losses(tmp_path / "resumed")
    assert got == pytest.approx(expected, abs=1e-6)
    print(f"resumed vs uninterrupted: max |train/loss diff| {max(abs(a - b) for a, b in zip(got, expected)):.2e}")
    # the uninterrupted run's adapters in peft's format and the resumed run's merged: the same model, trained
    tokens = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain = transformers.AutoModelForCausalLM.from_pretrained(base).eval()
        before = plain(tokens).logits
        adapted = peft.PeftModel.from_pretrained(plain, single_dir / "model_hf").eval()(tokens).logits
        folded = (
            transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "resumed" / "model_hf").eval()(tokens).logits
        )
    assert (adapted - folded).abs().max() <= 1e-5 and (adapted - before).abs().max() > 1e-4


def test_what_dpo_cannot_run_on_is_refused_before_start(base):
    with pytest.raises(ConfigError) as err:
        preflight(compose(["experiment=hf_dpo_preferences", "~adapter", "~adapter.r", "~adapter.alpha"]))
    assert any("takes its reference model as the policy with its adapters off" in p for p in err.value.problems)
    with pytest.raises(ConfigError) as err:
        preflight(compose(["experiment=hf_lora_instructions", "task=dpo", "predict=false"]))
    assert any("but datamodule InstructionsDataModule gives next tokens; choose datamodule=preferences" in p
               for p in err.value.problems)  # fmt: skip
    with pytest.raises(ConfigError) as err:
        preflight(compose(["experiment=hf_dpo_preferences", "task=language_modeling"]))
    assert any("gives preference pairs (a chosen and a rejected answer to each prompt); choose task=dpo" in p
               for p in err.value.problems)  # fmt: skip
    cp = ["strategy=parallel", "strategy.cp=2", "trainer.devices=2", "model=gpt/tiny", "model.vocab_size=256"]
    with pytest.raises(ConfigError) as err:
        preflight(compose(["experiment=hf_dpo_preferences", *cp, "model.max_seq_len=128"]))
    assert any(p.startswith("strategy.cp: 2 splits each sequence across ranks") for p in err.value.problems)
