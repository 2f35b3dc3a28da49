"""A checkpoint is data: a trainer.pt, rng/<r>.pt, buffers/<r>.pt, callback state or DCP .metadata
crafted to run code when unpickled is refused by resume, evaluate, predict and init.weights without
running it (its manifest rewritten to match, as an attacker would); trust_checkpoint=true loads it."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
import torch

from framework import compose, fit
from framework.config import ConfigError
from framework.engine.checkpoint_files import write_manifest
from framework.engine.safe_load import UntrustedCheckpoint, dcp_planner, load_file
from framework.evaluate import evaluate
from framework.predict import predict
from tests.helpers.configs import TINY

RUN = [
    *TINY,
    "callbacks=model_checkpoint",
    "callbacks.model_checkpoint.monitor=null",
    "logger=csv",
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=3",
]


class Payload:
    """Unpickling it writes ``marker``: what a malicious checkpoint would do, harmlessly."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def _plant_in_trainer_pt(ckpt: Path, payload) -> None:  # as a callback's saved state
    state = torch.load(ckpt / "trainer.pt", weights_only=False)
    state["callbacks"]["planted"] = payload
    torch.save(state, ckpt / "trainer.pt")


def _plant_in_rng(ckpt: Path, payload) -> None:
    state = torch.load(ckpt / "rng" / "0.pt", weights_only=False)
    torch.save({**state, "planted": payload}, ckpt / "rng" / "0.pt")


def _plant_in_buffers(ckpt: Path, payload) -> None:
    torch.save({**torch.load(ckpt / "buffers" / "0.pt"), "planted": payload}, ckpt / "buffers" / "0.pt")


def _plant_in_metadata(ckpt: Path, payload) -> None:
    with open(ckpt / ".metadata", "rb") as f:
        metadata = pickle.load(f)
    metadata.planted = payload
    with open(ckpt / ".metadata", "wb") as f:
        pickle.dump(metadata, f)


PLANTS = {
    "trainer.pt": _plant_in_trainer_pt,
    "rng/0.pt": _plant_in_rng,
    "buffers/0.pt": _plant_in_buffers,
    ".metadata": _plant_in_metadata,
}


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("clean")
    fit(compose(RUN), output_dir=str(out / "run"))
    return out / "run"


@pytest.fixture(params=list(PLANTS))
def planted(request, clean_run, tmp_path):
    """A copy of the run whose ``last`` checkpoint carries a payload in one file; its manifest
    (sizes, CRC-32s) rewritten to match."""
    run = tmp_path / "run"
    shutil.copytree(clean_run, run)
    ckpt, marker = run / "checkpoints" / "last", tmp_path / "marker"
    PLANTS[request.param](ckpt, Payload(marker))
    (ckpt / "manifest.json").unlink()
    write_manifest(ckpt, step=3, epoch=0, strategy="single", world_size=1)
    return run, ckpt, marker, request.param


def _refused(call, where: str, file: str):
    with pytest.raises(ConfigError) as err:
        call()
    text = "\n".join(err.value.problems)
    assert f"{where}: checkpoint file '" in text and file in text and "builtins.exec" in text, text
    assert "trust_checkpoint=true" in text


def test_resume_evaluate_predict_and_init_refuse_a_planted_file_without_running_it(planted, tmp_path):
    run, ckpt, marker, file = planted
    _refused(lambda: fit(compose([*RUN, f"ckpt_path={ckpt}"]), output_dir=str(tmp_path / "resume")), "ckpt_path", file)
    _refused(lambda: evaluate(str(ckpt), output_dir=str(tmp_path / "eval")), "ckpt_path", file)
    _refused(lambda: predict(str(ckpt), output_dir=str(tmp_path / "predict")), "ckpt_path", file)
    if file in ("trainer.pt", ".metadata"):  # what init.weights reads of a checkpoint directory
        _refused(
            lambda: fit(compose([*RUN, f"init.weights={ckpt}"]), output_dir=str(tmp_path / "init")),
            "init.weights",
            file,
        )
    assert not marker.exists()


def test_the_engines_own_loaders_refuse_it_too(planted):
    _, ckpt, marker, file = planted
    target = ckpt / file
    with pytest.raises(UntrustedCheckpoint, match="builtins.exec"):
        if file == ".metadata":
            from framework.engine.safe_load import read_dcp_metadata

            read_dcp_metadata(ckpt)
        else:
            load_file(target)
    assert not marker.exists()


def test_with_trust_checkpoint_the_same_checkpoint_loads(planted, tmp_path):
    _, ckpt, marker, _ = planted
    results = fit(
        compose([*RUN, f"ckpt_path={ckpt}", "trust_checkpoint=true", "trainer.max_epochs=2"]),
        output_dir=str(tmp_path / "trusted"),
    )
    assert results["status"] == "completed" and results["steps"] == 6
    assert marker.read_text() == "ran"  # trusted: its code did run


