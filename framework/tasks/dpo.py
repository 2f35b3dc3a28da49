"""``task=dpo``: Direct Preference Optimization (Rafailov et al., 2023) on pairs of a chosen and a
rejected answer (datamodule=preferences), as TRL's ``DPOTrainer`` computes it.

The reference model is the policy with its adapters switched off (framework/models/lora.py's
``adapters_off``, as TRL does with a peft model): LoRA's B starts at zero, so before the first step the
policy is its reference and every pair's loss is log 2. A sequence's log-probability is the sum over
its answer's tokens (the targets not -100), TRL's default. The loss of a batch is the mean over its
pairs; ``counted`` says how many pairs a micro-batch holds, so the engine makes it the mean over the
global batch's pairs on every layout and accumulation (engine/training_step.py), and weighs
validation's batches by their pairs."""

from __future__ import annotations

from typing import Optional, Sequence, Union

import torch
from torch.nn import functional as F

from framework.config.experiment import Experiment
from framework.config.ranges import Range
from framework.models.lora import adapters_off
from framework.tasks.generation import plain_module
from framework.tasks.language_modeling import LanguageModelingTask, room_to_generate, token_id_problems

LOSS_TYPES = ("sigmoid", "ipo", "hinge")  # TRL's names (DPOConfig.loss_type)


def sequence_logps(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100):
    """(each row's summed log-probability of its counted targets [rows], float32; how many it counts
    [rows]). ``logits`` [rows, seq, vocab], ``targets`` [rows, seq]."""
    nll = F.cross_entropy(
        logits.flatten(0, 1).float(), targets.flatten(), ignore_index=ignore_index, reduction="none"
    ).view(targets.shape)
    return -nll.sum(dim=1), (targets != ignore_index).sum(dim=1)


