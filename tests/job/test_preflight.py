"""Each kind of config problem is reported, all at once, naming the key and the valid choices."""

from __future__ import annotations

import pytest
from hydra.errors import HydraException

from framework import compose
from framework.config import ConfigError
from framework.job.preflight import preflight


def problems(*overrides: str) -> list[str]:
    with pytest.raises(ConfigError) as err:
        preflight(compose(list(overrides)))
    return err.value.problems


def test_unknown_key_names_the_closest_valid_key():
    [msg] = problems("trainer.max_epoch=3")
    assert msg.startswith("trainer.max_epoch: unknown key; did you mean 'max_epochs'?")


def test_unknown_argument_of_a_target_names_the_closest_parameter():
    [msg] = problems("optimizer.lrr=0.1")
    assert "optimizer.lrr" in msg and "did you mean 'lr'" in msg


def test_a_top_level_typo_gets_the_validators_message_with_every_other_problem():
    found = problems("sed=1", "trainer.max_epoch=3")
    assert found[0].startswith("sed: unknown key; did you mean 'seed'?")
    assert found[1].startswith("trainer.max_epoch: unknown key")


def test_keys_of_the_users_own_are_allowed_at_the_top_level():
    cfg = compose(["tags=[baseline,v2]", "paths.data_dir=/data", "extras.note=x", "+my_key=1", "experiment=digits_mlp"])
    preflight(cfg)  # no problem: reserved namespaces, and a key added on purpose (+)
    assert list(cfg.tags) == ["baseline", "v2"] and cfg.paths.data_dir == "/data" and cfg.my_key == 1
    # but a key of the user's that looks like one of ours is taken for a typo
    [msg] = problems("+tag=[a]")
    assert msg.startswith("tag: unknown key; did you mean 'tags'?")


def test_wrong_type():
    [msg] = problems("trainer.devices=two")
    assert msg == "trainer.devices: expected int, got str 'two'"
    # a named strategy's options are its own whatever the devices say (not auto's: 8 false unknown keys)
    assert problems("strategy=ddp", "trainer.devices=two") == [msg]
    assert problems("strategy=fsdp", "trainer.devices=2.5") == ["trainer.devices: expected int, got float 2.5"]


def test_wrong_type_of_an_argument_annotated_with_a_union_of_the_new_syntax():
    # torch's optimizers annotate lr as ``float | Tensor`` (a Tensor is never a config value)
    assert problems("optimizer.lr=fast") == ["optimizer.lr: expected float, got str 'fast'"]


def test_value_outside_the_choices_lists_them():
    [msg] = problems("trainer.precision=16")
    assert "'32-true', 'bf16-mixed', '16-mixed'" in msg


def test_missing_value():
    [msg] = problems("datamodule.batch_size=???")
    assert msg.startswith("datamodule.batch_size: missing value")


def test_unknown_group_option_lists_the_valid_options():
    with pytest.raises(HydraException) as err:
        compose(["model=transformer"])
    text = str(err.value)
    assert "model/transformer" in text and "cnn" in text and "mlp" in text and "resnet18" in text


def test_target_that_does_not_import_shows_the_import_error_and_key():
    [msg] = problems("model._target_=no_such_package.Model")
    assert msg.startswith("model._target_: cannot import 'no_such_package.Model'")
    assert "No module named 'no_such_package'" in msg


