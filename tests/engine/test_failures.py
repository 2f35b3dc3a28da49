"""What a run does when things go wrong: divergence, bad numbers, broken or missing checkpoints."""

from __future__ import annotations

import json

import pytest
import torch

from framework import compose, fit
from framework.config import ConfigError
from framework.job.preflight import preflight
from tests.helpers.configs import TINY

CKPT = [
    "callbacks=model_checkpoint",
    "callbacks.model_checkpoint.monitor=null",
    "callbacks.model_checkpoint.every_n_train_steps=1",
    "logger=csv",
]


def strict_json(path):
    def refuse(token):
        raise ValueError(f"not strict JSON: {token}")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_a_diverging_run_stops_and_saves_no_nonfinite_weights(tmp_path):
    results = fit(
        compose([*TINY, *CKPT, "optimizer=sgd", "optimizer.lr=1e30", "trainer.log_every_n_steps=3"]),
        output_dir=str(tmp_path),
    )
    assert results["status"] == "diverged" and results["steps"] < 12
    saved = strict_json(tmp_path / "results.json")  # NaN metrics are null, not bare NaN tokens
    assert saved["status"] == "diverged" and saved["diverged"]["by_step"] == results["steps"]
    last = tmp_path / "checkpoints" / "last"
    assert last.exists()  # step 1 was saved (its loss was checked finite); no later step was
    step = torch.load(last / "trainer.pt", weights_only=False)["loop"]["global_step"]
    assert step <= saved["diverged"]["after_step"]
    assert all(torch.isfinite(w).all() for w in _saved_weights(last).values())


def _saved_weights(checkpoint) -> dict:
    """The model tensors of a checkpoint directory, as one state_dict."""
    import tempfile

    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with tempfile.TemporaryDirectory() as tmp:
        dcp_to_torch_save(str(checkpoint), f"{tmp}/full.pt")
        return torch.load(f"{tmp}/full.pt", weights_only=False)["model"]


@pytest.mark.parametrize(
    "override,message",
    [
        ("datamodule.batch_size=0", "datamodule.batch_size: the global batch size must be > 0, got 0"),
        ("datamodule.batch_size=-4", "datamodule.batch_size: the global batch size must be > 0, got -4"),
        ("optimizer.lr=0", "optimizer.lr: the learning rate must be > 0, got 0"),
        ("optimizer.lr=nan", "optimizer.lr: must be a finite number, got nan"),
        ("optimizer.lr=inf", "optimizer.lr: must be a finite number, got inf"),
        ("trainer.max_steps=0", "trainer.max_steps: must be >= 1, or -1 (or null) for no limit; got 0"),
        ("trainer.gradient_clip_val=-1.0", "trainer.gradient_clip_val: must be >= 0, got -1.0"),
        ("strategy.timeout_s=0", "strategy.timeout_s: the process-group timeout must be > 0, got 0"),
    ],
)
def test_numbers_out_of_range_are_config_errors(override, message):
    with pytest.raises(ConfigError) as err:
        preflight(compose([*TINY, override]))
    assert message in err.value.problems


RUN = [
    *TINY,
    *CKPT[:2],
    "callbacks.model_checkpoint.every_n_train_steps=null",
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=4",
]


@pytest.fixture
def finished(tmp_path):
    """A completed 1-epoch run with checkpoints/last, in tmp_path/run."""
    out = tmp_path / "run"
    fit(compose(RUN), output_dir=str(out))
    return out


def test_a_kill_between_the_two_renames_of_a_commit_loses_nothing(finished):
    ckpts = finished / "checkpoints"
    (ckpts / "last").rename(ckpts / ".old-last")  # the state after the commit's first rename
    with pytest.raises(ConfigError, match="already holds a run"):  # .old-last is a run's checkpoint
        preflight(compose(RUN + [f"output_dir={finished}"]))
    (ckpts / ".tmp-last").mkdir()  # and an unfinished save's leftovers
    resumed = fit(compose(RUN + ["trainer.max_epochs=2", "ckpt_path=last"]), output_dir=str(finished))
    assert resumed["status"] == "completed" and resumed["steps"] == 8  # resumed from .old-last at step 4
    assert (ckpts / "last").is_dir() and not (ckpts / ".old-last").exists() and not (ckpts / ".tmp-last").exists()


def test_ckpt_path_last_without_a_checkpoint_starts_fresh(tmp_path, caplog):
    results = fit(compose(RUN + ["ckpt_path=last"]), output_dir=str(tmp_path))
    assert results["status"] == "completed" and results["steps"] == 4
    assert "no checkpoint in" in (tmp_path / "train.log").read_text()


def _shard(ckpt):
    return next(p for p in ckpt.iterdir() if p.suffix == ".distcp")


@pytest.mark.parametrize(
    "damage,expected",
    [
        (lambda c: _shard(c).unlink(), "is incomplete: __0_0.distcp ("),
        (lambda c: _shard(c).write_bytes(_shard(c).read_bytes()[:100]), "is corrupted: __0_0.distcp has 100 bytes"),
        (lambda c: (c / ".metadata").write_bytes(b"x"), "is corrupted: .metadata has 1 bytes"),
        (lambda c: (c / "trainer.pt").write_bytes((c / "trainer.pt").read_bytes()[:50]), "trainer.pt has 50 bytes"),
        (lambda c: (c / "manifest.json").unlink(), "has no manifest.json"),
    ],
)
def test_a_damaged_checkpoint_is_named_before_anything_runs(finished, damage, expected):
    damage(finished / "checkpoints" / "last")
    with pytest.raises(ConfigError) as err:
        preflight(compose(RUN + [f"output_dir={finished}", "ckpt_path=last"]))
    [problem] = err.value.problems
    assert problem.startswith(f"ckpt_path: checkpoint '{finished / 'checkpoints' / 'last'}'") and expected in problem


