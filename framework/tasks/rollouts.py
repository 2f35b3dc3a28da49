"""GRPO's rollouts: the answers a generation window samples, scored, gathered from every rank and kept,
in the global order of the prompts, until the steps they were drawn for have trained on them.

Why every rank keeps every rank's answers: the advantages of ``scale_rewards=batch``, the refills of dynamic
sampling and the metrics are over the whole window, the same numbers on any layout; and a checkpoint taken
inside a window holds the rest of it once, so that a resume on another number of ranks trains on the very
answers the uninterrupted run would (each rank takes its share by the sampler's rule: the prompts at places
r, r + W, ... of each global micro-batch)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import torch

from framework.tasks.grpo_loss import group_advantages, nanstd, weighted_rewards

_MIX = 0x9E3779B97F4A7C15


def answer_key(*parts: int) -> int:
    """The generator key of one answer: (the window's step, the prompt's row, the sample) (a refill's: the
    round after the step), never the rank; with the task's seed, it seeds that answer's draws
    (framework/tasks/generation.py). A 62-bit mix of the parts."""
    key = 0
    for part in parts:
        key = ((key ^ (part & (2**64 - 1))) * _MIX) & (2**64 - 1)
        key ^= key >> 31
    return key % 2**62


@dataclass
class Group:
    """One prompt's answers as a rank sampled them: all that every rank receives of it (plain values)."""

    micro: int  # the window's micro-batch it belongs to
    position: int  # its place in that global micro-batch (the sampler's order)
    index: int  # the prompt's row in the training split
    loaded: int  # the row the loader gave at this place (``index`` unless dynamic sampling refilled it)
    prompt: list[int]
    completions: list[list[int]]  # each answer's tokens, up to and with its end of sequence
    truncated: list[bool]  # an answer that reached max_new_tokens without an end of sequence
    rewards: list[list[float]]  # [answers][functions], NaN where a function said None


def truncate_at_eos(generated: torch.Tensor, eos: list[int]) -> tuple[list[list[int]], list[bool]]:
    """Each row of ``generated`` [answers, new] up to and with its first end-of-sequence token, and whether
    it has none (cut by ``max_new_tokens``)."""
    out, truncated = [], []
    eos_set = set(int(e) for e in eos)
    for row in generated.tolist():
        end = next((i for i, t in enumerate(row) if t in eos_set), None)
        out.append(row if end is None else row[: end + 1])
        truncated.append(end is None)
    return out, truncated


@dataclass
class Packed:
    """One global micro-batch packed for training: each answer after its prompt, padded on the right."""

    inputs: torch.Tensor  # [answers, width] the prompt and the answer but its last token
    targets: torch.Tensor  # [answers, width] the answer's tokens where counted, else -100
    lengths: torch.Tensor  # [answers] each row's tokens before its padding
    advantages: torch.Tensor  # [answers]
    index: torch.Tensor  # [prompts] the rows trained on
    loaded: torch.Tensor  # [prompts] the rows the loader gave
    old_logps: Optional[torch.Tensor] = None  # [answers, width] the sampling policy's, where the window spans steps

    def share(self, rank: int, ranks: int, group: int) -> tuple[torch.Tensor, ...]:
        """The answers of the prompts at places rank, rank + ranks, ... (``group`` answers each): (inputs,
        targets, advantages, old log-probabilities or an empty tensor), trimmed to their longest row."""
        rows = self.rows(rank, ranks, group)
        width = int(self.lengths[rows].max()) if len(rows) else 0
        old = self.old_logps[rows][:, :width] if self.old_logps is not None else torch.zeros(0)
        return self.inputs[rows][:, :width], self.targets[rows][:, :width], self.advantages[rows], old

    def rows(self, rank: int, ranks: int, group: int) -> torch.Tensor:
        prompts = torch.arange(rank, len(self.index), ranks)
        return (prompts[:, None] * group + torch.arange(group)[None, :]).flatten()

    def state(self) -> dict:
        return {k: v for k, v in vars(self).items() if v is not None}


