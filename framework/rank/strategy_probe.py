"""``strategy=auto`` in the ranks: take the first candidate that fits (the job planned them,
job/strategy_choice.py), or with ``strategy.probe_steps`` the fastest by that many real steps of
each, in this launch of the ranks: one process group, no new process per candidate.

A probe trains a fresh model through the candidate (no callbacks, loggers, checkpoints or
validation; a scratch directory) and is dropped; the run then builds everything again from its
seed, so it is the same run as one given the chosen strategy. Every rank takes the slowest rank's
median step time of each candidate, so all of them choose the same.
"""

from __future__ import annotations

import gc
import logging
import statistics
import tempfile

from framework.config.environment import RankEnv
from framework.config.experiment import Experiment
from framework.rank.benchmark_repeats import fit_quietly
from framework.strategies import build_strategy
from framework.strategies.comm.collectives import all_gather_object

log = logging.getLogger(__name__)

# The probe's first step (allocation, the first collective's set-up) is not timed.
WARMUP_STEPS = 1


def choose_strategy(run: Experiment, env: RankEnv, signals=None) -> tuple[Experiment, dict | None]:
    """``run`` with its strategy the chosen candidate, and the choice's record for results.json
    (None when the strategy was no resolved ``auto``)."""
    node = run.strategy
    if node.get("name") != "auto" or not node.get("candidates"):
        return run, None
    candidates, plan = node["candidates"], node.get("plan") or {}
    labels = [row["strategy"] for row in plan.get("candidates", []) if row.get("fits")]
    if len(labels) != len(candidates):  # a config.yaml edited by hand: the candidates' own names
        labels = [c["name"] for c in candidates]
    steps = int(node.get("probe_steps") or 0)
    measured, spreads = {}, {}
    if steps > 0 and len(candidates) > 1:
        probes = [_probe(run, env, candidate, steps, signals, name) for candidate, name in zip(candidates, labels)]
        ranks = all_gather_object(probes)  # every rank: the same figures, the slowest rank's
        measured = {label: max(r[i][0] for r in ranks) for i, label in enumerate(labels)}
        spreads = {label: max(r[i][1] for r in ranks) for i, label in enumerate(labels)}
        chosen = _simplest_within_noise(labels, measured, spreads)
    else:
        chosen = 0
    record = _record(plan, labels[chosen], steps, measured, spreads)
    for line in decision_lines(plan, measured, record["chosen"]):
        log.info("%s", line)
    log.info("strategy=auto chose %s (%s)", record["chosen"], record["by"])
    return run.with_config(strategy=candidates[chosen]), record


def _simplest_within_noise(labels: list[str], times: dict, spreads: dict) -> int:
    """The first candidate (they come in order of preference: the simplest first) whose step time
    the probe cannot tell from the fastest's: slower by no more than either one's spread."""
    fastest = min(labels, key=times.get)
    return next(
        i
        for i, label in enumerate(labels)
        if label == fastest or times[label] / times[fastest] - 1 <= max(spreads[label], spreads[fastest])
    )


def _record(plan: dict, chosen: str, steps: int, measured: dict, spreads: dict) -> dict:
    rows = [
        {**row, "step_time_s": measured.get(row["strategy"]), "step_time_spread": spreads.get(row["strategy"])}
        for row in plan.get("candidates", [])
    ]
    return {
        **{k: v for k, v in plan.items() if k != "candidates"},
        "chosen": chosen,
        "by": _reason(chosen, steps, measured, spreads),
        "probe_steps": steps if measured else 0,
        "within_noise": bool(measured) and chosen != min(measured, key=measured.get),
        "candidates": rows,
    }


def _reason(chosen: str, steps: int, measured: dict, spreads: dict) -> str:
    """Why ``chosen``, in words: the fastest (by how much), or as fast as the probe can tell."""
    if not measured:
        return "the first candidate that fits" + ("" if steps else " (strategy.probe_steps=0)")
    fastest = min(measured, key=measured.get)
    if chosen != fastest:
        margin = measured[chosen] / measured[fastest] - 1
        return (
            f"{fastest} was {margin:.1%} faster by {steps} probe steps each, within the probe's noise "
            f"(step times spread {max(spreads[chosen], spreads[fastest]):.1%}): the simpler strategy is kept"
        )
    others = {k: v for k, v in measured.items() if k != chosen}
    runner_up = min(others, key=others.get)
    return (
        f"the fastest of {len(measured)} by {steps} probe steps each, {measured[runner_up] / measured[chosen] - 1:.1%} "
        f"ahead of {runner_up} (step times spread {max(spreads[chosen], spreads[runner_up]):.1%})"
    )


def _probe(run: Experiment, env: RankEnv, candidate: dict, steps: int, signals, name: str) -> tuple[float, float]:
    """The median seconds per step of ``steps`` steps (after the warm-up) through ``candidate``, and
    their spread (the median absolute deviation scaled to a standard deviation, over the median)."""
    probing = {
        "max_steps": steps + WARMUP_STEPS,
        "max_epochs": -1,
        "max_time": None,
        "limit_val_batches": 0,
        "num_sanity_val_steps": 0,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "enable_checkpointing": False,
        "profiler": None,
    }
    probe = run.with_config(strategy=candidate, trainer={**run.config["trainer"], **probing})
    strategy = build_strategy(probe, env)
    strategy.setup_environment()  # the first candidate joins the job's process group; the others find it
    with tempfile.TemporaryDirectory(prefix="framework-probe-") as scratch:
        times = fit_quietly(probe, env, strategy, scratch, signals).step_times[WARMUP_STEPS:]
    del strategy
    gc.collect()  # the candidate's wrapped model and optimizer go before the next one is built
    log.info(
        "strategy=auto probe %s: %s s/step over %d steps",
        name,
        f"{statistics.median(times):.4g}" if times else "?",
        len(times),
    )
    if not times:
        return float("inf"), 0.0
    median = statistics.median(times)
    return median, 1.4826 * statistics.median(abs(t - median) for t in times) / median if median > 0 else 0.0


def mib(value: float | None) -> str:
    """Bytes in MiB (KiB below one MiB, where a toy model's figures would all read 0.0 or 0.1)."""
    if value is None:
        return "?"
    return f"{value / 2**20:.1f} MiB" if value >= 2**20 else f"{value / 2**10:.1f} KiB"


def decision_lines(plan: dict, measured: dict | None = None, chosen: str | None = None) -> list[str]:
    """The decision as a table, one line per candidate (for train.log and framework-plan --choose)."""
    limit = plan["memory_limit_bytes"]
    lines = [
        f"strategy=auto: memory limit {mib(limit)} per device ({plan['memory_limit_source']}), margin "
        f"{plan['memory_margin']:.0%}"
        if limit
        else f"strategy=auto: no memory limit ({plan['memory_limit_source']})"
    ]
    for row in plan["candidates"]:
        step = (measured or {}).get(row["strategy"])
        verdict = "chosen" if row["strategy"] == chosen else (row["dropped"] or "fits")
        lines.append(
            f"  {row['strategy']:<14} {mib(row['predicted_bytes']):>12}"
            + (f"  {step * 1e3:9.2f} ms/step" if step is not None else "")
            + f"  {verdict}"
        )
    return lines
