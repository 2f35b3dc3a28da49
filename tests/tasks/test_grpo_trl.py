"""task=grpo's step against TRL's GRPOTrainer (trl 1.16) on the same model, prompts, answers and rewards:
the answers are injected into TRL's generation and into our rollout pieces alike, then both compute one
step's loss and the adapters' gradients, for each loss_type and scale_rewards; with a sampling policy
older than the model (the clip at work) and with a KL to the reference (the adapters off)."""

from __future__ import annotations

import pytest
import torch

from framework.tasks.grpo import GRPOTask
from framework.tasks.grpo_loss import token_logps
from framework.tasks.rollouts import Group, pack, score
from tests.helpers.hf_twins import adapted_tiny_llama, bytes_tokenizer, copy_adapters, peft_config, peft_name

transformers = pytest.importorskip("transformers")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

EOS, G, NEW, TEMPERATURE = 256, 4, 6, 0.7
PROMPTS = ["7+5=", "12-3*2="]
# the answers (an end of sequence closes all but the truncated ones) and two reward functions' values
ANSWERS = [
    [[*b"12", EOS], [*b"3", EOS], [*b"12 ok!"], [EOS]],
    [[*b"6", EOS], [*b"6.0", EOS], [*b"xyzwvu"], [*b"-", EOS]],
]
REWARDS = [[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]], [[0.5, 0.2, None, 0.1], [0.3, 0.3, 0.9, -0.4]]


def _right(*_, **__) -> list:
    return [r for group in REWARDS[0] for r in group]


def _short(*_, **__) -> list:
    return [r for group in REWARDS[1] for r in group]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return adapted_tiny_llama(tmp_path_factory.mktemp("llama"), vocab_size=257)


def _trainer(base, ours, tmp_path, **options):
    """TRL's GRPOTrainer on the base with a new peft adapter given our adapters' weights, its generation
    replaced by ANSWERS."""
    args = trl.GRPOConfig(
        output_dir=str(tmp_path), report_to=[], use_cpu=True, bf16=False, per_device_train_batch_size=len(PROMPTS) * G,
        num_generations=G, max_completion_length=NEW, temperature=TEMPERATURE, reward_weights=[1.0, 0.5], **options,
    )  # fmt: skip
    trainer = trl.GRPOTrainer(
        model=transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
        reward_funcs=[_right, _short],
        args=args,
        train_dataset=datasets.Dataset.from_list([{"prompt": p} for p in PROMPTS]),
        processing_class=bytes_tokenizer(),
        peft_config=peft_config(),
    )
    copy_adapters(ours, trainer.model)
    trainer.current_gradient_accumulation_steps = 1
    trainer._generate_single_turn = lambda *_, **__: ([a for group in ANSWERS for a in group], None)
    trainer.model.train()
    return trainer


def _trl_step(trainer, old_shift: float):
    """TRL's advantages, loss and adapter gradients for ANSWERS (``old_shift``: the sampling policy's
    log-probabilities are the model's minus a fixed pattern of this size, injected as TRL's old ones)."""
    inputs = [{"prompt": p} for p in PROMPTS for _ in range(G)]
    batch = trainer._generate_and_score_completions(inputs)
    if old_shift:
        with torch.no_grad():
            logps, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1),
                torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1), batch["completion_ids"].size(1),
            )  # fmt: skip
        batch["old_per_token_logps"] = logps - _shift(logps.shape, old_shift)
    trainer.model.zero_grad()
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    grads = {peft_name(n): p.grad.clone() for n, p in trainer.model.named_parameters() if ".lora_" in n}
    return batch["advantages"], float(loss), grads


def _shift(shape, size: float) -> torch.Tensor:
    """A fixed pattern of log-ratios, both signs, some beyond the clip."""
    return size * torch.sin(torch.arange(shape[0] * shape[1], dtype=torch.float32)).view(shape)


