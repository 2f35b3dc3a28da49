"""optimizer.param_groups: groups by name pattern, checked before anything starts, applied by
the optimizer, and logged per group by the LR monitor. (Every strategy and resume: BASE
declares groups, so the equivalence, resume and launcher tests run with them.)"""

from __future__ import annotations

import csv

import pytest

from framework import compose, fit
from framework.config import ConfigError
from framework.job.preflight import preflight
from tests.helpers.configs import TINY
from tests.helpers.probes import GroupProbe

GROUPS = (
    "optimizer.param_groups=[{params: '*.bias', weight_decay: 0.0, name: no_decay},"
    " {params: 'body.1.*|nothing.*', lr: 0.0001}]"
)


def test_groups_take_parameters_by_pattern_first_match_wins_and_the_lr_monitor_names_them(tmp_path):
    cfg = compose(
        TINY
        + [
            "optimizer=adamw",
            "optimizer.lr=0.01",
            "logger=csv",
            "callbacks=lr_monitor",
            GROUPS,
            "+callbacks.probe._target_=tests.helpers.probes.GroupProbe",
        ]
    )
    assert fit(cfg, output_dir=str(tmp_path))["status"] == "completed"
    default, no_decay, second = GroupProbe.seen
    # the default group first, with the optimizer's own settings: the weights not matched
    assert default == (None, ["head.weight"], 0.01, 0.01)
    # biases, body.1's included: the first entry that matches a name takes it
    assert no_decay == ("no_decay", ["body.1.bias", "head.bias"], 0.0, 0.01)
    assert second == ("pg2", ["body.1.weight"], 0.01, 0.0001)
    with open(tmp_path / "metrics.csv") as f:
        row = next(r for r in csv.DictReader(f) if r.get("lr-AdamW"))
    assert (float(row["lr-AdamW"]), float(row["lr-AdamW/no_decay"]), float(row["lr-AdamW/pg2"])) == (0.01, 0.01, 0.0001)


def problems(*overrides: str) -> list[str]:
    with pytest.raises(ConfigError) as err:
        preflight(compose(TINY + list(overrides)))
    return err.value.problems


def test_a_pattern_that_takes_no_parameter_is_refused_before_anything_starts():
    [msg] = problems("optimizer.param_groups=[{params: 'backbone.*', lr: 0.0001}]")
    assert (
        msg.startswith(
            "optimizer.param_groups[0].params: 'backbone.*' takes no parameter (it matches no parameter name)"
        )
        and "body.1.weight" in msg
    )
    [msg] = problems("optimizer.param_groups=[{params: '*'}, {params: '*.bias'}]")
    assert "param_groups[1]" in msg and "earlier entries took every parameter it matches" in msg


def test_group_entries_are_checked_against_the_optimizer():
    found = problems("optimizer=sgd", "optimizer.param_groups=[{params: '*.bias', weight_decey: 0.0}, {lr: 0.1}, 3]")
    assert found[0].startswith("optimizer.param_groups[0].weight_decey: not a setting of this optimizer; valid:")
    assert "weight_decay" in found[0] and "momentum" in found[0]
    assert found[1].startswith("optimizer.param_groups[1].params: expected name patterns")
    assert found[2].startswith("optimizer.param_groups[2]: expected a mapping")
    assert problems("optimizer.param_groups={params: '*'}")[0].startswith("optimizer.param_groups: expected a list")
