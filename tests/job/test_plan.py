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


def test_the_plan_counts_what_each_degree_sends_per_rank_from_the_models_sizes():
    cfg = compose([*GPT_TINY, "model.n_layers=2"])
    rows = {(r["strategy"], r["devices"]): r for r in plan(cfg, devices=(1, 2))}
    c = cfg.model
    b, s, d, layers, vocab = 8, 32, c.dim, c.n_layers, c.vocab_size
    params = rows["ddp", 1]["parameters"]
    kv_dim = d // c.n_heads * (c.get("n_kv_heads") or c.n_heads)
    assert rows["ddp", 1]["comm_bytes_per_rank"] == {}  # one rank sends nothing
    # a ring all-reduce of the fp32 gradients: 2 (N-1)/N of them; FSDP's two all-gathers and a reduce-scatter
    assert rows["ddp", 2]["comm_bytes_per_rank"] == {"dp": pytest.approx(4 * params)}
    assert rows["fsdp", 2]["comm_bytes_per_rank"] == {"dp": pytest.approx(6 * params)}
    # tp 2: the embedding's, each wo's and w2's outputs twice (reduce-scatter, all-gather), the logits
    # once, forward and backward, half of each leaving a rank
    crossing = 2 * b * s * d + layers * 4 * b * s * d + b * s * vocab
    assert rows["tp", 2]["comm_bytes_per_rank"] == {"tp": pytest.approx(4 * crossing)}
    # cp 2: each rank's half of the keys and values out, then the gathered gradient all-reduced
    kv = 4 * layers * 2 * b * s * kv_dim
    figures = rows["parallel/cp", 2]["comm_bytes_per_rank"]
    assert figures["cp"] == pytest.approx(kv / 2 + kv) and figures["dp"] == pytest.approx(6 * params)
    # pp 2: one block's output forward, its gradient backward
    assert rows["pp", 2]["comm_bytes_per_rank"] == {"pp": pytest.approx(2 * 4 * b * s * d)}


def test_the_plan_adds_the_configs_own_layout_as_a_row_where_no_compared_one_is_it():
    rows = plan(compose([*GPT_TINY, "strategy=parallel", "strategy.pp=2", "strategy.tp=2"]), devices=(2, 4))
    mine = [r for r in rows if r["strategy"] == "parallel (config)"]
    assert mine[0]["model_state_bytes_per_rank"] is None  # pp 2 x tp 2 needs 4 ranks
    assert set(mine[1]["comm_bytes_per_rank"]) == {"tp", "pp"} and mine[1]["bubble_fraction"] > 0
    for same in (["strategy=fsdp"], ["strategy=auto"]):
        assert not any("(config)" in r["strategy"] for r in plan(compose([*GPT_TINY, *same]), devices=(2,)))
