"""GRPO's arithmetic, as TRL's ``GRPOTrainer`` computes it (trl 1.16, ``_generate_and_score_completions``
and ``_compute_loss``): the rewards of a group of answers to one prompt turned into advantages, and the
clipped policy-gradient loss of each answer's tokens, with a k3 estimate of the KL to the reference.

Pure functions of tensors: the rollouts (tasks/rollouts.py) and the task (tasks/grpo.py) call them, and
the test against TRL feeds both the same answers and rewards."""

from __future__ import annotations

from typing import Optional

import torch
from torch.nn import functional as F

LOSS_TYPES = ("grpo", "dapo", "dr_grpo")  # TRL's names (GRPOConfig.loss_type); its default is dapo
SCALES = ("group", "batch", "none")  # GRPOConfig.scale_rewards


def nanstd(values: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    """The sample standard deviation (n - 1) of the values that are not NaN (TRL's ``nanstd``); NaN where
    fewer than two are."""
    mean = torch.nanmean(values, dim=dim, keepdim=True)
    variance = torch.nanmean((values - mean) ** 2, dim=dim, keepdim=True)
    count = (~torch.isnan(values)).sum(dim=dim, keepdim=True)
    correction = torch.where(count > 1, count / (count - 1).clamp(min=1), torch.full_like(variance, float("nan")))
    out = (variance * correction).sqrt()
    return out if dim is None else out.squeeze(dim)


def weighted_rewards(per_function: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Each answer's reward [answers]: the weighted sum of its functions' rewards [answers, functions],
    a function's None (NaN) left out; NaN where every function said None (TRL: unscorable)."""
    rewards = (per_function * weights[None, :]).nansum(dim=1)
    return rewards.masked_fill(torch.isnan(per_function).all(dim=1), float("nan"))


def group_advantages(rewards: torch.Tensor, group: int, scale: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages [answers], whether each answer's std was 0 [answers]): each reward minus its group's
    mean (``group`` answers per prompt, in order), divided by the std (+1e-4) of its group (``scale``
    "group"), of all the rewards ("batch"), or not ("none"). An unscorable answer's advantage is 0."""
    grouped = rewards.view(-1, group)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(group)
    if scale == "batch":
        std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
    else:
        std = nanstd(grouped, dim=1).repeat_interleave(group)
    advantages = rewards - mean
    if scale != "none":
        advantages = advantages / (std + 1e-4)
    zero_std = torch.isclose(std, torch.zeros_like(std))
    return torch.nan_to_num(advantages, nan=0.0), zero_std


def token_logps(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """Each target token's log-probability under ``logits`` / ``temperature`` (as the answers were
    sampled), float32 [rows, seq]; 0 where the target is -100."""
    scaled = logits.float() / temperature if temperature != 1.0 else logits.float()
    nll = F.cross_entropy(scaled.flatten(0, 1), targets.flatten(), ignore_index=-100, reduction="none")
    return -nll.view(targets.shape)


def clipped_token_losses(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    epsilon: float,
    epsilon_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(each token's clipped policy-gradient loss [rows, seq], its ratio to the sampling policy [rows, seq]):
    -min(r A, clip(r, 1 - epsilon, 1 + epsilon_high) A), r = exp(logp - old logp), A the row's advantage."""
    ratio = torch.exp(logps - old_logps)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
    a = advantages[:, None]
    return -torch.min(ratio * a, clipped * a), ratio


def k3_kl(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """The k3 estimate of KL(policy || reference) per token: exp(ref - logp) - (ref - logp) - 1."""
    delta = ref_logps - logps
    return torch.exp(delta) - delta - 1


def aggregate(token_losses: torch.Tensor, mask: torch.Tensor, loss_type: str, max_new_tokens: int) -> torch.Tensor:
    """The micro-batch's loss from its tokens' ([rows, seq], counted where ``mask``): ``grpo`` each row's
    token mean, then their mean; ``dapo`` the mean over every counted token; ``dr_grpo`` the sum over
    rows x ``max_new_tokens``. Each is a mean over what the task's ``counted`` counts (rows; tokens), so
    the engine makes it the mean over the global batch on every layout and accumulation."""
    summed = (token_losses * mask).sum(dim=1)
    if loss_type == "grpo":
        return (summed / mask.sum(dim=1).clamp(min=1)).mean()
    if loss_type == "dr_grpo":
        return summed.sum() / (token_losses.shape[0] * max_new_tokens)
    return summed.sum() / mask.sum().clamp(min=1)
