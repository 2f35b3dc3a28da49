"""trainer.compile=blocks: each of the model's blocks compiled in place, before the strategy wraps
the model (after a pipeline's cut); the same losses as eager, the same parameter names."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from framework import compose, fit
from framework.config import ConfigError
from framework.engine.checkpoint import load_model_weights
from framework.engine.compiling import compile_model
from framework.job.preflight import preflight
from framework.models import GPT
from tests.helpers.configs import GPT_TINY, train_losses

RUN = [*GPT_TINY, "trainer.max_steps=4", "trainer.limit_val_batches=1", "test=false", "callbacks=model_checkpoint"]


@pytest.fixture(scope="module")
def eager(tmp_path_factory):
    out = tmp_path_factory.mktemp("eager")
    fit(compose(RUN), output_dir=str(out))
    return train_losses(out)


def test_compiled_blocks_train_as_eager_with_the_same_names(eager, tmp_path):
    fit(compose([*RUN, "trainer.compile=blocks"]), output_dir=str(tmp_path))
    assert train_losses(tmp_path) == pytest.approx(eager, abs=1e-5) and len(eager) == 4
    assert "Compiling 2 blocks (layers.0, layers.1)" in (tmp_path / "train.log").read_text()
    plain = GPT(**{k: v for k, v in compose(RUN).model.items() if k != "_target_"})
    assert load_model_weights(tmp_path / "checkpoints" / "last", plain)["missing"] == []  # names unchanged


def test_checkpointed_compiled_blocks_train_as_eager(eager, tmp_path):
    # the block's checkpoint traced into its compiled forward (it failed in dynamo: a context of ours)
    fit(compose([*RUN, "trainer.compile=blocks", "trainer.activation_checkpointing=[Block]"]), output_dir=str(tmp_path))
    assert train_losses(tmp_path) == pytest.approx(eager, abs=1e-5)
    log = (tmp_path / "train.log").read_text()
    assert "Activation checkpointing: 2 submodules" in log and "Compiling 2 blocks" in log


def test_checkpointing_a_batchnorm_under_compile_is_refused_before_start():
    with pytest.raises(ConfigError) as err:
        preflight(
            compose(["experiment=digits_cnn", "trainer.activation_checkpointing=[Sequential]", "trainer.compile=true"])
        )
    assert any(
        p.startswith("trainer.activation_checkpointing: Sequential holds a BatchNorm") and "trainer.compile=false" in p
        for p in err.value.problems
    ), err.value.problems
    preflight(compose(["experiment=digits_cnn", "trainer.activation_checkpointing=[Sequential]"]))  # eager: fine


def test_a_model_without_blocks_is_named_with_the_way_out():
    with pytest.raises(
        ValueError, match=r"trainer.compile=blocks: Sequential declares no blocks .* trainer.compile=true"
    ):
        compile_model(nn.Sequential(nn.Linear(2, 2)), "blocks")
    assert compile_model(nn.Sequential(nn.Linear(2, 2)), True) == [""]  # the whole model, as before
    model = GPT(vocab_size=16, dim=8, n_layers=3, n_heads=2)
    assert compile_model(model, "blocks") == ["layers.0", "layers.1", "layers.2"]
    assert all("forward" in vars(block) for block in model.layers.values())  # compiled, per instance
    assert isinstance(model, GPT) and torch.is_tensor(model.tok_embeddings.weight)


class _Block(nn.Linear):
    pass


class _Stack(nn.Sequential):
    block_classes = (_Block,)  # the classes themselves, as a user writes them, or their names


def test_a_models_blocks_may_be_named_by_their_classes():
    assert compile_model(_Stack(_Block(2, 2), nn.ReLU(), _Block(2, 2)), "blocks") == ["0", "2"]


def test_a_model_without_blocks_is_refused_before_start():
    with pytest.raises(ConfigError) as err:
        preflight(compose(["experiment=digits_mlp", "trainer.compile=blocks"]))
    assert any(p.startswith("trainer.compile=blocks: MLP declares no blocks") for p in err.value.problems), err.value


@pytest.mark.multiprocess
@pytest.mark.parametrize(
    "layout",
    [
        ["strategy=ddp", "trainer.devices=2"],
        ["strategy=fsdp", "trainer.devices=2", "strategy.wrap_classes=[Block]"],
        ["strategy=pp", "trainer.devices=2"],
    ],
    ids=["ddp", "fsdp", "pp"],
)
def test_compiled_blocks_under_a_strategy_train_as_one_eager_device(layout, eager, tmp_path):
    fit(compose([*RUN, *layout, "trainer.compile=blocks"]), output_dir=str(tmp_path))
    assert train_losses(tmp_path) == pytest.approx(eager, abs=1e-5)


@pytest.mark.parametrize(
    "layout",
    [["strategy=tp"], ["strategy=fsdp_tp", "trainer.devices=4"], ["strategy=parallel", "strategy.tp=2"]],
    ids=["tp", "fsdp_tp", "parallel_tp"],
)
def test_tensor_parallelism_with_compiled_blocks_is_refused_before_start(layout):
    with pytest.raises(ConfigError) as err:
        preflight(compose([*RUN, "trainer.devices=2", *layout, "trainer.compile=blocks", "trainer.oversubscribe=true"]))
    assert any(
        p.startswith("trainer.compile: blocks is not supported with tensor parallelism") for p in err.value.problems
    )
