"""task.rewards: the built-in reward functions, TRL's way of calling a reward function (the rows' columns as
keyword arguments, None as NaN), the failures named with the function and the step, the checks before start;
and the prompt rows' check, every bad row named."""

from __future__ import annotations

import math

import pytest

from framework.data.prompt_rows import prompt_problem
from framework.tasks import rewards
from framework.tasks.reward_calls import RewardError, Rewards
from framework.tasks.rollouts import answer_key, truncate_at_eos


def test_the_built_in_rewards():
    answers = ["7", "It is 7.", "<answer>7.0</answer>", "8", "seven"]
    assert rewards.accuracy(answers, ["7"] * 5) == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert rewards.accuracy(answers, ["7"] * 5, mode="exact") == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert rewards.accuracy(["1,200", "x"], ["1200", None]) == [1.0, None]
    chat = [[{"role": "assistant", "content": " 42 "}]]
    assert rewards.format(chat) == [1.0] and rewards.format(["42 is it"]) == [0.0]
    assert rewards.format(["<think>a</think>b"], pattern=r"<think>.*</think>.*") == [1.0]
    assert rewards.length([[1] * 6, [1] * 8, [1] * 10, [1] * 13], max_tokens=12, cache_tokens=4) == [
        0.0,
        0.0,
        -0.5,
        -1.0,
    ]


def _call(entries, count=2, **columns):
    return Rewards(entries).score(["p"] * count, ["7", "x"][:count], [[1], [2]][:count], columns, {"global_step": 3},
                                  "at step 3")  # fmt: skip


def test_functions_get_trls_arguments_and_none_is_nan():
    scored = _call(["framework.tasks.rewards.accuracy", {"function": "framework.tasks.rewards.format", "weight": 0.5}],
                   answer=["7", None])  # fmt: skip
    assert scored[0].tolist() == [1.0, 1.0] and scored[1, 1] == 0.0 and math.isnan(scored[1, 0])
    assert Rewards([{"function": "framework.tasks.rewards.format", "weight": 0.5}]).weights.tolist() == [0.5]


def test_a_failing_function_is_named_with_the_step():
    with pytest.raises(RewardError, match=r"task.rewards: fails_at_step_2 raised at step 3: ZeroDivisionError"):
        _call(["tests.helpers.rewards.fails_at_step_2"])
    with pytest.raises(RewardError, match=r"one_too_few returned 1 rewards at step 3 for 2 completions"):
        _call(["tests.helpers.rewards.one_too_few"])
    with pytest.raises(RewardError, match=r"returned 'high' at step 3; a reward is a float or None"):
        Rewards([{"function": "framework.tasks.rewards.format"}]).functions[0].__class__(
            lambda completions, **_: ["high", 1.0], "constant"
        )({"completions": ["a", "b"]}, 2, "at step 3")


def test_what_is_refused_before_start():
    assert Rewards.problems([]) and "a list of reward functions is needed" in Rewards.problems(None)[0]
    assert Rewards.problems(["no.such.function"])[0].startswith("rewards[0]: 'no.such.function' does not import")
    assert (
        "weight: expected a number"
        in Rewards.problems([{"function": "framework.tasks.rewards.format", "weight": "x"}])[0]
    )
    bad = Rewards.problems([{"function": "framework.tasks.rewards.length", "max_token": 3}])
    assert bad == [
        "rewards[0].max_token: framework.tasks.rewards.length takes no option max_token (its own: max_tokens, "
        "cache_tokens)"
    ]


def test_prompt_rows_are_checked_one_by_one():
    assert prompt_problem({"prompt": "What is 2 + 2?", "answer": "4"}) is None
    assert prompt_problem({"prompt": [{"role": "user", "content": "Hi"}]}) is None
    assert prompt_problem({"prompt": None, "answer": "4"}).startswith("prompt: null (its keys: answer, prompt)")
    assert prompt_problem({"answer": "4"}).startswith("prompt: no 'prompt' (its keys: answer)")
    assert "last message is the assistant's" in prompt_problem({"prompt": [{"role": "assistant", "content": "x"}]})
    assert prompt_problem({"prompt": ""}) == "prompt: an empty string; a prompt holds the text to answer"


def test_answers_are_keyed_without_the_rank_and_cut_at_their_end():
    import torch

    keys = {answer_key(step, row, j) for step in range(3) for row in range(50) for j in range(8)}
    assert len(keys) == 3 * 50 * 8 and all(0 <= k < 2**62 for k in keys)
    cut, truncated = truncate_at_eos(torch.tensor([[5, 9, 2, 0], [5, 5, 5, 5]]), [9])
    assert cut == [[5, 9], [5, 5, 5, 5]] and truncated == [False, True]