def pack(groups: list[Group], advantages: torch.Tensor, pad: int, mask_truncated: bool) -> Packed:
    """``groups`` (one global micro-batch, in order) as training tensors; ``advantages`` [answers]. With
    ``mask_truncated``, an answer cut by max_new_tokens counts no target (TRL's mask_truncated_completions)."""
    rows = [(g.prompt, c, t) for g in groups for c, t in zip(g.completions, g.truncated)]
    lengths = torch.tensor([len(p) + len(c) - 1 for p, c, _ in rows])
    inputs = torch.full((len(rows), int(lengths.max())), pad, dtype=torch.long)
    targets = torch.full_like(inputs, -100)
    for k, (prompt, completion, truncated) in enumerate(rows):
        sequence = prompt + completion
        inputs[k, : len(sequence) - 1] = torch.tensor(sequence[:-1])
        if completion and not (mask_truncated and truncated):
            targets[k, len(prompt) - 1 : len(sequence) - 1] = torch.tensor(completion)
    index, loaded = torch.tensor([g.index for g in groups]), torch.tensor([g.loaded for g in groups])
    return Packed(inputs, targets, lengths, advantages, index, loaded)


@dataclass
class Scored:
    """A window's groups in global order with their advantages, and its metrics (TRL's names)."""

    micro_batches: list[list[Group]]
    advantages: torch.Tensor  # [answers of the whole window]
    metrics: dict[str, float] = field(default_factory=dict)


def in_order(gathered: list[list[Group]]) -> list[list[Group]]:
    """Every rank's groups, one copy each (ranks of a tensor-parallel group sample alike), as global
    micro-batches in the sampler's order."""
    unique = {(g.micro, g.position): g for groups in gathered for g in groups}
    micros = sorted({m for m, _ in unique})
    return [[unique[key] for key in sorted(k for k in unique if k[0] == m)] for m in micros]


def score(micro_batches: list[list[Group]], weights: torch.Tensor, names: list[str], scale: str) -> Scored:
    """Advantages over the window's groups and the window's metrics, as TRL logs them."""
    groups = [g for micro in micro_batches for g in micro]
    size = len(groups[0].completions)
    per_function = torch.tensor([r for g in groups for r in g.rewards], dtype=torch.float32)
    per_function = per_function.view(len(groups) * size, len(names))
    rewards = weighted_rewards(per_function, weights)
    advantages, zero_std = group_advantages(rewards, size, scale)
    lengths = torch.tensor([float(len(c)) for g in groups for c in g.completions])
    truncated = torch.tensor([t for g in groups for t in g.truncated])
    terminated = lengths[~truncated] if bool((~truncated).any()) else torch.zeros(1)
    metrics = {
        "reward": float(torch.nanmean(rewards)),
        "reward_std": float(nanstd(rewards)),
        "frac_reward_zero_std": float(zero_std.float().mean()),
        "completions/mean_length": float(lengths.mean()),
        "completions/min_length": float(lengths.min()),
        "completions/max_length": float(lengths.max()),
        "completions/clipped_ratio": float(truncated.float().mean()),
        "completions/mean_terminated_length": float(terminated.mean()),
    }
    for i, name in enumerate(names):
        metrics[f"rewards/{name}/mean"] = float(torch.nanmean(per_function[:, i]))
        metrics[f"rewards/{name}/std"] = float(nanstd(per_function[:, i]))
    return Scored(micro_batches, advantages, {k: (0.0 if math.isnan(v) else v) for k, v in metrics.items()})


def zero_std_groups(groups: list[Group], weights: torch.Tensor) -> list[bool]:
    """Whether each group's rewards are all alike (dynamic sampling drops those: no advantage to learn from)."""
    out = []
    for g in groups:
        rewards = weighted_rewards(torch.tensor(g.rewards, dtype=torch.float32), weights)
        scored = rewards[~torch.isnan(rewards)]
        out.append(len(scored) < 2 or bool(torch.isclose(scored.max(), scored.min())))
    return out