def _our_step(ours, task: GRPOTask, scale: str, mask_truncated: bool, old_shift: float):
    groups = [
        Group(0, k, k, k, list(prompt.encode()), ANSWERS[k], [a[-1] != EOS for a in ANSWERS[k]],
              [[right, float("nan") if short is None else short] for right, short in zip(REWARDS[0][k], REWARDS[1][k])])
        for k, prompt in enumerate(PROMPTS)
    ]  # fmt: skip
    scored = score([groups], torch.tensor([1.0, 0.5]), ["_right", "_short"], scale)
    inputs, targets, advantages, old = pack(groups, scored.advantages, 0, mask_truncated).share(0, 1, G)
    if old_shift:
        with torch.no_grad():
            logps = token_logps(ours(inputs), targets, TEMPERATURE)
        old = logps - _in_place_of(targets, _shift((len(targets), NEW), old_shift))
    ours.zero_grad()
    ours.train()
    loss, metrics = task.step(ours, (inputs, targets, advantages, old), "train")
    loss.backward()
    return scored, float(loss), {n: p.grad.clone() for n, p in ours.named_parameters() if "lora_" in n}, metrics


def _in_place_of(targets: torch.Tensor, per_answer: torch.Tensor) -> torch.Tensor:
    """TRL's [answers, completion position] values at our answers' places in the packed rows."""
    out = torch.zeros(targets.shape)
    for k, row in enumerate(targets):
        start = int((row != -100).nonzero()[0]) if bool((row != -100).any()) else 0
        n = min(NEW, targets.shape[1] - start)
        out[k, start : start + n] = per_answer[k, :n]
    return out


CASES = [
    ("dapo", "group", False, 0.0, 0.0),
    ("grpo", "group", False, 0.0, 0.0),
    ("dr_grpo", "none", False, 0.0, 0.0),
    ("dapo", "batch", True, 0.0, 0.0),
    ("grpo", "batch", False, 0.5, 0.0),
    ("dapo", "group", False, 0.5, 0.04),
]


@pytest.mark.parametrize("loss_type, scale, mask_truncated, old_shift, beta", CASES)
def test_one_step_gives_trls_loss_and_adapter_gradients(
    models, tmp_path, loss_type, scale, mask_truncated, old_shift, beta
):
    ours, base = models
    options = dict(loss_type=loss_type, scale_rewards=scale, mask_truncated_completions=mask_truncated, beta=beta,
                   epsilon=0.2, epsilon_high=0.28)  # fmt: skip
    trainer = _trainer(base, ours, tmp_path, **options)
    trl_advantages, trl_loss, trl_grads = _trl_step(trainer, old_shift)
    task = GRPOTask(
        rewards=["framework.tasks.rewards.accuracy"], num_generations=G, max_new_tokens=NEW, temperature=TEMPERATURE,
        **{k: v for k, v in options.items() if k != "mask_truncated_completions"},
        mask_truncated_completions=mask_truncated,
    )  # fmt: skip
    scored, loss, grads, metrics = _our_step(ours, task, scale, mask_truncated, old_shift)
    assert torch.allclose(scored.advantages, trl_advantages, atol=1e-5), (scored.advantages, trl_advantages)
    assert abs(loss - trl_loss) <= 1e-5 * max(1.0, abs(trl_loss)), (loss, trl_loss)
    assert abs(loss) > 1e-4 or not old_shift  # (a loss that is not 0 by symmetry where the policy moved)
    assert grads.keys() == trl_grads.keys() and len(grads) == 16
    for name, grad in grads.items():
        assert torch.allclose(grad, trl_grads[name], atol=1e-5, rtol=1e-4), name
    assert max(float(g.abs().max()) for g in grads.values()) > 1e-4  # (gradients that say something)
    logged = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    assert scored.metrics["reward"] == pytest.approx(logged["reward"], abs=1e-6)
    assert scored.metrics["reward_std"] == pytest.approx(logged["reward_std"], abs=1e-6)
    assert scored.metrics["rewards/_short/mean"] == pytest.approx(logged["rewards/_short/mean"], abs=1e-6)
    assert scored.metrics["frac_reward_zero_std"] == pytest.approx(logged["frac_reward_zero_std"], abs=1e-6)
    assert scored.metrics["completions/clipped_ratio"] == pytest.approx(logged["completions/clipped_ratio"], abs=1e-6)
    assert scored.metrics["completions/mean_length"] == pytest.approx(logged["completions/mean_length"], abs=1e-6)
    assert float(metrics["clip_ratio/region_mean"]) == pytest.approx(logged["clip_ratio/region_mean"], abs=1e-6)
    if old_shift:
        assert logged["clip_ratio/region_mean"] > 0  # (the clip held some tokens)
    if beta:
        assert float(metrics["kl"]) == pytest.approx(logged["kl"], abs=1e-6)