def preference_losses(
    policy: torch.Tensor, reference: torch.Tensor, beta: float, loss_type: str, lengths: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Each pair's loss [pairs]. ``policy``, ``reference``: the log-probabilities (nats) of the chosen
    answers then the rejected ones [2 x pairs]; ``lengths``: their answer tokens (``ipo`` divides each
    log-ratio by it, as TRL does). sigmoid: -log sigma(beta x margin); hinge: relu(1 - beta x margin);
    ipo: (margin per token - 1 / (2 beta))^2, where margin is the chosen log-ratio minus the rejected one."""
    chosen, rejected = (policy - reference).chunk(2)
    if loss_type == "ipo":
        chosen_len, rejected_len = lengths.chunk(2)
        margin = chosen / chosen_len.clamp(min=1) - rejected / rejected_len.clamp(min=1)
        return (margin - 1 / (2 * beta)) ** 2
    margin = chosen - rejected
    if loss_type == "hinge":
        return torch.relu(1 - beta * margin)
    return -F.logsigmoid(beta * margin)


class DPOTask:
    """``step(model, (inputs, targets), stage)``: the mean DPO loss of the batch's pairs (``inputs`` and
    ``targets`` [2 x pairs, seq]: the chosen answers, then the rejected ones), ``beta`` the strength of
    the pull towards the reference (TRL's default 0.1), ``loss_type`` one of sigmoid, ipo, hinge. In
    validation and test: ``reward_accuracy`` (the share of pairs whose chosen answer's reward is the
    higher), ``reward_margin``, ``reward_chosen``, ``reward_rejected`` (a reward: beta x the policy's log-
    probability minus the reference's, in nats, TRL's rewards/*). ``predict_step`` generates as
    task=language_modeling does (its options: ``max_new_tokens``, ``temperature``, ...)."""

    targets, model_outputs = "preference pairs", "logits per token"  # what the checks before start match
    argument_ranges = {"beta": Range(low=0, strict=True), **LanguageModelingTask.argument_ranges}

    def __init__(
        self,
        beta: float = 0.1,
        loss_type: str = "sigmoid",
        ignore_index: int = -100,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        pad_token: Optional[int] = None,
        eos_token_id: Union[int, Sequence[int], None] = None,
    ):
        if loss_type not in LOSS_TYPES:
            raise ValueError(f"task.loss_type: {loss_type!r} is not one of {', '.join(LOSS_TYPES)}")
        self.beta, self.loss_type, self.ignore_index = float(beta), loss_type, ignore_index
        # generation (predict=true, the harness) is the language-modelling task's
        self.generation = LanguageModelingTask(
            ignore_index, False, None, max_new_tokens, temperature, top_k, top_p, seed, pad_token, eos_token_id
        )

    @classmethod
    def check_config(cls, loss_type: str = "sigmoid", **_) -> list[str]:
        if loss_type in LOSS_TYPES:
            return []
        return [f"loss_type: {loss_type!r} is not one of {', '.join(LOSS_TYPES)} (TRL's names for the DPO losses)"]

    @classmethod
    def check_run(cls, run: Experiment) -> list[str]:
        """Before start: pairs from the data, logits per token from the model, adapters whose switching off
        gives the reference, and a layout that holds every sequence whole on a rank."""
        data, key = run.datamodule, f"task._target_: {run.task.target}"
        problems = []
        if data.is_class and data.declared("targets") != "preference pairs":
            problems.append(
                f"{key} trains on pairs of a chosen and a rejected answer, but datamodule {data.name} gives "
                f"{data.declared('targets') or 'other batches'}; choose datamodule=preferences"
            )
        if "vocab_size" not in run.model and not callable(run.model.declared("declared_sizes")):
            problems.append(
                f"{key} needs logits per token, but model {run.model.name} has no vocabulary (no vocab_size); "
                "choose model=hf/causal_lm or gpt"
            )
        if run.adapter is None and (run.train or run.test):
            problems.append(
                f"{key} takes its reference model as the policy with its adapters off, and no adapter is selected: "
                "choose adapter=lora or qlora (a full fine-tune's frozen reference is not built yet)"
            )
        cp = run.layout.topology.cp if run.layout is not None else 1
        if cp > 1:
            problems.append(
                f"strategy.cp: {cp} splits each sequence across ranks, and task=dpo sums each answer's "
                "log-probability whole; use strategy.cp=1 (ddp, fsdp, tp, fsdp_tp)"
            )
        return problems + room_to_generate(run) + token_id_problems(run)

    def connect(self, datamodule) -> None:
        """The datamodule's tokenizer's end of sequence and pad ids, for generation."""
        self.generation.connect(datamodule)

    @property
    def eos(self) -> list:
        return self.generation.eos

    def step(self, model: torch.nn.Module, batch, stage: str):
        inputs, targets = batch[0], batch[1]
        with torch.no_grad(), adapters_off(model):
            reference, _ = sequence_logps(plain_module(model)(inputs), targets, self.ignore_index)
        policy, lengths = sequence_logps(model(inputs), targets, self.ignore_index)
        loss = preference_losses(policy, reference, self.beta, self.loss_type, lengths).mean()
        if stage == "train":
            return loss, {}
        chosen, rejected = (self.beta * (policy - reference).detach()).chunk(2)
        return loss, {
            "reward_accuracy": (chosen > rejected).float().mean(),
            "reward_margin": (chosen - rejected).mean(),
            "reward_chosen": chosen.mean(),
            "reward_rejected": rejected.mean(),
        }

    def counted(self, targets: torch.Tensor) -> torch.Tensor:
        """The pairs the loss averages over: half the rows (a 0-d integer tensor)."""
        return torch.tensor(targets.shape[0] // 2, device=targets.device)

    @torch.no_grad()
    def predict_step(self, model: torch.nn.Module, batch) -> dict[str, torch.Tensor]:
        """Continuations of prompts, as task=language_modeling generates them."""
        return self.generation.predict_step(model, batch)
