"""The typed run (config/experiment.py): built once from a composed config, read-only, the same
after pickling (a spawned rank's copy), and what the job, the launcher and the ranks read."""

from __future__ import annotations

import pickle

import pytest
from omegaconf import OmegaConf

from framework import compose
from framework.config.experiment import Experiment
from framework.config.schemas import TrainerConfig
from framework.job.experiment import ResolvedExperiment


def _run(*overrides: str) -> Experiment:
    return Experiment.of(compose(["experiment=gpt_text", "model=gpt/tiny", *overrides]))


def test_the_groups_are_typed_and_the_components_are_specs():
    run = _run("trainer.max_steps=3", "seed=7", "datamodule.seq_len=16")
    assert isinstance(run.trainer, TrainerConfig) and run.trainer.max_steps == 3 and run.seed == 7
    assert run.model.name == "GPT" and run.model.cls.__name__ == "GPT"
    assert run.datamodule.declared("inputs") == "token ids" and run.datamodule["seq_len"] == 16
    assert "_target_" not in run.model.options and run.model.options["vocab_size"] == run.model["vocab_size"]
    assert run.config == OmegaConf.to_container(
        compose(["experiment=gpt_text", "model=gpt/tiny", "trainer.max_steps=3", "seed=7", "datamodule.seq_len=16"]),
        resolve=True,
    )


def test_a_run_is_read_only_and_a_change_is_another_run():
    run = _run()
    with pytest.raises(AttributeError, match="read-only"):
        run.seed = 1
    other = run.with_config(strategy={"name": "ddp"}, seed=3)
    assert other.strategy == {"name": "ddp"} and other.seed == 3
    assert run.strategy.get("name") != "ddp" and run.seed != 3


def test_a_pickled_run_carries_its_layout_resolved_once():
    run = ResolvedExperiment.of(compose(["experiment=digits_mlp", "strategy=ddp", "trainer.devices=2"]))
    assert run.layout.topology.world_size == 2  # worked out here, once ...
    launched = run.launched(run.layout)
    copy = pickle.loads(pickle.dumps(launched))  # ... and carried to a spawned rank
    assert copy.config == launched.config and copy.layout == run.layout and copy.trainer == run.trainer
    assert copy.layout.strategy is run.layout.strategy and copy.layout.node() == copy.config["strategy"]


def test_a_value_of_the_wrong_type_reads_as_its_default_for_the_checks_the_schema_names_it():
    run = Experiment({"trainer": {"devices": "two", "max_epochs": 3}, "model": {"_target_": "no.such.Model"}})
    assert run.trainer.devices == 1 and run.trainer.max_epochs == 3
    assert run.model.cls is None and run.model.declared("inputs") is None and run.datamodule.given is False
