"""Presets: a strategy name that only sets options of another's class (single is the base
Strategy; ddp_spawn, ddp_fork and ddp_notebook are ddp with ``strategy.start``) resolves to that
class under its own name, and the option alone does what the preset does."""

from __future__ import annotations

import pytest

from framework.cli.compose import compose
from framework.job.preflight import preflight
from framework.strategies import Strategy, resolve
from framework.strategies.ddp import DDPStrategy

TWO = ["experiment=digits_mlp", "trainer.devices=2"]


@pytest.mark.parametrize(
    "overrides, cls, name, start",
    [
        (["strategy=single", "trainer.devices=1"], Strategy, "single", "elastic"),
        (["strategy=ddp"], DDPStrategy, "ddp", "elastic"),
        (["strategy=ddp_spawn"], DDPStrategy, "ddp_spawn", "spawn"),
        (["strategy=ddp_fork"], DDPStrategy, "ddp_fork", "fork"),
        (["strategy=ddp_notebook"], DDPStrategy, "ddp_notebook", "fork"),
        (["strategy=ddp", "strategy.start=spawn"], DDPStrategy, "ddp", "spawn"),
        (["strategy=ddp_spawn", "strategy.start=elastic"], DDPStrategy, "ddp_spawn", "elastic"),
    ],
)
def test_a_preset_is_its_class_under_its_own_name(overrides, cls, name, start):
    container = preflight(compose([*TWO, *overrides]))
    resolved, typed, _ = resolve(container)
    assert resolved is cls and typed.name == name and resolved.start_method(typed) == start


def test_a_start_that_is_none_of_the_three_is_refused_naming_them():
    from framework.config.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        preflight(compose([*TWO, "strategy=ddp", "strategy.start=thread"]))
    [problem] = err.value.problems
    assert problem.startswith("strategy.start") and all(s in problem for s in ("elastic", "fork", "spawn"))
