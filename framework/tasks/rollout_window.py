"""The window of ``task=grpo``: the answers sampled for ``steps_per_generation`` micro-batches of prompts,
scored and kept until trained on (framework/tasks/rollouts.py holds its pieces).

Every rank samples its own prompts (each answer from a generator keyed by the window's step, the prompt's row
and the answer's number: the same answers on any layout), then every rank receives every rank's, in the
sampler's global order. Dynamic sampling refills the groups whose rewards are all alike with prompts drawn
from the training split by a generator keyed by (seed, step, round), never from the loader (whose place a
checkpoint records). Where the window spans several optimizer steps, the sampling policy's log-probabilities
are computed once, at sampling, as TRL's ``old_per_token_logps``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from framework.tasks.generation import Sampling, generate
from framework.tasks.grpo_loss import token_logps
from framework.tasks.reward_calls import Rewards
from framework.tasks.rollouts import Group, Packed, answer_key, in_order, pack, score, truncate_at_eos, zero_std_groups


@dataclass(frozen=True)
class RolloutContext:
    """Where a window is sampled: the optimizer step and epoch it starts at, this rank's place among the
    data-parallel ranks, every rank's objects (``gather``: the engine's all-gather), and whether the window
    spans optimizer steps (then the sampling policy's log-probabilities are kept)."""

    step: int
    epoch: int
    rank: int
    ranks: int
    gather: Callable[[object], list]
    spans_steps: bool = False


@dataclass(frozen=True)
class SamplingPlan:
    """How a window samples: ``generations`` answers per prompt, drawn as ``sampling`` says, ended at ``eos``,
    padded with ``pad``; ``scale`` the advantages' std; ``mask_truncated``: answers without an end count no
    target; ``refill_rounds``: dynamic sampling's rounds (0: off)."""

    generations: int
    sampling: Sampling
    eos: tuple
    pad: int
    scale: str
    mask_truncated: bool
    refill_rounds: int = 0


class RolloutWindow:
    """The window being trained on: ``left`` global micro-batches, ``next_share`` the next one's part for a rank."""

    def __init__(self, rewards: Rewards, plan: SamplingPlan, data):
        self.rewards, self.plan, self.data = rewards, plan, data  # data: the prompts datamodule (rows, codec)
        self.micro_batches: list[Packed] = []
        self.metrics: dict[str, float] = {}

    @property
    def left(self) -> int:
        return len(self.micro_batches)

    def sample(self, model, prompts: list[dict], context: RolloutContext) -> None:
        """Sample, score and keep the window of this rank's ``prompts`` (its micro-batches of prompt rows)."""
        groups = []
        for micro, batch in enumerate(prompts):
            groups += self.groups(model, batch, (context.step,), micro, context, "train")
        micro_batches = in_order(context.gather(groups))
        extra = self._refill(model, micro_batches, context) if self.plan.refill_rounds else {}
        scored = score(micro_batches, self.rewards.weights, self.rewards.names, self.plan.scale)
        size, start = self.plan.generations, 0
        self.micro_batches = []
        for groups in scored.micro_batches:
            answers = len(groups) * size
            advantages = scored.advantages[start : start + answers]
            self.micro_batches.append(pack(groups, advantages, self.plan.pad, self.plan.mask_truncated))
            start += answers
        if context.spans_steps:
            self._old_logps(model, context)
        logged = {name: sum(v) / len(v) for name, v in self.rewards.metrics.items() if v}
        self.rewards.metrics.clear()
        self.metrics = {**scored.metrics, **extra, **logged}

    def groups(
        self, model, batch: dict, key: tuple, micro: int, context: RolloutContext, stage: str, size: int = 0
    ) -> list[Group]:
        """``size`` answers (0: the plan's) to each prompt of one micro-batch (``batch``: ``input_ids``,
        ``attention_mask``, ``index``), scored; ``key``: what, besides the row and the answer's number, seeds
        their draws."""
        tokens, mask, index = batch["input_ids"], batch["attention_mask"].bool(), batch["index"].tolist()
        size, plan = size or self.plan.generations, self.plan
        keys = torch.tensor([answer_key(*key, i, j) for i in index for j in range(size)])
        generated = generate(
            model, tokens.repeat_interleave(size, 0), mask.repeat_interleave(size, 0), plan.sampling, plan.eos,
            plan.pad, rows=keys,
        )  # fmt: skip
        completions, truncated = truncate_at_eos(generated, list(plan.eos))
        rewards = self._score([i for i in index for _ in range(size)], completions, context, stage).tolist()
        return [
            Group(
                micro,
                context.rank + k * context.ranks,
                i,
                i,
                tokens[k][mask[k]].tolist(),
                completions[k * size : (k + 1) * size],
                truncated[k * size : (k + 1) * size],
                rewards[k * size : (k + 1) * size],
            )  # fmt: skip
            for k, i in enumerate(index)
        ]

    def _score(self, rows: list[int], completions: list[list[int]], context: RolloutContext, stage: str):
        """Every reward function's reward of each completion, as TRL calls them (the rows' prompts, the
        completions as text or as an assistant's message, the rows' other columns)."""
        table = self.data.prompt_rows(stage)
        records = [table[i] for i in rows]
        texts = [self.data.codec.decode(self.data.codec.continuation(ids)) for ids in completions]
        conversational = [isinstance(r["prompt"], list) for r in records]
        shown = [[{"role": "assistant", "content": t}] if c else t for t, c in zip(texts, conversational)]
        columns = {k for r in records for k in r if k != "prompt"}
        given = {k: [r.get(k) for r in records] for k in sorted(columns)}
        state = {"global_step": context.step, "epoch": context.epoch}
        where = f"at step {context.step}" if stage == "train" else f"on the {stage} prompts"
        return self.rewards.score([r["prompt"] for r in records], shown, completions, given, state, where)

    def _refill(self, model, micro_batches: list[list[Group]], context: RolloutContext) -> dict[str, float]:
        """Dynamic sampling (DAPO's): each group whose rewards are all alike replaced, in order, by a group of
        a prompt drawn from the training split whose rewards differ; at most ``refill_rounds`` rounds, after
        which the groups left keep their place (an advantage of 0: they train on nothing but the KL)."""
        slots = [(m, k) for m, micro in enumerate(micro_batches) for k in range(len(micro))]
        flat = [micro_batches[m][k] for m, k in slots]
        dropped = [s for s, alike in zip(slots, zero_std_groups(flat, self.rewards.weights)) if alike]
        first, rounds = len(dropped), 0
        while dropped and rounds < self.plan.refill_rounds:
            rounds += 1
            found = [g for g in self._candidates(model, len(dropped), rounds, context) if not self._alike(g)]
            for (m, k), new in zip(list(dropped), found):
                old = micro_batches[m][k]
                micro_batches[m][k] = Group(
                    old.micro, old.position, new.index, old.loaded, new.prompt, new.completions, new.truncated,
                    new.rewards,
                )  # fmt: skip
                dropped.remove((m, k))
        return {
            "dynamic_sampling/dropped": first / len(flat),
            "dynamic_sampling/unfilled": len(dropped) / len(flat),
            "dynamic_sampling/rounds": float(rounds),
        }

    def _alike(self, group: Group) -> bool:
        return zero_std_groups([group], self.rewards.weights)[0]

    def _candidates(self, model, needed: int, round_: int, context: RolloutContext) -> list[Group]:
        """The groups of ``needed`` prompts drawn for a refill round, as many on any layout: rank r samples the
        draws r, r + W, ...; a rank with one fewer repeats a draw whose answers are left out (every rank runs
        as many forwards)."""
        train = self.data.train_set
        seed = answer_key(self.plan.sampling.seed, context.step, -round_)
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed)).tolist()
        rows = (order * math.ceil(needed / len(order)))[:needed]
        places = list(range(context.rank, needed, context.ranks))
        places += [needed] * (math.ceil(needed / context.ranks) - len(places))  # (the repeat: place needed)
        batch = train.collate([train[rows[min(p, needed - 1)]] for p in places])
        batch = {k: v.to(self.data_device(model)) for k, v in batch.items()}
        mine = self.groups(model, batch, (context.step, -round_), -round_, context, "train")
        for group, place in zip(mine, places):
            group.position = place
        drawn = [g for micro in in_order(context.gather(mine)) for g in micro]
        return [g for g in drawn if g.position < needed]

    @staticmethod
    def data_device(model) -> torch.device:
        return next(model.parameters()).device

    def _old_logps(self, model, context: RolloutContext) -> None:
        """The sampling policy's log-probabilities of every answer (each rank its share, then every rank's)."""
        temperature, size = self.plan.sampling.temperature, self.plan.generations
        device = self.data_device(model)
        mine = []
        for m, packed in enumerate(self.micro_batches):
            inputs, targets, _, _ = packed.share(context.rank, context.ranks, size)
            logps = token_logps(model(inputs.to(device)), targets.to(device), temperature)
            mine.append((m, context.rank, logps.cpu()))
        for m, rank, logps in (item for items in context.gather(mine) for item in items):
            packed = self.micro_batches[m]
            if packed.old_logps is None:
                packed.old_logps = torch.zeros(packed.inputs.shape, dtype=torch.float32)
            packed.old_logps[packed.rows(rank, context.ranks, size), : logps.shape[1]] = logps

    def next_share(self, rank: int, ranks: int) -> tuple[torch.Tensor, ...]:
        """The next global micro-batch's part for data-parallel rank ``rank`` of ``ranks`` (then it is done)."""
        return self.micro_batches.pop(0).share(rank, ranks, self.plan.generations)

    def loaded_rows(self, rank: int, ranks: int) -> list[list[int]]:
        """The rows the loader gives this rank for each micro-batch left (a resumed run's check)."""
        return [packed.loaded[rank::ranks].tolist() for packed in self.micro_batches]

    def state_dict(self) -> dict:
        return {"micro_batches": [p.state() for p in self.micro_batches], "metrics": dict(self.metrics)}

    def load_state_dict(self, state: dict) -> None:
        self.micro_batches = [Packed(**p) for p in state.get("micro_batches", [])]
        self.metrics = dict(state.get("metrics", {}))