def test_import_error_inside_a_user_module_is_shown_as_is(tmp_path, monkeypatch):
    (tmp_path / "user_model.py").write_text("import not_installed_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    [msg] = problems("model._target_=user_model.Net")
    assert "No module named 'not_installed_dependency'" in msg


def test_every_problem_is_reported_at_once():
    found = problems(
        "trainer.max_epoch=3",
        "trainer.devices=two",
        "model._target_=nope.Model",
        "optimizer.lrr=0.1",
        "strategy.name=ddpx",
        "scheduler=cosine",
        "scheduler.interval=minute",
    )
    assert len(found) == 6, found
    assert any(p.startswith("strategy.name: unknown strategy 'ddpx' (valid: ") for p in found)


def test_topology_single_strategy_with_two_devices():
    [msg] = problems("strategy=single", "trainer.devices=2")
    assert "strategy=single" in msg and "trainer.devices=2" in msg


def test_cuda_requested_without_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    [msg] = problems("trainer.accelerator=cuda")
    assert "no CUDA device" in msg


def test_lightnings_gpu_is_the_gpu_here(monkeypatch):
    import torch

    from framework.config.environment import resolve_accelerator

    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_accelerator("gpu") == "cuda" and resolve_accelerator("auto") == "cpu"  # (cuda's check names it)
    assert "no CUDA device" in problems("trainer.accelerator=gpu")[0]
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_accelerator("gpu") == "mps"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_accelerator("gpu") == resolve_accelerator("auto") == "cuda"


def test_both_limits_unlimited():
    [msg] = problems("trainer.max_epochs=-1", "trainer.max_steps=-1")
    assert "both unlimited" in msg


def test_unresolvable_interpolation():
    [msg] = problems("model.num_classes=${datamodule.nope}")
    assert "cannot resolve" in msg


def test_dp_on_cpu_with_two_devices_suggests_ddp():
    [msg] = problems("strategy=dp", "trainer.accelerator=cpu", "trainer.devices=2")
    assert msg.startswith("strategy=dp:") and "use strategy=ddp" in msg


def test_hsdp_factors_that_do_not_multiply_state_every_factor():
    [msg] = problems(
        "strategy=hsdp", "trainer.devices=4", "strategy.replicate=3", "strategy.shard=2", "trainer.oversubscribe=true"
    )
    assert msg.startswith(
        "strategy.pp(1) x strategy.dp_replicate(3) x strategy.dp_shard(2) x strategy.ep(1) x strategy.cp(1) x "
        "strategy.tp(1) cannot make world size 4 (trainer.devices=4 x trainer.num_nodes=1)"
    )
    # the option names hsdp had as a class of its own set the degrees, and the refusal says so
    assert msg.endswith(
        "(strategy=hsdp: strategy.replicate sets strategy.dp_replicate, strategy.shard sets strategy.dp_shard)"
    )


def test_several_nodes_need_a_launcher():
    [msg] = problems("strategy=ddp", "trainer.num_nodes=2")
    assert "torchrun --nnodes 2" in msg


def test_global_batch_must_divide_across_ranks():
    [msg] = problems("strategy=ddp", "trainer.devices=3", "datamodule.batch_size=64", "trainer.oversubscribe=true")
    assert msg.startswith("datamodule.batch_size: the global batch 64 does not divide across 3")


def test_strategy_options_are_checked_against_that_strategy():
    [msg] = problems("strategy=fsdp", "strategy.sharding=half")
    assert "strategy.sharding: expected one of 'full', 'grad_op'" in msg
    [msg] = problems("strategy=ddp", "+strategy.sharding=full")
    assert msg.startswith("strategy.sharding: unknown key")


def test_a_run_directory_with_results_is_not_overwritten(tmp_path):
    from framework import fit

    run = [
        "experiment=digits_mlp",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=2",
        "trainer.enable_progress_bar=false",
        "logger=none",
        "callbacks=model_checkpoint",
    ]
    fit(compose(run), output_dir=str(tmp_path))
    before = (tmp_path / "results.json").read_text()
    with pytest.raises(ConfigError, match=r"output_dir: .* already holds a run \(results.json, checkpoints/\)"):
        fit(compose(run), output_dir=str(tmp_path))
    assert (tmp_path / "results.json").read_text() == before
    # resuming that run, or saying overwrite=true, are fine
    for extra in (["ckpt_path=last", "trainer.max_epochs=2"], ["overwrite=true"]):
        assert fit(compose(run + extra), output_dir=str(tmp_path))["status"] == "completed", extra
