"""Reward functions of a user's own, as TRL's reward functions are written (tests of task=grpo name them
by import path: ``task.rewards=[tests.helpers.rewards.digits]``)."""

from __future__ import annotations


def digits(completions, **kwargs) -> list[float]:
    """The share of an answer's characters that are digits (a reward that varies within every group)."""
    out = []
    for completion in completions:
        text = completion[-1]["content"] if isinstance(completion, list) else completion
        out.append(sum(ch.isdigit() for ch in text) / max(1, len(text)))
    return out


def fails_at_step_2(completions, trainer_state, **kwargs) -> list[float]:
    """Scores like ``digits`` until the window of optimizer step 2, where it raises."""
    if trainer_state.global_step >= 2:
        raise ZeroDivisionError("the scorer divided by zero")
    return digits(completions)


def one_too_few(completions, **kwargs) -> list[float]:
    return digits(completions)[1:]
