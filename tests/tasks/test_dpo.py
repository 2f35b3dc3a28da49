"""task=dpo's loss against TRL's DPOTrainer on the same model, pairs and beta (both in float32): the
sigmoid, ipo and hinge losses, and the rewards TRL logs; the reference is the base (adapters off)."""

from __future__ import annotations

import math

import pytest
import torch

from framework.data import PreferencesDataModule
from framework.tasks.dpo import DPOTask, preference_losses
from tests.helpers.hf_twins import adapted_tiny_llama, bytes_tokenizer, copy_adapters, peft_config

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(our adapted model, its base's directory): adapters of r=4 on the attention, B drawn non-zero."""
    return adapted_tiny_llama(tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="module")
def pairs():
    """8 shipped pairs as our datamodule batches them, and as TRL's collator would: input_ids with the
    last answer token, attention and completion masks."""
    data = PreferencesDataModule(batch_size=8, seq_len=128)
    data.setup("fit")
    samples = [data.train_set[i] for i in range(8)]
    inputs, targets = data.train_set.collate(samples)
    rows = [s[0:2] for s in samples] + [s[2:4] for s in samples]
    width = max(len(i) for i, _ in rows) + 1
    trl_batch = {
        k: torch.zeros(len(rows), width, dtype=torch.long) for k in ("input_ids", "attention_mask", "completion_mask")
    }
    for k, (i, t) in enumerate(rows):
        trl_batch["input_ids"][k, : len(i) + 1] = torch.cat([i, t[-1:]])  # (the last token is an answer's)
        trl_batch["attention_mask"][k, : len(i) + 1] = 1
        trl_batch["completion_mask"][k, 1 : len(t) + 1] = (t != -100).long()
    return (inputs, targets), trl_batch


def _trl_loss(ours, base, trl_batch, loss_type: str, tmp_path) -> tuple[float, dict]:
    """TRL's DPOTrainer on ``trl_batch``: the base with a new peft adapter (its reference: the adapter
    disabled), that adapter then given our adapters' weights."""
    args = trl.DPOConfig(
        output_dir=str(tmp_path), report_to=[], use_cpu=True, bf16=False, beta=0.1, loss_type=[loss_type],
        per_device_train_batch_size=2,
    )  # fmt: skip
    rows = [{"prompt": "Q? ", "chosen": "yes", "rejected": "no"}] * 2
    trainer = trl.DPOTrainer(
        model=transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=bytes_tokenizer(),
        peft_config=peft_config(),
    )
    copy_adapters(ours, trainer.model)
    assert next(trainer.model.parameters()).dtype == torch.float32
    trainer.model.eval()
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, trl_batch)
    return float(loss), {k: v[-1] for k, v in trainer._metrics["eval"].items()}


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "hinge"])
def test_one_batch_gives_trls_dpo_loss_and_rewards(models, pairs, loss_type, tmp_path):
    ours, base = models
    batch, trl_batch = pairs
    expected, logged = _trl_loss(ours, base, trl_batch, loss_type, tmp_path)
    with torch.no_grad():
        loss, metrics = DPOTask(beta=0.1, loss_type=loss_type).step(ours, batch, "val")
    # (ipo's loss is (margin - 1 / (2 beta))^2, about 25 here, where float32's values lie 1.9e-6 apart)
    assert abs(float(loss) - expected) <= 1e-6 * max(1.0, abs(expected)), (float(loss), expected)
    assert abs(float(loss) - math.log(2)) > 1e-3  # (the adapters move the policy off its reference)
    assert float(metrics["reward_accuracy"]) == pytest.approx(logged["rewards/accuracies"], abs=1e-6)
    assert float(metrics["reward_margin"]) == pytest.approx(logged["rewards/margins"], abs=1e-6)
    assert float(metrics["reward_chosen"]) == pytest.approx(logged["rewards/chosen"], abs=1e-6)


def test_with_the_adapters_off_the_model_is_its_base(models, pairs):
    from framework.models.lora import adapters_off

    ours, base = models
    (inputs, _), _ = pairs
    theirs = peft.get_peft_model(
        transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
        peft_config(),
    ).eval()
    copy_adapters(ours, theirs)
    with torch.no_grad():
        adapted = ours(inputs)
        assert (theirs(input_ids=inputs).logits - adapted).abs().max() <= 1e-5
        with adapters_off(ours) as switched, theirs.disable_adapter():
            alone, library_alone = ours(inputs), theirs(input_ids=inputs).logits
        assert switched == 8
        assert (alone - library_alone).abs().max() <= 1e-5
        assert (adapted - alone).abs().max() > 1e-3 and torch.equal(ours(inputs), adapted)  # (switched back on)


def test_a_policy_equal_to_its_reference_loses_log_2_per_pair_and_counts_pairs():
    logps = torch.tensor([-3.0, -5.0, -4.0, -2.0])
    assert torch.allclose(preference_losses(logps, logps, 0.1, "sigmoid"), torch.full((2,), math.log(2)))
    assert DPOTask().counted(torch.zeros(6, 9, dtype=torch.long)).item() == 3
    with pytest.raises(ValueError, match="task.loss_type: 'kto' is not one of sigmoid, ipo, hinge"):
        DPOTask(loss_type="kto")
