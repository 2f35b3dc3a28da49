"""The sweep report from job directories written by hand (no training): speed-ups against the
1-device job, their noise flag, loss_rel_diff step by step, failures named by rank."""

from __future__ import annotations

import json

import pytest

from framework.report import collect, finish_sweep, write_report


def _job(sweep, num, strategy, devices, samples_per_s, losses, status="completed", shared=(), **extra):
    job = sweep / str(num)
    job.mkdir(parents=True)
    overrides = [f"strategy={strategy}", f"trainer.devices={devices}", *shared]
    results = {
        "status": status,
        "strategy": strategy,
        "devices": devices,
        "world_size": devices,
        "throughput": {"samples_per_s": samples_per_s},
        "metrics": {"val/loss": losses[-1]},
        "job": {"num": num, "overrides": overrides},
        **extra,
    }
    (job / "results.json").write_text(json.dumps(results))
    rows = ["step,train/loss"] + [f"{step},{loss}" for step, loss in enumerate(losses, 1)]
    (job / "metrics.csv").write_text("\n".join(rows) + "\n")


def test_rows_compare_each_job_with_its_one_device_baseline(tmp_path):
    _job(tmp_path, 0, "single", 1, 1000.0, [2.0, 1.0, 0.5])
    _job(tmp_path, 1, "ddp", 2, 1800.0, [2.0, 1.0, 0.5005])
    _job(tmp_path, 2, "fsdp", 2, 5000.0, [2.0, 1.1, 0.5])  # faster than 2 ranks can be: noise
    _job(tmp_path, 3, "zero", 2, None, [2.0], status="failed", failed_rank=1, error="killed by SIGKILL")
    rows = {r["strategy"]: r for r in collect(tmp_path)}
    assert rows["ddp"]["speedup"] == pytest.approx(1.8) and rows["ddp"]["efficiency"] == pytest.approx(0.9)
    assert rows["ddp"]["loss_rel_diff"] == pytest.approx(0.001)
    assert rows["fsdp"]["loss_rel_diff"] == pytest.approx(0.1)
    assert "noise: a 5.00x speed-up on 2 ranks" in rows["fsdp"]["notes"]
    assert "notes" not in rows["ddp"] or "noise" not in rows["ddp"]["notes"]
    assert rows["zero"]["reason"] == "rank 1: killed by SIGKILL" and "speedup" not in rows["zero"]
    write_report(tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert "ddp" in report and "rank 1: killed by SIGKILL" in report
    assert (tmp_path / "report.csv").exists() and (tmp_path / "throughput.png").exists()


def test_tensorboard_names_each_jobs_run_after_its_swept_values(tmp_path):
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer
    from torch.utils.tensorboard import SummaryWriter

    for num, (strategy, devices) in enumerate([("single", 1), ("ddp", 2)]):
        _job(tmp_path, num, strategy, devices, 1000.0, [2.0, 1.0])
        with SummaryWriter(str(tmp_path / str(num) / "tb")) as writer:
            writer.add_scalar("train/loss", 1.0, 1)
    (tmp_path / "tensorboard").mkdir()
    (tmp_path / "tensorboard" / "notes.txt").write_text("mine")  # not the report's: kept
    write_report(tmp_path)
    write_report(tmp_path)  # again: the links replaced, not doubled
    runs = EventMultiplexer().AddRunsFromDirectory(str(tmp_path / "tensorboard")).Reload().Runs()
    assert sorted(runs) == ["strategy=ddp,trainer.devices=2", "strategy=single,trainer.devices=1"]
    assert (tmp_path / "tensorboard" / "notes.txt").read_text() == "mine"
    assert "tensorboard --logdir" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize(
    "never_started, says",
    [([2, 3], "job(s) 2, 3 never started"), ([], "every job had started"), (None, "the jobs after these never")],
)
def test_a_stopped_sweeps_report_says_which_jobs_never_started(tmp_path, never_started, says):
    _job(tmp_path, 0, "single", 1, 1000.0, [2.0], status="interrupted")
    (tmp_path / "sweep.json").write_text(json.dumps({"started_at": 0.0}))  # as the sweep's start writes it
    finish_sweep(tmp_path, stopped_by=15, never_started=never_started)
    report = (tmp_path / "report.md").read_text()
    assert f"Stopped by signal 15 before its end: {says}" in report
    assert json.loads((tmp_path / "sweep.json").read_text())["stopped_by_signal"] == 15


def test_a_stop_that_comes_while_the_report_is_written_waits_for_it(tmp_path, monkeypatch):
    import os
    import signal

    import framework.report.callback as callback

    def stopped_midway(sweep_dir, rows):
        os.kill(os.getpid(), signal.SIGTERM)  # as a user's second Ctrl-C or a scheduler's stop
        return write_report(sweep_dir, rows)

    _job(tmp_path, 0, "single", 1, 1000.0, [2.0, 1.0])
    (tmp_path / "sweep.json").write_text(json.dumps({"started_at": 0.0}))
    monkeypatch.setattr(callback, "write_report", stopped_midway)
    came, interrupt = [], signal.getsignal(signal.SIGINT)  # the launcher's handler: told once, after the report
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: came.append((tmp_path / "report.md").exists()))
    try:
        finish_sweep(tmp_path)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert came == [True] and (tmp_path / "throughput.png").exists()
    assert signal.getsignal(signal.SIGINT) is interrupt  # the handlers as they were


