"""strategy=deepspeed: the real DeepSpeed library (ZeRO 1-3, CPU offload) on 2 gloo ranks, equal to
one device, with this framework's checkpoints in both directions and the user's ds_config.json
merged or refused before start."""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from framework import compose, fit
from framework.config.errors import ConfigError
from framework.engine.signals import Interrupted
from tests.helpers.configs import BASE as _BASE
from tests.helpers.configs import GROUPS, METRICS, train_losses
from tests.helpers.layouts import (
    EPOCH_CHECKPOINTS,
    GPT_EQUIVALENCE,
    assert_resumes_from_epoch0,
    assert_same_as_single,
    runs_once,
)

pytestmark = pytest.mark.multiprocess

# accumulation (BASE), clipping, parameter groups and epoch metrics take part in every run
BASE = [*_BASE, *GROUPS, *METRICS, "trainer.gradient_clip_val=0.05", "strategy.timeout_s=60"]
DS = ["strategy=deepspeed", "trainer.devices=2"]
CASES = {
    "stage1": [*DS, "strategy.stage=1"],
    "stage2_user_file": [*DS],  # stage 2 from the user's file, with keys of its own
    "stage3_offload": [*DS, "strategy.stage=3", "strategy.offload_optimizer=true", "strategy.offload_parameters=true"],
}


def user_file(tmp_path, **keys) -> str:
    path = tmp_path / "ds_config.json"
    path.write_text(
        json.dumps(
            {
                "zero_optimization": {"stage": 2, "reduce_bucket_size": 50000, "overlap_comm": False},
                "train_micro_batch_size_per_gpu": "auto",
                **keys,
            }
        )
    )
    return str(path)


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    out = tmp_path_factory.mktemp("single")
    return out, fit(compose([*BASE, "strategy=single"]), output_dir=str(out))


@pytest.mark.parametrize("case", list(CASES))
def test_deepspeed_matches_single_device(case, single, tmp_path, monkeypatch):
    single_dir, single_results = single
    extra = [f"strategy.config={user_file(tmp_path)}"] if case == "stage2_user_file" else []
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "extensions"))  # the ranks' C++ builds, if any
    results = fit(compose([*BASE, *CASES[case], *extra]), output_dir=str(tmp_path / "run"))
    run = tmp_path / "run"
    assert not (tmp_path / "extensions").exists()  # no op compiled (its inference all-reduce took 40 s)
    assert results["status"] == "completed" and results["world_size"] == 2 and results["steps"] == 6
    assert train_losses(run) == pytest.approx(train_losses(single_dir), rel=1e-5)
    for key in ("val/loss", "val/acc", "test/loss", "val/f1", "val/auroc", "train/f1"):
        assert results["metrics"][key] == pytest.approx(single_results["metrics"][key], rel=1e-5), key
    ref, weights = torch.load(single_dir / "model.pt"), torch.load(run / "model.pt")
    assert set(weights) == set(ref)
    for name, tensor in ref.items():
        torch.testing.assert_close(weights[name], tensor, rtol=1e-5, atol=1e-7, msg=name)
    merged = OmegaConf.load(run / "config.yaml").strategy.config  # what the ranks got
    assert merged.train_micro_batch_size_per_gpu == 16 and merged.gradient_accumulation_steps == 2  # 32 over 2 ranks
    assert merged.gradient_clipping == 0.05 and merged.zero_optimization.stage == int(case[5])
    if case == "stage2_user_file":
        assert merged.zero_optimization.reduce_bucket_size == 50000  # the user's own keys kept


def test_the_transformer_on_deepspeed_stage3_matches_single_device(tmp_path_factory):
    get = runs_once(
        tmp_path_factory, GPT_EQUIVALENCE, {"single": ["strategy=single"], "deepspeed3": [*DS, "strategy.stage=3"]}
    )
    (single_dir, single_results), (run_dir, results) = get("single"), get("deepspeed3")
    assert_same_as_single(run_dir, results, single_dir, single_results)


CKPT = EPOCH_CHECKPOINTS
LAYOUTS = {
    "single": ["strategy=single"],
    "fsdp": ["strategy=fsdp", "trainer.devices=2"],
    "deepspeed2": [*DS, "strategy.stage=2"],
    "deepspeed3": [*DS, "strategy.stage=3"],
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return runs_once(tmp_path_factory, [*BASE, *CKPT], LAYOUTS)


@pytest.mark.parametrize(
    "source,target",
    [
        ("deepspeed2", "single"),
        ("deepspeed2", "fsdp"),
        ("deepspeed3", "single"),
        ("deepspeed3", "fsdp"),
        ("single", "deepspeed3"),
        ("fsdp", "deepspeed2"),
    ],
)
def test_resume_between_deepspeed_and_other_strategies(saved, tmp_path, source, target):
    assert_resumes_from_epoch0([*BASE, *CKPT, *LAYOUTS[target]], saved(source)[0], tmp_path, saved("single")[0])


def test_sigterm_under_deepspeed_saves_last_and_resumes_to_the_same_losses(saved, tmp_path):
    reference, _ = saved("single")
    stop = ["+callbacks.sig._target_=tests.helpers.probes.SignalAt", "+callbacks.sig.step=3", "+callbacks.sig.rank=1"]
    with pytest.raises(Interrupted):
        fit(compose([*BASE, *CKPT, *LAYOUTS["deepspeed3"], *stop]), output_dir=str(tmp_path))
    # rank 1 alone was signalled after step 3; the ranks agree at the vote read one step later
    manifest = json.loads((tmp_path / "checkpoints" / "last" / "manifest.json").read_text())
    assert manifest["step"] == 5  # mid-epoch 1
    resumed = fit(compose([*BASE, *CKPT, *LAYOUTS["deepspeed3"], "ckpt_path=last"]), output_dir=str(tmp_path))
    assert resumed["status"] == "completed" and resumed["steps"] == 9
    assert train_losses(tmp_path) == pytest.approx(train_losses(reference), rel=1e-6)


def test_a_users_file_that_disagrees_with_the_framework_is_refused_naming_both_keys(tmp_path):
    path = user_file(
        tmp_path,
        train_micro_batch_size_per_gpu=8,
        gradient_clipping=1.0,
        optimizer={"type": "Adam", "params": {"lr": 0.1}},
    )
    with pytest.raises(ConfigError) as err:
        fit(
            compose([*BASE, *DS, f"strategy.config={path}", "strategy.stage=3", "trainer.precision=16-mixed"]),
            output_dir=str(tmp_path / "run"),
        )
    text = str(err.value)
    assert (
        "train_micro_batch_size_per_gpu=8 conflicts with datamodule.batch_size over 2 data-parallel rank(s), "
        "16 per rank" in text
    )
    assert "gradient_clipping=1.0 conflicts with trainer.gradient_clip_val" in text
    assert "zero_optimization.stage=2 conflicts with strategy.stage" in text
    assert "'optimizer' is built by DeepSpeed there, but comes from the optimizer group" in text
    assert "trainer.precision: 16-mixed is not built for strategy=deepspeed" in text
    assert not (tmp_path / "run" / "ranks").exists()  # refused before any rank started
