"""Resuming a run in its own directory, as the README writes it: the run's saved config composes
the resume, and an attempt never damages the record of the run it resumes."""

from __future__ import annotations

import json

from tests.e2e.test_cli import train
from tests.helpers.configs import GPT_TINY, train_losses

# gpt_text shrunk; stopped by SIGTERM after step 3 of 6 (the probe fires at step 3 only).
STOPPED_GPT_TEXT = [
    "experiment=gpt_text",
    *GPT_TINY,
    "trainer.max_steps=6",
    "trainer.val_check_interval=3",
    "predict=false",
    "+callbacks.stop._target_=tests.helpers.probes.SignalAt",
    "+callbacks.stop.step=3",
]


def _record(run_dir) -> dict:
    """Every file of the run but its log and the attempts' own records, by content."""
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.name != "train.log" and "attempts" not in p.relative_to(run_dir).parts
    }


def test_a_failed_attempt_leaves_the_run_as_it_was_and_a_bare_resume_completes_it(tmp_path):
    run_dir = tmp_path / "run"
    first = train(*STOPPED_GPT_TEXT, f"hydra.run.dir={run_dir}")
    assert first.returncode == 143, first.stderr
    before = _record(run_dir)
    assert json.loads(before["results.json"])["status"] == "interrupted"

    # A resume whose model does not fit the checkpoint fails inside the rank, after the launch:
    # the run's config, results, metrics, checkpoints and events are byte for byte as they were.
    failed = train(f"hydra.run.dir={run_dir}", "ckpt_path=last", "model.dim=48")
    assert failed.returncode == 1 and "saved with another model" in failed.stderr
    after = _record(run_dir)
    assert {name: after[name] for name in before} == before  # (results.failed.json beside them: the failure)
    attempt = json.loads((run_dir / "attempts/2/results.json").read_text())
    assert attempt["status"] == "failed" and "model.dim=48" in str(attempt["job"]["overrides"])
    assert (run_dir / "attempts/1/config.yaml").read_bytes() == before["config.yaml"]
    assert (run_dir / "attempts/1/results.json").read_bytes() == before["results.json"]

    # The README's line, no other override: the saved config (gpt_text, the probe's stop at step 3
    # long past) resumes at step 3 and completes the run; this attempt's record is now the run's.
    resumed = train(f"hydra.run.dir={run_dir}", "ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "completed" and results["experiment"] == "gpt_text" and results["steps"] == 6
    assert "Resumed from" in (run_dir / "train.log").read_text()
    assert len(train_losses(run_dir)) == 6
    assert (run_dir / "config.yaml").read_bytes() == (run_dir / "attempts/3/config.yaml").read_bytes()
    assert (run_dir / "attempts/3/results.json").read_bytes() == (run_dir / "results.json").read_bytes()
    assert (run_dir / "attempts/1/results.json").read_bytes() == before["results.json"]


def test_a_command_line_that_names_an_experiment_composes_as_it_did(tmp_path):
    """A requeued SLURM job repeats its whole command line: it composes as the first start did."""
    from framework.job.saved_run_config import resumed_run_dir

    (tmp_path / "config.yaml").write_text("name: x\n")
    at = f"hydra.run.dir={tmp_path}"
    assert resumed_run_dir([at, "ckpt_path=last", "trainer.max_steps=9", "strategy=ddp"]) == tmp_path
    assert resumed_run_dir([at, "ckpt_path=last", "experiment=digits_mlp"]) is None
    assert resumed_run_dir([at, "ckpt_path=last", "debug=fdr"]) is None
    assert resumed_run_dir([at, f"ckpt_path={tmp_path.parent}/elsewhere/last"]) is None
    assert resumed_run_dir([at]) is None


def test_a_resume_failing_in_the_data_leaves_a_finished_runs_record_byte_for_byte(tmp_path):
    from framework.data.token_shards import read_index
    from tests.data.test_corpus_integrity import RUN, prepared

    corpus, run_dir = prepared(tmp_path, slice(0, 6)), tmp_path / "run"
    finished = train(*RUN, f"datamodule.path={corpus}", "trainer.max_steps=4", "test=true", f"hydra.run.dir={run_dir}")
    assert finished.returncode == 0, finished.stderr
    before = {name: (run_dir / name).read_bytes() for name in ("config.yaml", "results.json", "metrics.csv")}
    before.update({f".hydra/{p.name}": p.read_bytes() for p in (run_dir / ".hydra").iterdir()})
    assert "test/loss" in before["metrics.csv"].decode()
    for shard in read_index(corpus)["splits"]["train"]:  # one byte flipped in each: the first read fails
        path = corpus / shard["file"]
        data = bytearray(path.read_bytes())
        data[10] = (data[10] + 1) % 256
        path.write_bytes(bytes(data))

    failed = train(f"hydra.run.dir={run_dir}", "ckpt_path=last", "trainer.max_steps=8")
    assert failed.returncode == 1 and "is damaged: its checksum is" in failed.stderr
    assert "Traceback" not in failed.stdout + failed.stderr  # named in a few lines
    assert {name: (run_dir / name).read_bytes() for name in before} == before
    assert json.loads((run_dir / "attempts/2/results.json").read_text())["status"] == "failed"