@pytest.mark.parametrize("damaged", [lambda c: c / "trainer.pt", _shard])
def test_damaged_contents_fail_the_resume_without_replacing_the_completed_results(finished, damaged):
    target = damaged(finished / "checkpoints" / "last")
    data = bytearray(target.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)  # same size, flipped contents
    target.write_bytes(bytes(data))
    from framework.engine.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match=f"the contents of {target.name} changed since it was written"):
        fit(compose(RUN + ["trainer.max_epochs=2", "ckpt_path=last"]), output_dir=str(finished))
    assert strict_json(finished / "results.json")["status"] == "completed"
    assert strict_json(finished / "results.failed.json")["status"] == "failed"


def test_metrics_csv_is_written_as_steps_complete_and_resumes_as_one_run(tmp_path):
    from framework.loggers import CSVLogger

    logger = CSVLogger(str(tmp_path))
    for step in range(1, 6):
        logger.log_metrics({"train/loss": 1.0 / step, "epoch": 0}, step)
    logger.log_metrics({"val/loss": 0.5, "epoch": 0}, 5)  # a new column at the step being logged
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert lines == ["step,epoch,train/loss", *(f"{s},0,{1.0 / s}" for s in range(1, 5))]  # a kill loses step 5 only
    logger.log_metrics({"train/loss": 0.1, "epoch": 1}, 6)
    assert (tmp_path / "metrics.csv").read_text().splitlines()[0] == "step,epoch,train/loss,val/loss"
    # killed here; resumed from a checkpoint at step 4: steps 5 and 6 never happened
    resumed = CSVLogger(str(tmp_path))
    resumed.resume(4)
    resumed.log_metrics({"train/loss": 0.3, "epoch": 0}, 5)
    resumed.finalize("completed")
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert lines[0] == "step,epoch,train/loss,val/loss" and [ln.split(",")[0] for ln in lines[1:]] == list("12345")
    assert lines[-1] == "5,0,0.3,"


def test_a_whole_checkpoint_of_another_optimizer_is_named_not_called_damaged(tmp_path):
    from framework.engine.checkpoint import CheckpointError

    fit(compose(RUN + ["optimizer=sgd", "optimizer.momentum=0.0"]), output_dir=str(tmp_path))  # no optimizer state
    with pytest.raises(CheckpointError, match="is whole .* but cannot be loaded into this run"):
        fit(compose(RUN + ["trainer.max_epochs=2", "ckpt_path=last"]), output_dir=str(tmp_path))  # Adam's state


def test_a_checkpoint_of_another_model_names_the_keys_that_differ(tmp_path):
    from framework.engine.checkpoint import CheckpointError

    fit(compose(RUN), output_dir=str(tmp_path / "wide"))  # hidden_sizes [32]
    with pytest.raises(CheckpointError) as err:
        fit(
            compose(RUN + ["model.hidden_sizes=[16]", f"ckpt_path={tmp_path / 'wide' / 'checkpoints' / 'last'}"]),
            output_dir=str(tmp_path / "narrow"),
        )
    assert (
        "other shapes: model.body.1.bias (saved [32], here [16]), model.body.1.weight (saved [32, 64], here "
        "[16, 64])" in str(err.value)
    )


def test_changed_contents_under_a_manifest_without_checksums_are_not_called_checked(finished):
    last = finished / "checkpoints" / "last"
    manifest = json.loads((last / "manifest.json").read_text())
    del manifest["crc32"]
    (last / "manifest.json").write_text(json.dumps(manifest))
    shard = _shard(last)
    data = bytearray(shard.read_bytes())
    data[:4] = b"\0\0\0\0"  # the first stored item's header: it no longer loads
    shard.write_bytes(bytes(data))
    from framework.engine.checkpoint import CheckpointError

    with pytest.raises(CheckpointError) as err:
        fit(compose(RUN + ["trainer.max_epochs=2", "ckpt_path=last"]), output_dir=str(finished))
    assert "its files match their sizes; its manifest has no checksums" in str(err.value)
    assert "sizes and checksums" not in str(err.value)


def test_a_run_continued_after_its_test_drops_that_test_and_keeps_each_steps_epoch(tmp_path):
    """A finished run, then ckpt_path=last with more epochs: its metrics.csv reads as the longer
    run's would, without the test that ended the first (and its epoch label on that row)."""
    from framework.loggers import CSVLogger

    logger = CSVLogger(str(tmp_path))
    logger.log_metrics({"train/loss": 1.0, "val/loss": 0.9, "epoch": 1}, 10)
    logger.log_metrics({"test/loss": 0.8, "epoch": 2}, 10)  # the test after fit: the epoch counter is past the end
    logger.finalize("completed")
    assert (tmp_path / "metrics.csv").read_text().splitlines()[1] == "10,1,0.8,1.0,0.9"
    resumed = CSVLogger(str(tmp_path))
    resumed.resume(10)
    resumed.log_metrics({"train/loss": 0.5, "epoch": 2}, 15)
    resumed.finalize("completed")
    assert (tmp_path / "metrics.csv").read_text().splitlines()[1:] == ["10,1,,1.0,0.9", "15,2,,0.5,"]
