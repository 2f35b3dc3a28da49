"""strategy=auto's plan before anything runs: each candidate's predicted memory per rank against
trainer.memory_limit, the ones dropped and why, and the refusals before start."""

from __future__ import annotations

import sys

import pytest
from omegaconf import OmegaConf

from framework import compose
from framework.cli import plan as plan_cli
from framework.config.errors import ConfigError
from framework.config.experiment import Experiment
from framework.config.sizes import parse_bytes
from framework.job.experiment import ResolvedExperiment
from framework.job.preflight import preflight
from framework.job.strategy_choice import auto_node, candidate_problems
from tests.helpers.configs import GPT_TINY, TINY

TWO = [*TINY, "strategy=auto", "trainer.devices=2", "trainer.accelerator=cpu"]


def node(overrides: list[str]) -> dict | None:
    return auto_node(ResolvedExperiment.of(compose(overrides)))


def predicted(n: dict) -> dict:
    return {row["strategy"]: row["predicted_bytes"] for row in n["plan"]["candidates"]}


def test_without_a_memory_limit_every_candidate_fits_and_ddp_comes_first():
    n = node(TWO)
    assert [c["name"] for c in n["candidates"]] == ["ddp", "zero", "fsdp", "fsdp"]
    assert n["candidates"][2]["sharding"] == "grad_op" and n["candidates"][3]["sharding"] == "full"
    sizes = predicted(n)
    assert sizes["ddp"] > sizes["zero"] > sizes["fsdp"] == sizes["fsdp_grad_op"]  # the ZeRO accounting's order
    assert node([*TINY, "strategy=auto", "trainer.devices=1"]) is None  # one process: single, as always


def test_a_memory_limit_drops_what_does_not_fit_with_the_reason():
    sizes = predicted(node(TWO))
    limit = int((sizes["zero"] - 1) / 0.9)  # zero (and ddp) just above the budget, fsdp below it
    n = node([*TWO, f"trainer.memory_limit={limit}"])
    assert [c["name"] for c in n["candidates"]] == ["fsdp", "fsdp"]
    rows = {row["strategy"]: row for row in n["plan"]["candidates"]}
    assert not rows["ddp"]["fits"] and "does not fit" in rows["ddp"]["dropped"]
    assert rows["fsdp"]["fits"] and rows["fsdp"]["dropped"] is None
    assert n["plan"]["budget_bytes"] == int(limit * 0.9)


def test_no_candidate_that_fits_is_refused_before_start_naming_each():
    with pytest.raises(ConfigError) as err:
        node([*TWO, "trainer.memory_limit=1KiB"])
    message = str(err.value)
    for name in ("ddp", "zero", "fsdp_grad_op", "fsdp"):
        assert f"{name}: does not fit" in message
    assert "trainer.memory_limit" in message


def test_tensor_parallel_candidates_for_a_model_with_a_plan():
    n = node([*GPT_TINY, "strategy=auto", "trainer.devices=2"])
    assert [row["strategy"] for row in n["plan"]["candidates"]] == [
        "ddp",
        "zero",
        "fsdp_grad_op",
        "fsdp",
        "fsdp_tp",
        "tp",
    ]


def test_bad_candidates_and_limits_are_named_before_start():
    problems = candidate_problems(
        Experiment(OmegaConf.to_container(compose([*TWO, "strategy.candidates=[ddp,dp,nope]"])))
    )
    assert len(problems) == 2 and problems[0].startswith("strategy.candidates[1]: 'dp'") and "valid: " in problems[0]
    with pytest.raises(ConfigError, match=r"trainer.memory_limit: expected bytes"):
        preflight(compose([*TWO, "trainer.memory_limit=lots"]))
    with pytest.raises(ConfigError, match=r"strategy.probe_steps"):
        preflight(compose([*TWO, "strategy.probe_steps=-1"]))
    assert parse_bytes("2GiB") == 2 * 2**30 and parse_bytes("1.5 MB") == 1_500_000 and parse_bytes(4096) == 4096


def test_framework_plan_choose_shows_the_decision(monkeypatch, capsys):
    sizes = predicted(node(TWO))
    limit = int((sizes["zero"] - 1) / 0.9)
    monkeypatch.setattr(sys, "argv", ["framework-plan", "--choose", *TWO, f"trainer.memory_limit={limit}"])
    with pytest.raises(SystemExit) as end:
        plan_cli.main()
    out = capsys.readouterr().out
    assert end.value.code == 0
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "does not fit" in lines["ddp"] and "chosen" in lines["fsdp_grad_op"] and lines["fsdp"].endswith("fits")
