"""task=dpo's loss against TRL's DPOTrainer on the same model, pairs and beta (both in float32): the
sigmoid, ipo and hinge losses, and the rewards TRL logs; the reference is the base (adapters off)."""

from __future__ import annotations

import math

import pytest
import torch

from framework.config.schemas import AdapterConfig
from framework.data import PreferencesDataModule
from framework.tasks.dpo import DPOTask, preference_losses

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


def _bytes_tokenizer():
    """A Hugging Face tokenizer of one token per byte (ids 0-255, the framework's byte tokens), with an
    end-of-sequence token 256: what DPOTrainer needs to build; the batches it scores are ours."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    chars = {**{b: chr(b) for b in printable}, **{b: chr(256 + i) for i, b in enumerate(others)}}  # GPT-2's map
    vocab = {chars[b]: b for b in range(256)} | {"<eos>": 256}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<eos>", pad_token="<eos>")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(our adapted model, its base's directory): adapters of r=4 on the attention, B drawn non-zero."""
    from framework.models import HFCausalLM
    from framework.models.lora import inject_adapters

    base = tmp_path_factory.mktemp("llama")
    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(base)
    ours = HFCausalLM(path=str(base))
    inject_adapters(ours, AdapterConfig(r=4, alpha=8.0, target_modules=TARGETS), seed=0)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in ours.named_parameters():
            if name.endswith("lora_b"):
                param.copy_(torch.randn(param.shape, generator=generator))
    return ours.eval(), base


def _copy_adapters(ours, theirs) -> None:
    """Our adapters into a peft model's (base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight)."""
    adapters = {n: p for n, p in ours.named_parameters() if "lora_" in n}
    copied = 0
    with torch.no_grad():
        for name, param in theirs.named_parameters():
            if ".lora_" in name:
                module = name.split("base_model.model.model.")[1].split(".lora_")[0]
                param.copy_(adapters[f"{module}.lora_{'a' if '.lora_A.' in name else 'b'}"])
                copied += 1
    assert copied == len(adapters)


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
        processing_class=_bytes_tokenizer(),
        peft_config=peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS),
    )
    _copy_adapters(ours, trainer.model)
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
        peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS),
    ).eval()
    _copy_adapters(ours, theirs)
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
