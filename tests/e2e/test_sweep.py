"""A real multirun: strategies x device counts, one invalid combination, a report at the end."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from tests.helpers.configs import TINY


def test_sweep_records_every_job_and_ends_with_a_report(tmp_path):
    sweep = tmp_path / "sweep"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "framework.train",
            "-m",
            *TINY,
            "strategy=single,ddp",
            "trainer.devices=1,2",
            "trainer.accelerator=cpu",
            "callbacks=none",
            "logger=csv",
            f"hydra.sweep.dir={sweep}",
        ],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # one directory per job, nothing else besides the report
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert jobs == ["0", "1", "2", "3"]
    with open(sweep / "report.csv") as f:
        rows = {(r["strategy"], r["devices"]): r for r in csv.DictReader(f)}
    assert rows[("single", "2")]["status"] == "invalid" and "strategy=single" in rows[("single", "2")]["reason"]
    for key in [("single", "1"), ("ddp", "1"), ("ddp", "2")]:
        assert rows[key]["status"] == "completed" and float(rows[key]["samples_per_s"]) > 0
    assert float(rows[("ddp", "2")]["speedup"]) > 0 and rows[("ddp", "2")]["world_size"] == "2"
    # same seed and global batch: the same test accuracy on 1 and 2 ranks
    assert float(rows[("ddp", "2")]["test/acc"]) == float(rows[("single", "1")]["test/acc"])
    measured, predicted = (
        float(rows[("ddp", "2")]["model_state_bytes"]),
        float(rows[("ddp", "2")]["predicted_model_state_bytes"]),
    )
    assert abs(measured - predicted) / predicted < 0.05
    report = (sweep / "report.md").read_text()
    assert "3 completed, 1 invalid, 0 failed" in report
    for name in ("throughput.png", "memory.png", "loss_curves.png"):
        assert (sweep / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    invalid = json.loads((sweep / rows[("single", "2")]["job"] / "results.json").read_text())
    assert invalid["status"] == "invalid" and "++trainer.devices=2" in invalid["job"]["overrides"]
    # the sweep's own record, and where its wall time went
    record = json.loads((sweep / "sweep.json").read_text())
    assert record["launcher"] == "basic" and record["finished_at"] > record["started_at"]
    assert "## Timing" in report and "overhead per job" in report and "of which rank start-up" in report


def test_report_rebuilds_an_interrupted_sweep(tmp_path):
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "results.json").write_text(
        json.dumps(
            {
                "status": "completed",
                "strategy": "single",
                "devices": 1,
                "world_size": 1,
                "throughput": {"samples_per_s": 100.0},
                "metrics": {"test/acc": 0.9},
            }
        )
    )
    (tmp_path / "1").mkdir()  # started (Hydra opened its log), never finished
    (tmp_path / "1" / "train.log").write_text("")
    (tmp_path / "notes").mkdir()  # not a job
    proc = subprocess.run(
        [sys.executable, "-m", "framework.report", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "1 completed, 0 invalid, 0 failed, 1 missing" in (tmp_path / "report.md").read_text()
    # a run directory is not a sweep: said so, instead of a report of its subfolders
    proc = subprocess.run(
        [sys.executable, "-m", "framework.report", str(tmp_path / "0")], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and "one run's directory" in proc.stderr
    # --help answers on stdout; a directory that is not there is named
    report = [sys.executable, "-m", "framework.report"]
    proc = subprocess.run([*report, "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: framework-report <sweep dir>")
    proc = subprocess.run([*report, str(tmp_path / "nope")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith(f"{tmp_path / 'nope'}: no such directory")


def test_a_failing_job_does_not_stop_the_sweep_but_fails_its_exit_status(tmp_path):
    sweep = tmp_path / "sweep"
    # a callback of the user's fails at run time, inside the rank, in the first job
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "framework.train",
            "-m",
            *TINY,
            "callbacks=none",
            "+callbacks.fails._target_=tests.helpers.probes.FailsAtFitStart",
            "+callbacks.fails.fail=true,false",
            "logger=csv",
            f"hydra.sweep.dir={sweep}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1 and "1 job(s) failed: 0" in proc.stderr
    report = (sweep / "report.md").read_text()
    assert "1 completed, 0 invalid, 1 failed" in report and "rank 0: ValueError" in report
    # the same sweep again into the same directory continues it: the completed job is kept as it
    # was, the failed one (no checkpoint) runs again afresh in its own directory, and fails again
    kept = (sweep / "1" / "results.json").read_text()
    again = subprocess.run(proc.args, capture_output=True, text=True, timeout=300)
    assert again.returncode == 1 and "1 job(s) failed: 0" in again.stderr
    assert (sweep / "1" / "results.json").read_text() == kept
    report = (sweep / "report.md").read_text()
    assert "kept 1 (finished with the same config: not run again); ran 0 again afresh" in report


def test_optuna_search_and_joblib_launcher(tmp_path):
    # the plugins come with the test extra: a missing one fails here rather than skipping
    sweep = tmp_path / "optuna"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "framework.train",
            "-m",
            "hparams_search=digits_optuna",
            *TINY,
            "hydra.sweeper.n_trials=2",
            "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2",
            "callbacks=none",
            "logger=csv",
            "strategy=ddp",
            "trainer.devices=2",
            f"hydra.sweep.dir={sweep}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    best = (sweep / "optimization_results.yaml").read_text()
    assert "best_params" in best and "optimizer.lr" in best
    # each trial trained with the sampled values, which it recorded in its resolved config
    lrs = {(sweep / j / "config.yaml").read_text().split("lr: ")[1].split("\n")[0] for j in ("0", "1")}
    assert len(lrs) == 2
    # distributed trials, launched from joblib's worker processes: both ranks of each trained
    for job in ("0", "1"):
        results = json.loads((sweep / job / "results.json").read_text())
        assert results["world_size"] == 2
        # the cores shared by 2 ranks and the job beside it
        assert results["threads"] == max(1, len(os.sched_getaffinity(0)) // 4)
        assert (sweep / job / "ranks" / "1" / "train.log").exists()
    assert "2 completed" in (sweep / "report.md").read_text()


def _job(root, name, overrides, world, samples_per_s, val_loss, strategy="ddp", **metrics):
    (root / name).mkdir()
    (root / name / "results.json").write_text(
        json.dumps(
            {
                "status": "completed",
                "strategy": strategy,
                "devices": world,
                "world_size": world,
                "throughput": {"samples_per_s": samples_per_s},
                "metrics": {"val/loss": val_loss, **metrics},
                "job": {"overrides": overrides, "started_at": 1000.0 + int(name), "time_s": 1.0},
            }
        )
    )


def test_report_compares_each_job_with_its_own_one_device_baseline(tmp_path):
    from framework.report import collect, write_report

    # learning rate x devices: speed-up is measured within each learning rate
    for name, lr, world, rate in [
        ("0", "0.1", 1, 100.0),
        ("1", "0.1", 2, 180.0),
        ("2", "0.2", 1, 50.0),
        ("3", "0.2", 2, 95.0),
    ]:
        _job(
            tmp_path, name, ["strategy=ddp", f"optimizer.lr={lr}", f"++trainer.devices={world}"], world, rate, float(lr)
        )
    rows = {r["job"]: r for r in collect(tmp_path)}
    assert rows["1"]["speedup"] == 1.8 and rows["3"]["speedup"] == 1.9 and rows["2"]["speedup"] == 1.0
    report = write_report(tmp_path).read_text()
    assert "| job | optimizer.lr | strategy |" in report
    assert "Best by val/loss (min): job 0 (0.1), strategy=ddp, devices=1, optimizer.lr=0.1" in report


def test_report_shows_the_tasks_own_metrics_and_ranks_by_the_optimized_metric(tmp_path):
    from framework.report import SWEEP_FILE, write_report

    (tmp_path / SWEEP_FILE).write_text(json.dumps({"optimized_metric": "val/r2", "optimized_mode": "max"}))
    for name, lr, r2 in [("0", "0.1", 0.5), ("1", "0.2", 0.9), ("2", "0.3", 0.7)]:
        _job(tmp_path, name, [f"optimizer.lr={lr}"], 1, 100.0, 1.0, **{"val/mae": 0.2, "val/r2": r2})
    write_report(tmp_path)
    with open(tmp_path / "report.csv") as f:
        rows = list(csv.DictReader(f))
    assert {"val/loss", "val/mae", "val/r2"} <= set(rows[0]) and "val/acc" not in rows[0]
    assert [r["rank"] for r in rows] == ["3", "1", "2"]
    assert "Best by val/r2 (max): job 1 (0.9)" in (tmp_path / "report.md").read_text()


def test_report_of_a_search_over_one_device_jobs_has_no_speedup(tmp_path):
    from framework.report import collect

    for name, lr in [("0", "0.1"), ("1", "0.2")]:
        _job(tmp_path, name, [f"optimizer.lr={lr}"], 1, 100.0 * float(lr), 1.0)
    assert all(r.get("speedup") is None for r in collect(tmp_path))


def test_slurm_launcher_layout_through_submitit_local(tmp_path, tiny_cfg):
    # hydra/launcher=slurm_local: submitit runs one task per device, each task joins the
    # job's process group, as srun's tasks do on a cluster.
    import pytest

    from framework import fit

    sweep = tmp_path / "slurm"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "framework.train",
            "-m",
            "hydra/launcher=slurm_local",
            *TINY,
            "strategy=ddp",
            "trainer.devices=2",
            "callbacks=none",
            "logger=csv",
            f"hydra.sweep.dir={sweep}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((sweep / "0" / "results.json").read_text())
    assert results["status"] == "completed" and results["world_size"] == 2
    assert (sweep / "0" / "ranks" / "1" / "train.log").exists()  # rank 1 was a task of its own
    single = fit(tiny_cfg("callbacks=none", "logger=none"), output_dir=str(tmp_path / "single"))
    assert results["metrics"]["val/loss"] == pytest.approx(single["metrics"]["val/loss"], rel=1e-5)
    assert "1 completed" in (sweep / "report.md").read_text()


def test_a_signal_stops_the_sweep_records_the_job_and_still_reports(tmp_path):
    # the same for a single-process job and a 2-rank job: SIGTERM during job 0 (to rank 1 of
    # the 2-rank one) stops it at a step with last saved, runs no further job, writes the report
    for case, layout in {"single": ["trainer.devices=1"], "ddp": ["strategy=ddp", "trainer.devices=2"]}.items():
        sweep = tmp_path / case
        rank = layout[-1][-1:] == "2"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "framework.train",
                "-m",
                *TINY,
                *layout,
                "seed=1,2,3",
                "trainer.accelerator=cpu",
                "callbacks=model_checkpoint",
                "callbacks.model_checkpoint.monitor=null",
                "logger=csv",
                "+callbacks.sig._target_=tests.helpers.probes.SignalAt",
                "+callbacks.sig.step=3",
                f"+callbacks.sig.rank={int(rank)}",
                f"hydra.sweep.dir={sweep}",
            ],
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert proc.returncode == 128 + 15, (case, proc.stderr[-3000:])
        assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0"], case  # no further job
        results = json.loads((sweep / "0" / "results.json").read_text())
        assert results["status"] == "interrupted" and (sweep / "0" / "checkpoints" / "last").is_dir(), case
        report = (sweep / "report.md").read_text()
        assert "0 missing, 1 interrupted" in report, case
        assert "Stopped by signal 15 before its end: the jobs after these never started." in report, case
        # and how to continue it: the same command into this directory
        assert "python -m framework.train -m experiment=digits_mlp" in report, case
        assert "seed=1,2,3 ++trainer.accelerator=cpu" in report and f"hydra.sweep.dir={sweep.resolve()}" in report, case


def test_one_command_sweeps_every_communication_algorithm_and_compares_their_bytes(tmp_path):
    sweep = tmp_path / "sweep"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "framework.train",
            "-m",
            "experiment=digits_comm_algorithms",
            "trainer.max_epochs=2",
            "trainer.limit_train_batches=6",
            "trainer.enable_progress_bar=false",
            "callbacks=none",
            "logger=csv",
            f"hydra.sweep.dir={sweep}",
        ],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(sweep / "report.csv") as f:
        rows = {r["strategy"]: r for r in csv.DictReader(f)}
    bagua = [
        "bagua/" + a
        for a in ("gradient_allreduce", "bytegrad", "decentralized", "low_precision_decentralized", "qadam", "async")
    ]
    assert sorted(rows) == sorted(["ddp", "horovod", *bagua])
    assert all(r["status"] == "completed" and r["world_size"] == "2" for r in rows.values())
    assert {s: rows[s]["comm_algorithm"] for s in ("ddp", "horovod", "bagua/bytegrad")} == {
        "ddp": "ddp/allreduce",
        "horovod": "horovod/average",
        "bagua/bytegrad": "bagua/bytegrad",
    }
    full = float(rows["ddp"]["comm_bytes_per_step"])
    assert (
        float(rows["horovod"]["comm_bytes_per_step"])
        == float(rows["bagua/gradient_allreduce"]["comm_bytes_per_step"])
        == full
    )
    assert float(rows["bagua/bytegrad"]["comm_bytes_per_step"]) <= 0.3 * full
    # the same gradients, averaged three ways: the same model
    assert rows["ddp"]["test/acc"] == rows["horovod"]["test/acc"] == rows["bagua/gradient_allreduce"]["test/acc"]


def test_report_flags_impossible_speedups_and_shows_each_jobs_loss_difference(tmp_path):
    from framework.report import collect, write_report

    losses = {"0": [2.0, 1.5, 1.0], "1": [2.0, 1.5 * (1 + 3e-7), 1.0], "2": [2.0, 1.6, 1.2]}
    for name, strategy, world, rate in [("0", "single", 1, 100.0), ("1", "ddp", 2, 1200.0), ("2", "fsdp", 2, 150.0)]:
        _job(tmp_path, name, [f"strategy={strategy}", f"++trainer.devices={world}"], world, rate, 1.0, strategy)
        (tmp_path / name / "metrics.csv").write_text(
            "step,train/loss\n" + "".join(f"{i + 1},{v}\n" for i, v in enumerate(losses[name]))
        )
    rows = {r["job"]: r for r in collect(tmp_path)}
    assert (
        rows["1"]["speedup"] == 12.0 and "noise: a 12.00x speed-up on 2 ranks is outside [1/2, 2]" in rows["1"]["notes"]
    )
    assert rows["2"]["speedup"] == 1.5 and not rows["2"].get("notes")
    assert rows["0"]["loss_rel_diff"] == 0.0 and rows["1"]["loss_rel_diff"] == pytest.approx(3e-7)
    assert rows["2"]["loss_rel_diff"] == pytest.approx(0.2)  # 1.2 against 1.0
    report = write_report(tmp_path).read_text()
    assert "| loss_rel_diff |" in report and "Flagged 'noise'" in report


def test_report_takes_steady_state_throughput_and_flags_unsteady_windows(tmp_path):
    from framework.engine.results import throughput
    from framework.report import collect

    steady = throughput([1.0] + [0.1] * 24, 25 * 32)  # a slow first step: warm-up, left out
    assert steady["warmup_steps"] == 5 and steady["samples_per_s"] == pytest.approx(320.0)
    assert steady["samples_per_s_all"] < 300 and len(steady["samples_per_s_windows"]) == 5
    unsteady = throughput([0.1] * 20 + [0.3] * 5, 25 * 32)
    for name, th in [("0", steady), ("1", unsteady)]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(
            json.dumps(
                {
                    "status": "completed",
                    "strategy": "single",
                    "devices": 1,
                    "world_size": 1,
                    "throughput": th,
                    "job": {"overrides": [f"seed={name}"]},
                }
            )
        )
    rows = {r["job"]: r for r in collect(tmp_path)}
    assert rows["0"]["samples_per_s_min"] == rows["0"]["samples_per_s_max"] and not rows["0"].get("notes")
    assert "noisy timing" in rows["1"]["notes"]


def test_report_notes_an_algorithm_that_never_left_its_warm_up(tmp_path):
    from framework.report import collect

    for name, steps in [("0", 38), ("1", 152)]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(
            json.dumps(
                {
                    "status": "completed",
                    "strategy": "bagua",
                    "devices": 2,
                    "world_size": 2,
                    "steps": steps,
                    "comm": {"bytes_per_step": 1.0, "algorithm": "bagua/qadam", "warmup_steps": 100},
                    "job": {"overrides": ["strategy=bagua/qadam", f"trainer.max_epochs={steps}"]},
                }
            )
        )
    rows = {r["job"]: r for r in collect(tmp_path)}
    assert "never left its warm-up (38 steps <= strategy.warmup_steps=100)" in rows["0"]["notes"]
    assert not rows["1"].get("notes")


def test_a_key_given_on_the_command_line_replaces_the_experiments_sweep_of_it(tmp_path):
    # an experiment that sweeps trainer.max_epochs; the command line asks for one value of it
    (tmp_path / "configs" / "experiment").mkdir(parents=True)
    (tmp_path / "configs" / "experiment" / "epochs_sweep.yaml").write_text(
        "# @package _global_\ndefaults:\n  - digits_mlp\n  - _self_\n"
        "hydra:\n  sweeper:\n    params:\n      trainer.max_epochs: 1,2,3\n      seed: 1,2\n"
    )
    sweep = tmp_path / "sweep"
    command = [sys.executable, "-m", "framework.train", "-m", *TINY[1:], "experiment=epochs_sweep"]
    proc = subprocess.run(
        [
            *command,
            "trainer.max_epochs=1",  # (handed to Hydra as ++trainer.max_epochs=1: it made a second axis)
            "trainer.limit_train_batches=2",
            "test=false",
            "callbacks=none",
            "logger=csv",
            f"hydra.searchpath=[file://{tmp_path / 'configs'}]",
            f"hydra.sweep.dir={sweep}",
        ],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = [json.loads((sweep / str(n) / "results.json").read_text()) for n in range(2)]
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1"]  # the seeds' axis only
    assert [r["epochs"] for r in jobs] == [1, 1] and [r["seed"] for r in jobs] == [1, 2]
