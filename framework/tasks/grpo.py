"""``task=grpo``: Group Relative Policy Optimization with the answers sampled in the loop, as TRL's
``GRPOTrainer`` computes it (its option and metric names; its default loss is DAPO's), on prompt rows
(datamodule=prompts, reasoning_gym) scored by ``task.rewards`` (framework/tasks/reward_calls.py).

For each prompt, ``num_generations`` answers are sampled from the policy (framework/tasks/generation.py),
each from a generator keyed by (seed, step, prompt, answer), never by rank; their rewards become
advantages within the prompt's group; the loss is the clipped policy gradient of the answers' tokens
(framework/tasks/grpo_loss.py). The engine asks for a window of answers every ``steps_per_generation``
micro-batches of prompts (null: one optimizer step's), and trains on them micro-batch by micro-batch
(framework/engine/rollout_steps.py); what a later step reuses (the answers, their advantages, the old
log-probabilities) is the task's checkpointed state, so a resume inside a window trains on the same answers.

``counted`` makes each loss a mean over the global batch on every layout: DAPO's over every answer token,
GRPO's and Dr. GRPO's over the answers. The reference of ``beta`` > 0 is the policy with its adapters off,
as in task=dpo."""

from __future__ import annotations

from typing import Literal, Optional, Sequence, Union

import torch

from framework.config.experiment import Experiment
from framework.config.ranges import Range
from framework.models.lora import adapters_off
from framework.tasks.generation import Sampling, plain_module
from framework.tasks.grpo_checks import GRPORunChecks
from framework.tasks.grpo_loss import aggregate, clipped_token_losses, group_advantages, k3_kl, token_logps
from framework.tasks.language_modeling import LanguageModelingTask
from framework.tasks.reward_calls import Rewards
from framework.tasks.rollout_window import RolloutContext, RolloutWindow, SamplingPlan
from framework.tasks.rollouts import weighted_rewards


