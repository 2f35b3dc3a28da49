"""device_stats: memory and CPU figures logged as metrics at the configured interval."""

from __future__ import annotations

import csv

from framework import compose, fit
from tests.helpers.configs import TINY


def test_device_stats_are_logged_every_n_steps_and_at_epoch_ends(tmp_path):
    results = fit(
        compose([*TINY, "logger=csv", "callbacks=[device_stats]", "callbacks.device_stats.every_n_steps=4"]),
        output_dir=str(tmp_path),
    )
    assert results["status"] == "completed"
    with open(tmp_path / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("device/rss_mib")]
    assert [int(r["step"]) for r in rows] == [4, 6, 8, 12]  # steps 4, 8, 12 and the epoch ends (6, 12: one row)
    for row in rows:
        assert 10 < float(row["device/rss_mib"]) <= float(row["device/max_rss_mib"]) + 1
        assert float(row["device/rss_mib_max_rank"]) == float(row["device/rss_mib"])  # one rank
        assert 0 < float(row["device/cpu_util"]) < 8
