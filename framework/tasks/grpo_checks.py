"""What ``task=grpo`` checks of the run it is in, before start: the data gives prompts, the model logits
per token, the batch arithmetic divides, the answers fit in the model's positions, the reward functions'
arguments are there, and the layout holds each answer whole on a rank."""

from __future__ import annotations

from framework.config.experiment import Experiment
from framework.config.ranges import are_ints
from framework.tasks.language_modeling import room_to_generate, token_id_problems
from framework.tasks.reward_calls import PASSED, Rewards


class GRPORunChecks:
    """The answers of ``task=grpo`` about ``run`` (``problems``: every one, each naming its keys)."""

    def __init__(self, run: Experiment):
        self.run, self.key = run, f"task._target_: {run.task.target}"

    def problems(self) -> list[str]:
        return (
            self.data()
            + self.layout()
            + self.batches()
            + self.room()
            + self.columns()
            + room_to_generate(self.run)
            + token_id_problems(self.run)
        )

    def data(self) -> list[str]:
        run, problems = self.run, []
        if run.datamodule.is_class and run.datamodule.declared("targets") != "prompts":
            given = run.datamodule.declared("targets") or "other batches"
            problems.append(
                f"{self.key} samples answers to prompts, but datamodule {run.datamodule.name} gives {given}; "
                "choose datamodule=prompts (rows of a file) or datamodule=reasoning_gym"
            )
        if "vocab_size" not in run.model and not callable(run.model.declared("declared_sizes")):
            problems.append(
                f"{self.key} needs logits per token, but model {run.model.name} has no vocabulary (no vocab_size); "
                "choose model=hf/causal_lm or gpt"
            )
        if run.task.get("beta", 0.0) and run.adapter is None and run.train:
            problems.append(
                f"task.beta: {run.task['beta']} holds the policy near its reference, the policy with its adapters "
                "off, and no adapter is selected: choose adapter=lora or qlora, or task.beta=0 (TRL's default)"
            )
        return problems

    def layout(self) -> list[str]:
        topology = self.run.layout.topology if self.run.layout is not None else None
        if topology is None or (topology.cp == 1 and topology.pp == 1):
            return []
        degree = "strategy.cp" if topology.cp > 1 else "strategy.pp"
        return [
            f"{degree}: {max(topology.cp, topology.pp)} splits each answer (its sequence or its layers' stages) "
            "across ranks, and task=grpo samples and scores each answer whole on one rank; use strategy.cp=1 and "
            "strategy.pp=1 (single, ddp, fsdp, tp, fsdp_tp)"
        ]

    def batches(self) -> list[str]:
        """A window of whole optimizer steps (the prompts' split across ranks is the global batch's check)."""
        every, accumulate = self.run.task.get("steps_per_generation"), self.run.trainer.accumulate_grad_batches
        if not are_ints(every, accumulate) or every % accumulate == 0:
            return []
        return [
            f"task.steps_per_generation: {every} micro-batches per window, which ends inside an optimizer step "
            f"of trainer.accumulate_grad_batches={accumulate} ({every} % {accumulate} = {every % accumulate}); "
            f"use a multiple of {accumulate} (null: one step's, {accumulate})"
        ]

    def room(self) -> list[str]:
        """A prompt of ``datamodule.seq_len`` tokens and ``task.max_new_tokens`` after it, within the model's
        positions (``max_seq_len``, a Hugging Face model's from its config)."""
        positions = self.run.model.sizes().get("max_seq_len")
        prompt, new = self.run.datamodule.get("seq_len"), self.run.task.get("max_new_tokens", 64)
        if not are_ints(positions, prompt, new) or prompt + new <= positions:
            return []
        return [
            f"task.max_new_tokens: {new} answer tokens after a prompt of up to datamodule.seq_len={prompt} tokens "
            f"make {prompt + new}, and the model holds {positions} positions; lower one of them (their sum at most "
            f"{positions})"
        ]

    def columns(self) -> list[str]:
        """Every argument a reward function needs is passed: TRL's, or a column of the prompt rows."""
        entries, columns = self.run.task.get("rewards") or [], self.run.datamodule.declared("row_columns")
        if not callable(columns) or Rewards.problems(entries):
            return []
        try:
            given = set(PASSED) | set(columns(**self.run.datamodule.options))
            functions = Rewards(entries).functions
        except Exception:  # noqa: BLE001 - rows or a function that do not load: their own checks say why
            return []
        return [
            f"task.rewards[{i}]: {f.name} needs {', '.join(sorted(f.required() - given))}, which the prompt rows do "
            f"not have (their columns: {', '.join(sorted(given - set(PASSED))) or 'none'}; passed besides: "
            f"{', '.join(PASSED)})"
            for i, f in enumerate(functions)
            if f.required() - given
        ]
