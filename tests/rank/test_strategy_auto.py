"""strategy=auto on 2 gloo ranks: a memory limit that ddp does not fit gets a sharded strategy;
with probe_steps the fastest by the probe, and the run is the one the chosen strategy gives alone
(the probe's steps do not count)."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from framework import compose, fit
from framework.job.experiment import ResolvedExperiment
from framework.job.strategy_choice import auto_node
from tests.helpers.configs import BASE, train_losses

pytestmark = pytest.mark.multiprocess

AUTO = [*BASE, "strategy=auto", "trainer.devices=2", "strategy.timeout_s=60"]


def test_a_limit_that_ddp_does_not_fit_gets_a_sharded_strategy(tmp_path):
    plan = auto_node(ResolvedExperiment.of(compose(AUTO)))["plan"]
    sizes = {row["strategy"]: row["predicted_bytes"] for row in plan["candidates"]}
    limit = int((sizes["zero"] - 1) / 0.9)
    results = fit(compose([*AUTO, f"trainer.memory_limit={limit}"]), output_dir=str(tmp_path))
    assert results["status"] == "completed" and results["strategy"] == "fsdp"
    choice = json.loads((tmp_path / "results.json").read_text())["strategy_choice"]
    assert choice["chosen"] == "fsdp_grad_op" and choice["probe_steps"] == 0
    assert [row["fits"] for row in choice["candidates"]] == [False, False, True, True]
    assert OmegaConf.load(tmp_path / "config.yaml").strategy.candidates[0].sharding == "grad_op"
    log = (tmp_path / "train.log").read_text()
    assert "strategy=auto chose fsdp_grad_op" in log and "does not fit" in log


def test_the_probe_chooses_the_fastest_and_the_run_is_the_chosen_strategys(tmp_path):
    results = fit(
        compose([*AUTO, "strategy.probe_steps=2", "strategy.candidates=[ddp,fsdp]"]), output_dir=str(tmp_path / "auto")
    )
    choice = results["strategy_choice"]
    times = {row["strategy"]: row["step_time_s"] for row in choice["candidates"]}
    assert set(times) == {"ddp", "fsdp"} and all(t > 0 for t in times.values())
    fastest = min(times, key=times.get)
    if choice["within_noise"]:  # as fast as the probe can tell: the simpler (first) candidate
        assert choice["chosen"] == "ddp" != fastest and "within the probe's noise" in choice["by"]
    else:
        assert choice["chosen"] == fastest
    assert choice["chosen"] == results["strategy"]
    assert results["steps"] == 6  # the probe's steps are not the run's
    alone = fit(
        compose([*BASE, f"strategy={choice['chosen']}", "trainer.devices=2", "strategy.timeout_s=60"]),
        output_dir=str(tmp_path / "alone"),
    )
    assert train_losses(tmp_path / "auto") == train_losses(tmp_path / "alone")  # exactly: the same run
    assert results["metrics"]["val/loss"] == alone["metrics"]["val/loss"]


def test_a_margin_within_the_probes_noise_keeps_the_simpler_strategy_and_says_so():
    from framework.rank.strategy_probe import _reason, _simplest_within_noise

    times = {"ddp": 1.05, "fsdp": 1.2, "tp": 1.0}
    assert _simplest_within_noise(["ddp", "fsdp", "tp"], times, {"ddp": 0.08, "fsdp": 0.02, "tp": 0.06}) == 0
    assert "tp was 5.0% faster by 3 probe steps each, within the probe's noise (step times spread 8.0%)" in _reason(
        "ddp", 3, times, {"ddp": 0.08, "fsdp": 0.02, "tp": 0.06}
    )
    assert _simplest_within_noise(["ddp", "fsdp", "tp"], times, {"ddp": 0.01, "fsdp": 0.01, "tp": 0.01}) == 2
    assert _reason("tp", 3, times, {"ddp": 0.01, "fsdp": 0.01, "tp": 0.01}).startswith(
        "the fastest of 3 by 3 probe steps each, 5.0% ahead of ddp"
    )
