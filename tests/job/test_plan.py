"""framework-plan on the transformer: a pipeline's per-stage memory and bubble beside the others."""

from __future__ import annotations

import pytest

from framework import compose
from framework.job.plan import plan
from tests.helpers.configs import GPT_TINY


def test_the_plan_of_a_pipeline_gives_the_largest_stage_its_activations_in_flight_and_the_bubble():
    cfg = compose([*GPT_TINY, "model.n_layers=4"])
    rows = {(r["strategy"], r["devices"]): r for r in plan(cfg, devices=(1, 2, 4, 8))}
    single, pp2, pp4 = rows["ddp", 1], rows["pp", 2], rows["pp", 4]
    # 1F1B with as many micro-batches as stages: (p - 1) / (m + p - 1)
    assert pp2["bubble_fraction"] == pytest.approx(1 / 3) and pp4["bubble_fraction"] == pytest.approx(3 / 7)
    # the stages together hold the whole model; the largest (the embedding's or the head's) above 1/p of it
    assert (
        single["model_state_bytes_per_rank"] / 4
        < pp4["model_state_bytes_per_rank"]
        < single["model_state_bytes_per_rank"] / 2
    )
    # 1F1B: the first stage holds p micro-batches of its share, 1/p of the layers: 1/p of the whole batch's
    assert pp2["activation_bytes_per_rank"] == pytest.approx(single["activation_bytes_per_rank"] / 2, rel=1e-6)
    assert rows["pp", 8]["model_state_bytes_per_rank"] is None  # 4 blocks do not split in 8 stages


def test_the_plan_runs_on_the_built_in_transformer(capsys, monkeypatch):
    # (it failed once: the rotary tables stayed on the CPU while the model ran on meta tensors)
    import sys

    from framework.cli.plan import main

    monkeypatch.setattr(sys, "argv", ["framework-plan", *GPT_TINY])
    main()
    out = capsys.readouterr().out
    assert "pp " in out and "bubble" in out and "33.3%" in out


def test_gpipe_holds_every_micro_batch_and_1f1b_one_per_stage():
    from framework.strategies.pipeline.schedule import microbatches_in_flight

    assert microbatches_in_flight("gpipe", 2, 8) == 8 and microbatches_in_flight("1f1b", 2, 8) == 2
    assert microbatches_in_flight("1f1b", 4, 2) == 2


def test_the_plan_of_a_pipeline_takes_the_configs_schedule_micro_batches_and_split():
    cfg = compose([*GPT_TINY, "model.n_layers=4", "strategy=pp", "strategy.microbatches=8", "strategy.schedule=gpipe"])
    [row] = [r for r in plan(cfg, devices=(2,)) if r["strategy"] == "pp"]
    assert row["schedule"] == "gpipe" and row["bubble_fraction"] == pytest.approx(1 / 9)
    even = row["model_state_bytes_per_rank"]
    [uneven] = [
        r
        for r in plan(
            compose([*GPT_TINY, "model.n_layers=4", "strategy=pp", "strategy.split_points=[layers.1]"]), devices=(2,)
        )
        if r["strategy"] == "pp"
    ]
    assert uneven["model_state_bytes_per_rank"] > even  # 3 of the 4 blocks and the head in the last stage
