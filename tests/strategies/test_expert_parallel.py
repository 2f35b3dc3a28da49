"""Expert parallelism (``strategy=parallel strategy.ep=N``) on ``model=gpt/moe``: each rank of an ep group
holds a share of every layer's experts, tokens sent to them and back by all-to-all; the losses (its
load-balancing loss included), metrics and predictions are gpt/moe's on one device, alone and with
dp_shard; a checkpoint resumes under another layout; what cannot be split is refused before start."""

from __future__ import annotations

import pytest

from framework import compose, fit
from framework.config import ConfigError
from framework.job.preflight import preflight
from tests.helpers.configs import GPT_TINY, train_losses
from tests.helpers.layouts import GPT_EQUIVALENCE, GPT_RESUME, assert_same_as_single, runs_once

MOE = [*GPT_EQUIVALENCE, "model=gpt/moe"]
LAYOUTS = {
    "single": ["strategy=single"],
    "ep": ["strategy=parallel", "trainer.devices=2", "strategy.ep=2"],
    "ep_dp_shard": ["strategy=parallel", "trainer.devices=4", "trainer.oversubscribe=true", "strategy.ep=2"],
    # tensor parallel: every expert's hidden units split, the router replicated (models/moe_tensor_parallel.py)
    "tp": ["strategy=parallel", "trainer.devices=2", "strategy.tp=2"],
    "tp_dp_shard": ["strategy=parallel", "trainer.devices=4", "trainer.oversubscribe=true", "strategy.tp=2"],
    # both: each tp rank exchanges the group's tokens with its ep group, computing its experts' slices
    "ep_tp": ["strategy=parallel", "trainer.devices=4", "trainer.oversubscribe=true", "strategy.ep=2", "strategy.tp=2"],
}


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return runs_once(tmp_path_factory, MOE, LAYOUTS)("single")


def aux_losses(run_dir) -> list[float]:
    import csv

    with open(run_dir / "metrics.csv") as f:
        return [float(r["train/aux_loss"]) for r in csv.DictReader(f) if r.get("train/aux_loss")]


@pytest.mark.parametrize("layout", ["ep", "ep_dp_shard", "tp", "tp_dp_shard", "ep_tp"])
def test_expert_parallel_layouts_match_single_device(layout, single, tmp_path):
    results = fit(compose([*MOE, *LAYOUTS[layout]]), output_dir=str(tmp_path))
    assert_same_as_single(tmp_path, results, *single)
    for split in ("ep", "tp"):
        assert results["degrees"][split] == (2 if split in layout else 1)
    assert results["degrees"]["dp_shard"] == (2 if layout.endswith("dp_shard") else 1)
    # the load-balancing loss: logged, trained on, and the whole global batch's on every layout
    assert len(aux_losses(tmp_path)) == 24 and aux_losses(tmp_path)[0] > 0
    assert aux_losses(tmp_path) == pytest.approx(aux_losses(single[0]), rel=1e-5)


def test_tensor_parallel_without_sequence_parallelism_with_a_shared_expert_and_capacity_matches_single_device(
    tmp_path_factory,
):
    variant = [*MOE, "model.shared_expert=true", "model.capacity_factor=1.0"]  # (capacity 1.0 drops tokens)
    tp = [*LAYOUTS["tp"], "strategy.sequence_parallel=false"]
    get = runs_once(tmp_path_factory, variant, {"single": LAYOUTS["single"], "tp": tp})
    (single_dir, single_results), (run_dir, results) = get("single"), get("tp")
    assert_same_as_single(run_dir, results, single_dir, single_results)
    assert aux_losses(run_dir) == pytest.approx(aux_losses(single_dir), rel=1e-5)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return runs_once(tmp_path_factory, [*GPT_RESUME, "model=gpt/moe"], LAYOUTS)


@pytest.mark.parametrize("source, target", [("ep", "single"), ("single", "ep"), ("ep_tp", "ep")])
def test_an_expert_parallel_checkpoint_resumes_under_another_layout(saved, tmp_path, source, target):
    reference, _ = saved("single")
    source_dir, _ = saved(source)
    resumed = fit(
        compose([*GPT_RESUME, "model=gpt/moe", *LAYOUTS[target], f"ckpt_path={source_dir / 'checkpoints' / 'epoch0'}"]),
        output_dir=str(tmp_path),
    )
    assert resumed["steps"] == 12
    assert train_losses(tmp_path) == pytest.approx(train_losses(reference)[4:], rel=1e-6)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            ["model=gpt/tiny", "strategy.ep=2"],
            "strategy.ep: expert parallelism (2) splits a mixture of experts' experts",
        ),
        (["model=gpt/moe", "model.n_experts=3", "strategy.ep=2"], "model.n_experts: 3 experts do not divide across"),
        (["model=gpt/moe", "model.top_k=5"], "top_k: 5 experts per token, but n_experts=4"),
        (["model=gpt/moe", "strategy=pp"], "model.n_experts: a mixture of experts cannot be split into pipeline"),
        (
            ["model=gpt/moe", "trainer.devices=4", "trainer.oversubscribe=true", "strategy.pp=2", "strategy.ep=2"],
            "strategy.pp: a pipeline (2 ranks) with expert parallelism (strategy.ep=2) is not built",
        ),
    ],
)
def test_a_layout_expert_parallelism_cannot_split_is_refused_before_start(overrides, message):
    with pytest.raises(ConfigError) as err:
        preflight(compose([*GPT_TINY, "strategy=parallel", "trainer.devices=2", *overrides]))
    assert any(message in problem for problem in err.value.problems), err.value.problems