def test_the_report_compares_harness_scores_across_strategies(tmp_path):
    harness = {"harness/stdlib_modules/acc": 0.3014, "harness/stdlib_topics/exact_match:strip": 0.0}
    for num, (strategy, devices) in enumerate([("single", 1), ("fsdp", 2)]):
        _job(tmp_path, num, strategy, devices, 100.0, [2.0, 1.0])
        results = json.loads((tmp_path / str(num) / "results.json").read_text())
        results["metrics"].update(harness)
        (tmp_path / str(num) / "results.json").write_text(json.dumps(results))
    write_report(tmp_path)
    header, _, *rows = [line for line in (tmp_path / "report.md").read_text().splitlines() if line.startswith("|")]
    columns = [c.strip() for c in header.strip("|").split("|")]
    at = columns.index("harness/stdlib_modules/acc")
    assert columns.index("val/loss") < at < columns.index("harness/stdlib_topics/exact_match:strip")
    assert [r.strip("|").split("|")[at].strip() for r in rows] == ["0.3014", "0.3014"]


def test_the_report_says_what_was_swept_and_which_jobs_tie_with_the_best(tmp_path):
    shared = ["experiment=digits_mlp", "trainer.max_epochs=2"]
    _job(tmp_path, 0, "single", 1, 1000.0, [2.0, 0.5], shared=shared)
    _job(tmp_path, 1, "ddp", 2, 1800.0, [2.0, 0.5 * (1 + 1e-7)], shared=shared)  # the same to float noise
    _job(tmp_path, 2, "fsdp", 2, 1700.0, [2.0, 0.6], shared=shared)
    lines = write_report(tmp_path).read_text().splitlines()
    assert "Swept: strategy, trainer.devices; every job: experiment=digits_mlp, trainer.max_epochs=2." in lines
    best = next(line for line in lines if line.startswith("Best by"))
    assert best == "Best by val/loss (min): job 0 (0.5), strategy=single, devices=1 (tied to 1e-5 with job(s) 1)"


def test_the_timing_counts_the_test_the_predictions_and_the_harness_as_testing():
    from framework.report.timing import timing

    job = {"status": "completed", "started_at": 100.0, "job_time_s": 20.0, "wall_time_s": 18.0}
    rows = [{**job, "fit_time_s": 10.0, "test_time_s": 1.0, "predict_time_s": 2.0, "harness_time_s": 3.0}]
    lines = timing({"started_at": 100.0, "finished_at": 120.0, "launcher": "basic"}, rows)
    assert "training 10.0 s, testing 6.0 s, rank start-up 2.0 s" in lines[3]
    assert "(wall - training - testing) / jobs = 4.00 s" in lines[4]
