"""Seeds aggregated, from job directories written by hand: summary.csv's means, sample standard
deviations and t intervals against the formulas, Welch's interval of a difference, a setting of one
seed without an interval, the report without scipy, and several sweep directories reported together."""

from __future__ import annotations

import csv
import json
import math
import statistics
import sys

import pytest

from framework.report import collect_many, write_report
from framework.report.statistics import summarize, welch_difference

T_975 = {2: 4.302652729911275, 3: 3.182446305284263}  # Student's t, 97.5% quantile, by degrees of freedom


def _job(sweep, name, lr, seed, val_loss, status="completed", losses=(2.0, 1.0)):
    job = sweep / str(name)
    job.mkdir(parents=True)
    results = {
        "status": status,
        "strategy": "single",
        "devices": 1,
        "world_size": 1,
        "metrics": {"val/loss": val_loss, "val/acc": 1 - val_loss / 4},
        "job": {"overrides": ["experiment=digits_mlp", f"++optimizer.lr={lr}", f"seed={seed}"]},
    }
    (job / "results.json").write_text(json.dumps(results))
    (job / "metrics.csv").write_text("step,train/loss\n" + "".join(f"{s},{v}\n" for s, v in enumerate(losses, 1)))


def test_summarize_is_the_sample_mean_std_and_t_interval():
    values = [0.8, 0.9, 1.3]
    stats = summarize(values)
    mean, std = statistics.mean(values), statistics.stdev(values)
    assert stats["n"] == 3 and stats["mean"] == pytest.approx(mean) and stats["std"] == pytest.approx(std)
    half = T_975[2] * std / math.sqrt(3)
    assert (stats["ci95_low"], stats["ci95_high"]) == pytest.approx((mean - half, mean + half))
    assert summarize([0.5]) == {"n": 1, "mean": 0.5, "std": None, "ci95_low": None, "ci95_high": None}


def test_welch_difference_is_the_unequal_variance_interval():
    a, b = [1.0, 1.2, 1.1, 1.4], [0.5, 0.9, 0.6]
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))  # Welch-Satterthwaite
    from scipy import stats

    half = stats.t.ppf(0.975, df) * math.sqrt(va + vb)
    difference = statistics.mean(a) - statistics.mean(b)
    assert welch_difference(a, b) == pytest.approx((difference, difference - half, difference + half))
    assert welch_difference(a, [0.5]) is None  # one seed: no interval


def test_summary_csv_and_the_report_aggregate_the_seeds_of_each_setting(tmp_path):
    for name, (lr, seed, loss) in enumerate(
        [("0.1", 0, 1.0), ("0.1", 1, 1.1), ("0.1", 2, 1.3), ("0.2", 0, 0.5), ("0.2", 1, 0.6), ("0.3", 0, 0.9)]
    ):
        _job(tmp_path, name, lr, seed, loss, losses=(2.0, loss))
    _job(tmp_path, 6, "0.3", 1, 0.1, status="failed")  # not counted: n is the completed jobs
    report = write_report(tmp_path).read_text()
    with open(tmp_path / "summary.csv") as f:
        reader = csv.DictReader(f)
        rows = {row["optimizer.lr"]: row for row in reader}
    assert reader.fieldnames[:6] == [
        "optimizer.lr",
        "n",
        "val/acc_mean",
        "val/acc_std",
        "val/acc_ci95_low",
        "val/acc_ci95_high",
    ]
    assert [rows[lr]["n"] for lr in ("0.1", "0.2", "0.3")] == ["3", "2", "1"]
    assert float(rows["0.1"]["val/loss_mean"]) == pytest.approx(statistics.mean([1.0, 1.1, 1.3]))
    assert float(rows["0.1"]["val/loss_std"]) == pytest.approx(statistics.stdev([1.0, 1.1, 1.3]))
    assert rows["0.3"]["val/loss_std"] == rows["0.3"]["val/loss_ci95_low"] == ""  # one seed: no interval claimed
    assert "## Settings (jobs that differ only in seed)" in report
    assert "| 0.3 | 1 | 0.775 | 0.9 |" in report  # n = 1: the mean alone
    assert "Best setting by val/loss (min): optimizer.lr=0.2: mean 0.55, 95% interval [" in report
    assert "- optimizer.lr=0.1: +0.5833 [" in report and "beyond the noise" in report
    assert "- optimizer.lr=0.3: no interval (n = 1 on one side)" in report
    assert (tmp_path / "loss_curves.png").read_bytes()[:4] == b"\x89PNG"


def test_without_scipy_the_means_and_deviations_stay_and_the_report_says_what_to_install(tmp_path, monkeypatch):
    for name, (lr, seed, loss) in enumerate([("0.1", 0, 1.0), ("0.1", 1, 1.2), ("0.2", 0, 0.5), ("0.2", 1, 0.7)]):
        _job(tmp_path, name, lr, seed, loss)
    monkeypatch.setitem(sys.modules, "scipy", None)  # import scipy fails, as where it is not installed
    monkeypatch.setitem(sys.modules, "scipy.stats", None)
    report = write_report(tmp_path).read_text()
    with open(tmp_path / "summary.csv") as f:
        row = next(csv.DictReader(f))
    assert float(row["val/loss_std"]) == pytest.approx(statistics.stdev([1.0, 1.2])) and row["val/loss_ci95_low"] == ""
    assert "No intervals: pip install 'framework[sweep]' (scipy) for the 95% intervals." in report


def test_several_sweep_directories_are_one_study(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    _job(first, 0, "0.1", 0, 1.0)
    _job(first, 1, "0.2", 0, 0.5)
    _job(second, 0, "0.1", 1, 1.2)  # the study continued with another seed in a sweep of its own
    _job(second, 1, "0.2", 1, 0.7)
    rows = collect_many([first, second])
    assert [r["job"] for r in rows] == ["a/0", "a/1", "b/0", "b/1"]
    write_report(first, rows, together=[second])
    with open(first / "summary.csv") as f:
        assert [(r["optimizer.lr"], r["n"]) for r in csv.DictReader(f)] == [("0.1", "2"), ("0.2", "2")]
    assert (first / "report.md").read_text().startswith(f"# Sweep report: {first} + {second}")
