"""strategy=deepspeed's config, before any process starts: the user's ds_config.json merged with the
keys the framework owns, each disagreement named with both keys, and a missing package named
with how to install it."""

from __future__ import annotations

import json
import sys

import pytest

from framework import compose
from framework.config.errors import ConfigError
from framework.job.preflight import preflight
from framework.strategies import resolved_options

DS = [
    "experiment=digits_mlp",
    "strategy=deepspeed",
    "trainer.devices=2",
    "datamodule.batch_size=32",
    "trainer.accumulate_grad_batches=2",
    "trainer.gradient_clip_val=0.5",
]


def problems(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as err:
        preflight(compose(overrides))
    return str(err.value)


def test_the_ranks_get_the_users_keys_and_the_frameworks_merged(tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text(
        json.dumps(
            {
                "zero_optimization": {"stage": 3, "overlap_comm": False, "reduce_bucket_size": 1000},
                "train_micro_batch_size_per_gpu": "auto",
                "gradient_clipping": 0.5,
            }
        )
    )
    merged = resolved_options(preflight(compose([*DS, f"strategy.config={path}"])))
    assert merged["stage"] == 3  # strategy.stage null: the file's
    config = merged["config"]
    assert config["train_micro_batch_size_per_gpu"] == 16 and config["gradient_accumulation_steps"] == 2
    assert config["train_batch_size"] == 64 and config["gradient_clipping"] == 0.5
    assert config["zero_optimization"] == {"stage": 3, "overlap_comm": False, "reduce_bucket_size": 1000}
    assert config["bf16"] == {"enabled": False} and config["managed_gradient_accumulation"] is False


def test_a_file_that_is_no_json_object_and_offload_without_stage_3_are_named(tmp_path):
    bad = tmp_path / "ds.json"
    bad.write_text("{stage: 2")
    assert f"strategy.config: {bad} is not a JSON file" in problems([*DS, f"strategy.config={bad}"])
    assert "strategy.config: no file" in problems([*DS, "strategy.config=missing.json"])
    text = problems([*DS, "strategy.stage=2", "strategy.offload_parameters=true"])
    assert "strategy.offload_parameters: parameters are partitioned (and so offloaded) by ZeRO stage 3 only" in text
    assert "strategy.stage: 4 is no ZeRO stage here (valid: 1, 2, 3)" in problems([*DS, "strategy.stage=4"])
    assert "trainer.gradient_clip_algorithm: DeepSpeed clips by the gradients' norm only" in problems(
        [*DS, "trainer.gradient_clip_algorithm=value"]
    )


def test_without_the_deepspeed_package_the_strategy_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # as if not installed: its import fails
    text = problems(DS)
    assert (
        "strategy=deepspeed: the deepspeed package is not installed here (No module named 'deepspeed'); "
        "pip install 'framework[deepspeed]'" in text
    )