def test_a_model_pt_with_a_payload_is_refused_as_init_weights(clean_run, tmp_path):
    weights = tmp_path / "model.pt"
    torch.save({"body.1.weight": Payload(tmp_path / "marker")}, weights)
    _refused(
        lambda: fit(compose([*RUN, f"init.weights={weights}"]), output_dir=str(tmp_path / "init")),
        "init.weights",
        "model.pt",
    )
    assert not (tmp_path / "marker").exists()


def test_a_value_dcp_stored_as_bytes_is_read_as_data(tmp_path):
    import io

    planner = dcp_planner()

    class Item:
        class dest_index:
            fqn = "optim.param_groups"

    buffer = io.BytesIO()
    torch.save(Payload(tmp_path / "marker"), buffer)
    buffer.seek(0)
    with pytest.raises(UntrustedCheckpoint, match="optim.param_groups"):
        planner.load_bytes(Item, buffer)
    assert not (tmp_path / "marker").exists()


@pytest.mark.parametrize("escape", ["absolute", "relative"])
def test_a_metadata_naming_files_outside_its_checkpoint_is_refused_naming_the_entry(clean_run, tmp_path, escape):
    """Only allowed classes, its manifest rewritten to match: still another run's tensors."""
    run, other = tmp_path / "run", tmp_path / "other"
    shutil.copytree(clean_run, run)
    shutil.copytree(clean_run, other)
    ckpt = run / "checkpoints" / "last"
    with open(ckpt / ".metadata", "rb") as f:
        metadata = pickle.load(f)
    for info in metadata.storage_data.values():
        target = other / "checkpoints" / "last" / info.relative_path
        info.relative_path = str(target) if escape == "absolute" else f"../../../other/checkpoints/last/{target.name}"
    with open(ckpt / ".metadata", "wb") as f:
        pickle.dump(metadata, f)
    (ckpt / "manifest.json").unlink()
    write_manifest(ckpt, step=3, epoch=0, strategy="single", world_size=1)
    with pytest.raises(ConfigError) as err:
        evaluate(str(ckpt), output_dir=str(tmp_path / "eval"))
    text = "\n".join(err.value.problems)
    assert "outside the checkpoint's directory" in text and "other/checkpoints/last/" in text and "' for " in text


def test_links_planted_under_a_save_s_names_are_never_written_through(clean_run, tmp_path):
    run, outside = tmp_path / "run", tmp_path / "outside"
    shutil.copytree(clean_run, run)
    shutil.copytree(clean_run / "checkpoints" / "last", outside / "copy")
    before = {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()}
    checkpoints = run / "checkpoints"
    (checkpoints / ".tmp-last").symlink_to(outside / "empty", target_is_directory=True)
    (checkpoints / ".old-last").symlink_to(outside / "copy", target_is_directory=True)
    resume_from = checkpoints / "epoch0-step3"
    shutil.copytree(checkpoints / "last", resume_from)
    shutil.rmtree(checkpoints / "last")
    (checkpoints / "last").symlink_to(outside / "copy", target_is_directory=True)

    with pytest.raises(ConfigError, match="is a link to .*outside the run's checkpoints"):
        fit(compose([*RUN, "ckpt_path=last", "trainer.max_epochs=2"]), output_dir=str(run))
    results = fit(compose([*RUN, f"ckpt_path={resume_from}", "trainer.max_epochs=3"]), output_dir=str(run))
    assert results["status"] == "completed" and results["steps"] == 9
    assert not (checkpoints / "last").is_symlink() and (checkpoints / "last" / "manifest.json").is_file()
    assert not any(p.name.startswith((".tmp-", ".old-")) for p in checkpoints.iterdir())
    assert not (outside / "empty").exists()
    assert {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()} == before


def test_a_shard_damaged_behind_a_rewritten_manifest_is_named_as_damage_not_another_model(clean_run, tmp_path):
    from framework.engine.checkpoint_files import CheckpointError

    run = tmp_path / "run"
    shutil.copytree(clean_run, run, symlinks=True)
    ckpt = run / "checkpoints" / "last"
    shard = next(ckpt.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[: len(shard.read_bytes()) // 2])
    (ckpt / "manifest.json").unlink()
    write_manifest(ckpt, step=3, epoch=0, strategy="single", world_size=1)
    with pytest.raises(CheckpointError, match="its keys and shapes are this run's, so a file's contents are damaged"):
        fit(compose([*RUN, f"ckpt_path={ckpt}", "trainer.max_epochs=2"]), output_dir=str(tmp_path / "resume"))
