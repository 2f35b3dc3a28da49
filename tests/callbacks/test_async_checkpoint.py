"""callbacks.model_checkpoint.async_save: shards staged at the save, written in the background,
committed once written; the same checkpoints as synchronous saves, resumed exactly, and a write
that fails is never taken for a checkpoint."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.checkpoint.filesystem import FileSystemWriter

from framework import compose, fit
from framework.engine.checkpoint import is_checkpoint
from framework.engine.checkpoint_files import saved_step, verify_checkpoint
from tests.engine.test_checkpoint import RUN, rows

BACKGROUND = [*RUN, "callbacks.model_checkpoint.async_save=true"]
SAVED = ["step5", "step6", "step10", "step12", "step15", "step18", "last"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for name, overrides in (("sync", RUN), ("async", BACKGROUND)):
        out[name] = tmp_path_factory.mktemp(name)
        fit(compose(overrides), output_dir=str(out[name]))
    return out


def _tensors(checkpoint) -> dict:
    state = torch.load(checkpoint / "trainer.pt", weights_only=False)
    return {"loop": state["loop"], "rng": torch.load(checkpoint / "rng" / "0.pt", weights_only=False)["torch"]}


def test_background_checkpoints_hold_what_synchronous_ones_do(runs):
    ckpts = {name: out / "checkpoints" for name, out in runs.items()}
    assert sorted(p.name for p in ckpts["async"].iterdir()) == sorted(p.name for p in ckpts["sync"].iterdir())
    for name in SAVED:
        assert verify_checkpoint(ckpts["async"] / name, contents=True) == [], name
        sync, background = _tensors(ckpts["sync"] / name), _tensors(ckpts["async"] / name)
        assert sync["loop"] == background["loop"] and torch.equal(sync["rng"], background["rng"]), name
    assert saved_step(ckpts["async"] / "last") == 18
    assert rows(runs["async"]) == rows(runs["sync"])  # training itself is untouched


def test_resume_from_a_background_checkpoint_is_exact(runs, tmp_path):
    resumed = fit(
        compose([*BACKGROUND, f"ckpt_path={runs['async'] / 'checkpoints' / 'step5'}"]), output_dir=str(tmp_path)
    )
    expected, got = rows(runs["sync"]), rows(tmp_path)
    later = [s for s in expected if s > 5 and expected[s]["train/loss"]]
    assert later and all(got[s]["train/loss"] == expected[s]["train/loss"] for s in later)
    assert resumed["steps"] == 18


def test_a_failed_background_write_fails_the_run_and_is_never_a_checkpoint(tmp_path, monkeypatch):
    real, calls = FileSystemWriter.write_data, []

    def failing_second(self, plan, planner):  # the disk fails under the second save's thread
        calls.append(1)
        if len(calls) == 2:
            raise OSError(5, "Input/output error (injected)")
        return real(self, plan, planner)

    monkeypatch.setattr(FileSystemWriter, "write_data", failing_second)
    with pytest.raises(BaseException, match="injected"):
        fit(compose(BACKGROUND), output_dir=str(tmp_path))
    ckpts = tmp_path / "checkpoints"
    assert is_checkpoint(ckpts / "step5") and saved_step(ckpts / "last") == 5
    assert not (ckpts / "step6").exists() and not [p for p in ckpts.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.multiprocess
def test_background_saves_of_sharded_ranks_resume_on_one_device(tmp_path):
    # fsdp on 2 ranks: each stages its DTensor shards, the threads coordinate over a group of
    # their own; a checkpoint of step 5 resumes on one device to the 2-rank run's losses (no
    # dropout: its masks are drawn per rank)
    layout = [*BACKGROUND, "model.dropout=0.0"]
    sharded = [*layout, "strategy=fsdp", "trainer.devices=2", "strategy.timeout_s=120"]
    fit(compose(sharded), output_dir=str(tmp_path / "fsdp"))
    for name in SAVED:
        assert verify_checkpoint(tmp_path / "fsdp" / "checkpoints" / name, contents=True) == [], name
    ckpt = tmp_path / "fsdp" / "checkpoints" / "step5"
    fit(compose([*layout, f"ckpt_path={ckpt}"]), output_dir=str(tmp_path / "single"))
    expected, got = rows(tmp_path / "fsdp"), rows(tmp_path / "single")
    later = [s for s in expected if s > 5 and expected[s]["train/loss"]]
    assert later and all(
        float(got[s]["train/loss"]) == pytest.approx(float(expected[s]["train/loss"]), abs=1e-6) for s in later
    )
