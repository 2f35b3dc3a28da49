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

from omegaconf import DictConfig, OmegaConf

from framework.config.environment import RankEnv
from framework.rank.benchmark_repeats import fit_quietly
from framework.strategies import build_strategy
from framework.strategies.collectives import all_gather_object

log = logging.getLogger(__name__)

# The probe's first step (allocation, the first collective's set-up) is not timed.
WARMUP_STEPS = 1


def choose_strategy(cfg: DictConfig, env: RankEnv, signals=None) -> tuple[DictConfig, dict | None]:
    """``cfg`` with its strategy the chosen candidate, and the choice's record for results.json
    (None when the strategy was no resolved ``auto``)."""
    node = OmegaConf.to_container(cfg.strategy, resolve=True)
    if node.get("name") != "auto" or not node.get("candidates"):
        return cfg, None
    candidates, plan = node["candidates"], node.get("plan") or {}
    labels = [row["strategy"] for row in plan.get("candidates", []) if row.get("fits")]
    if len(labels) != len(candidates):  # a config.yaml edited by hand: the candidates' own names
        labels = [c["name"] for c in candidates]
    steps = int(node.get("probe_steps") or 0)
    measured = {}
    if steps > 0 and len(candidates) > 1:
        times = [_probe(cfg, env, candidate, steps, signals, name) for candidate, name in zip(candidates, labels)]
        slowest = [max(ts) for ts in zip(*all_gather_object(times))]  # every rank: the same figures
        measured = dict(zip(labels, slowest))
        chosen = min(range(len(candidates)), key=lambda i: slowest[i])
    else:
        chosen = 0
    record = _record(plan, labels[chosen], steps, measured)
    for line in decision_lines(plan, measured, record["chosen"]):
        log.info("%s", line)
    log.info("strategy=auto chose %s (%s)", record["chosen"], record["by"])
    return _with_strategy(cfg, candidates[chosen]), record


def _with_strategy(cfg: DictConfig, node: dict) -> DictConfig:
    container = OmegaConf.to_container(cfg, resolve=True)
    container["strategy"] = node
    return OmegaConf.create(container)


def _record(plan: dict, chosen: str, steps: int, measured: dict) -> dict:
    rows = [{**row, "step_time_s": measured.get(row["strategy"])} for row in plan.get("candidates", [])]
    by = f"the fastest of {len(measured)} by {steps} probe steps each" if measured else \
        "the first candidate that fits" + ("" if steps else " (strategy.probe_steps=0)")
    return {**{k: v for k, v in plan.items() if k != "candidates"}, "chosen": chosen, "by": by,
            "probe_steps": steps if measured else 0, "candidates": rows}


def _probe(cfg: DictConfig, env: RankEnv, candidate: dict, steps: int, signals, name: str) -> float:
    """The median seconds per step of ``steps`` steps (after the warm-up) through ``candidate``."""
    probe = _with_strategy(OmegaConf.merge(cfg, {"trainer": {
        "max_steps": steps + WARMUP_STEPS, "max_epochs": -1, "max_time": None, "limit_val_batches": 0,
        "num_sanity_val_steps": 0, "enable_progress_bar": False, "enable_model_summary": False,
        "enable_checkpointing": False, "profiler": None}}), candidate)
    strategy = build_strategy(OmegaConf.to_container(probe, resolve=True), env)
    strategy.setup_environment()  # the first candidate joins the job's process group; the others find it
    with tempfile.TemporaryDirectory(prefix="framework-probe-") as scratch:
        times = fit_quietly(probe, env, strategy, scratch, signals).step_times[WARMUP_STEPS:]
    del strategy
    gc.collect()  # the candidate's wrapped model and optimizer go before the next one is built
    log.info("strategy=auto probe %s: %s s/step over %d steps", name,
             f"{statistics.median(times):.4g}" if times else "?", len(times))
    return statistics.median(times) if times else float("inf")


def mib(value: float | None) -> str:
    """Bytes in MiB (KiB below one MiB, where a toy model's figures would all read 0.0 or 0.1)."""
    if value is None:
        return "?"
    return f"{value / 2**20:.1f} MiB" if value >= 2**20 else f"{value / 2**10:.1f} KiB"


def decision_lines(plan: dict, measured: dict | None = None, chosen: str | None = None) -> list[str]:
    """The decision as a table, one line per candidate (for train.log and framework-plan --choose)."""
    limit = plan["memory_limit_bytes"]
    lines = [f"strategy=auto: memory limit {mib(limit)} per device ({plan['memory_limit_source']}), margin "
             f"{plan['memory_margin']:.0%}" if limit else f"strategy=auto: no memory limit ({plan['memory_limit_source']})"]
    for row in plan["candidates"]:
        step = (measured or {}).get(row["strategy"])
        verdict = "chosen" if row["strategy"] == chosen else (row["dropped"] or "fits")
        lines.append(f"  {row['strategy']:<14} {mib(row['predicted_bytes']):>12}"
                     + (f"  {step * 1e3:9.2f} ms/step" if step is not None else "") + f"  {verdict}")
    return lines