class GRPOTask:
    """``task.rewards``: the reward functions (an import path each, or ``{function, weight, <option>: ...}``);
    ``num_generations`` (G) answers per prompt of at most ``max_new_tokens`` tokens, drawn at ``temperature``
    with ``top_k`` / ``top_p`` and ``seed``; ``loss_type``, ``scale_rewards``, ``epsilon``, ``epsilon_high``
    (null: ``epsilon``), ``beta``, ``use_bias_correction_kl``, ``mask_truncated_completions``,
    ``steps_per_generation`` (micro-batches per window; null: ``trainer.accumulate_grad_batches``) and
    ``num_generations_eval`` as TRL's; with
    ``dynamic_sampling``, a group whose rewards are all alike is replaced by a new prompt's, for at most
    ``max_sampling_rounds`` rounds a window. ``predict=true`` answers greedily."""

    targets, model_outputs = "prompts", "logits per token"  # what the checks before start match
    argument_ranges = {
        "num_generations": Range(low=2, note=" (a group's advantages are its rewards against each other)"),
        "num_generations_eval": Range(low=1),
        "max_new_tokens": Range(low=1),
        "temperature": Range(low=0, strict=True, note=" (the answers of a group are samples)"),
        "top_k": Range(low=0),
        "top_p": Range(low=0, high=1, strict=True),
        "epsilon": Range(low=0),
        "epsilon_high": Range(low=0),
        "beta": Range(low=0),
        "steps_per_generation": Range(low=1),
        "max_sampling_rounds": Range(low=1),
    }

    def __init__(
        self,
        rewards: Sequence = (),
        num_generations: int = 8,
        max_new_tokens: int = 64,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        loss_type: Literal["grpo", "dapo", "dr_grpo"] = "dapo",
        scale_rewards: Literal["group", "batch", "none"] = "group",
        epsilon: float = 0.2,
        epsilon_high: Optional[float] = None,
        beta: float = 0.0,
        use_bias_correction_kl: bool = True,
        mask_truncated_completions: bool = False,
        steps_per_generation: Optional[int] = None,
        num_generations_eval: Optional[int] = None,
        dynamic_sampling: bool = False,
        max_sampling_rounds: int = 4,
        pad_token: Optional[int] = None,
        eos_token_id: Union[int, Sequence[int], None] = None,
    ):
        self.rewards = Rewards(rewards)
        self.num_generations, self.num_generations_eval = num_generations, num_generations_eval or num_generations
        self.sampling = Sampling(max_new_tokens, temperature, top_k, top_p, seed)
        self.loss_type, self.scale_rewards, self.beta = loss_type, scale_rewards, beta
        self.bias_correction = use_bias_correction_kl
        self.epsilon = epsilon
        self.epsilon_high = epsilon if epsilon_high is None else epsilon_high
        self.mask_truncated = mask_truncated_completions
        self.steps_per_generation = steps_per_generation
        self.refill_rounds = max_sampling_rounds if dynamic_sampling else 0
        # predict=true (and the harness) generate as the language-modelling task does, greedily: the answer
        # the policy gives, where the training answers are samples to explore with
        self.generation = LanguageModelingTask(
            -100, False, None, max_new_tokens, 0.0, 0, 1.0, seed, pad_token, eos_token_id
        )
        self.window: Optional[RolloutWindow] = None
        self._saved: Optional[dict] = None  # a checkpoint's window, until the data is connected
        self.steps_sampled = 0  # the step of the latest window (the reward functions' trainer_state in validation)

    @classmethod
    def check_config(cls, rewards: Sequence = (), **_) -> list[str]:
        """Before start: every reward function imports, and its options bind (keyed relative to the task)."""
        return Rewards.problems(rewards)

    @classmethod
    def check_run(cls, run: Experiment) -> list[str]:
        """Before start: prompts from the data, logits per token from the model, the batch arithmetic, room
        for the answers, the columns the reward functions ask for, and a layout that runs it."""
        return GRPORunChecks(run).problems()

    def connect(self, datamodule) -> None:
        """The prompt rows (their columns go to the rewards) and the tokenizer's end-of-sequence and pad ids."""
        self.generation.connect(datamodule)
        pad = self.generation.pad_token if self.generation.pad_token is not None else next(iter(self.eos), 0)
        plan = SamplingPlan(
            self.num_generations, self.sampling, tuple(self.eos), pad, self.scale_rewards, self.mask_truncated,
            self.refill_rounds,
        )  # fmt: skip
        self.window = RolloutWindow(self.rewards, plan, datamodule)
        if self._saved is not None:
            self.window.load_state_dict(self._saved)

    @property
    def eos(self) -> list:
        return self.generation.eos

    # ---------------------------------------------------------------- the engine's rollout protocol
    @property
    def rollouts_left(self) -> int:
        """Micro-batches of answers sampled and not yet trained on."""
        return self.window.left if self.window is not None else 0

    @torch.no_grad()
    def rollout(self, model: torch.nn.Module, prompts: list, context: RolloutContext) -> None:
        """Sample and score the answers to this rank's ``prompts`` (micro-batches of prompt rows) for the
        window starting at ``context.step``; every rank then holds every rank's (framework/tasks/rollout_window.py)."""
        self.steps_sampled = context.step
        self.window.sample(plain_module(model), prompts, context)

    def next_rollout(self, rank: int, ranks: int) -> tuple[torch.Tensor, ...]:
        """The next micro-batch to train on: (inputs, targets, advantages, old log-probabilities or empty)."""
        return self.window.next_share(rank, ranks)

    def rollout_rows(self, rank: int, ranks: int) -> list[list[int]]:
        """The prompt rows the loader gives ``rank`` for each micro-batch the window still holds."""
        return self.window.loaded_rows(rank, ranks)

    def state_dict(self) -> dict:
        return self.window.state_dict() if self.window is not None else {}

    def load_state_dict(self, state: dict) -> None:
        self._saved = state
        if self.window is not None:
            self.window.load_state_dict(state)

    # ---------------------------------------------------------------- the loss
    def step(self, model: torch.nn.Module, batch, stage: str):
        if stage != "train":
            return self._evaluate(model, batch, stage)
        inputs, targets, advantages, old = batch
        logps = token_logps(model(inputs), targets, self.sampling.temperature)
        mask = targets != -100
        old = logps.detach() if old.numel() == 0 else old  # (on-policy: the ratio is 1, its gradient is not)
        losses, ratio = clipped_token_losses(logps, old, advantages, self.epsilon, self.epsilon_high)
        metrics = dict(self._clip_metrics(ratio, advantages, mask))
        if self.beta:
            kl = k3_kl(logps, self._reference(model, inputs, targets))
            kl = kl * ratio if self.bias_correction else kl  # (TRL's default: the unbiased reverse-KL gradient)
            losses = losses + self.beta * kl
            metrics["kl"] = _global_mean(kl, mask)
        loss = aggregate(losses, mask, self.loss_type, self.sampling.max_new_tokens)
        sampled = self.window.metrics if self.window is not None else {}
        window = {k: torch.tensor(v, device=loss.device) for k, v in sampled.items()}
        return loss, {**window, **metrics}

    def _reference(self, model, inputs, targets) -> torch.Tensor:
        with torch.no_grad(), adapters_off(model):
            return token_logps(plain_module(model)(inputs), targets, self.sampling.temperature)

    def _clip_metrics(self, ratio, advantages, mask):
        """TRL's clip_ratio/*: the share of counted tokens whose ratio the clip held (over every rank's)."""
        low = (ratio < 1 - self.epsilon) & (advantages[:, None] < 0)
        high = (ratio > 1 + self.epsilon_high) & (advantages[:, None] > 0)
        yield "clip_ratio/low_mean", _global_mean(low.float(), mask)
        yield "clip_ratio/high_mean", _global_mean(high.float(), mask)
        yield "clip_ratio/region_mean", _global_mean((low | high).float(), mask)

    def counted(self, targets: torch.Tensor) -> torch.Tensor:
        """What the loss averages over: the counted answer tokens (dapo), or the answers (grpo, dr_grpo)."""
        if self.loss_type == "dapo":
            return (targets != -100).sum()
        return torch.tensor(targets.shape[0], device=targets.device)

    @torch.no_grad()
    def _evaluate(self, model, batch: dict, stage: str):
        """Held-out prompts: ``num_generations_eval`` answers each, drawn by keys fixed across passes (the
        reward changes with the policy alone); the loss at ratio 1, as TRL's evaluation computes it."""
        context = RolloutContext(step=self.steps_sampled, epoch=0, rank=0, ranks=1, gather=lambda obj: [obj])
        groups = self.window.groups(plain_module(model), batch, (-1,), 0, context, stage, self.num_generations_eval)
        return self._evaluation_results(groups, batch["input_ids"].device)

    def _evaluation_results(self, groups, device):
        per_function = torch.tensor([r for g in groups for r in g.rewards], dtype=torch.float32)
        rewards = weighted_rewards(per_function, self.rewards.weights)
        size = len(groups[0].completions)
        advantages, zero_std = group_advantages(rewards, size, self.scale_rewards)
        lengths = [
            len(c) * (not (self.mask_truncated and t)) for g in groups for c, t in zip(g.completions, g.truncated)
        ]
        mask = torch.arange(max(max(lengths), 1))[None, :] < torch.tensor(lengths)[:, None]
        loss = aggregate(-advantages[:, None].expand(mask.shape), mask, self.loss_type, self.sampling.max_new_tokens)
        metrics = {
            "reward": torch.nanmean(rewards),
            "frac_reward_zero_std": zero_std.float().mean(),
            "completions/mean_length": torch.tensor([float(len(c)) for g in groups for c in g.completions]).mean(),
            "completions/clipped_ratio": torch.tensor([float(t) for g in groups for t in g.truncated]).mean(),
            **{f"rewards/{n}/mean": torch.nanmean(per_function[:, i]) for i, n in enumerate(self.rewards.names)},
        }
        return loss.to(device), {k: torch.nan_to_num(v).to(device) for k, v in metrics.items()}

    @torch.no_grad()
    def predict_step(self, model: torch.nn.Module, batch) -> dict[str, torch.Tensor]:
        """Continuations of prompts, as task=language_modeling generates them."""
        return self.generation.predict_step(model, batch)


def _global_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``values`` where ``mask``, over every rank's micro-batch (a training step's collective:
    every rank runs it; ranks that hold the same batch count it alike, so the mean is unchanged)."""
    import torch.distributed as dist

    totals = torch.stack([(values.detach() * mask).sum(), mask.sum().to(values.dtype)])
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(totals)
    return totals[0] / totals[1].clamp(min=1)
